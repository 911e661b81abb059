-- The generation loops on GPU replicas (tag: gpu). Runs where a GPU is visible; reported
-- as pending elsewhere. Greedy speculative decoding equals plain greedy decoding (fp32 past
-- the sliding window, where each rejection steps back into the ring, and bf16); forked
-- parallel samples equal fresh prefills with their seeds; beam search in fp32 equals the
-- CPU golden's; getp's shared chat prefix leaves the outputs as they are without it; a chat
-- whose first reply outran the windowed ring answers its second ask; a draft whose chunk cannot
-- go back k - 1 positions is refused.
local gptoss = require "gptoss"
local beam = require "gptoss.beam"
local chat = require "gptoss.chat"
local generate = require "gptoss.generate"
local getp = require "gptoss.getp"
local harmony = require "gptoss.harmony"
local speculative = require "gptoss.speculative"
local H = require "helpers"

local has_gpu = #gptoss.devices() > 0

describe("generation loops on a GPU #gpu", function()
  if not has_gpu then
    pending("no GPU visible to this build (gptoss.devices() is empty)")
    return
  end
  local model = gptoss.synthetic("7m", { seed = 1 })
  local draft_model = gptoss.synthetic({ n_layers = 1 }, { seed = 1 })
  local PROMPT = { 13225, 2375, 11, 1495, 3293, 448, 261, 1058 }

  for _, case in ipairs { { "fp32", 170 }, { "bf16", 60 } } do
    local mode, tokens = case[1], case[2]
    it(("gives plain greedy decoding's ids with speculative decoding (%s, %d ids)"):format(mode, tokens), function()
      local opts = { device = 0, weights = mode, kv = mode, ctx = #PROMPT + tokens }
      local target <close> = model:replica(H.with(opts, { slots = 2 }))
      local draft <close> = draft_model:replica(H.with(opts, { slots = 1 }))
      local want = generate.run { replica = target, prompt = PROMPT, max_tokens = tokens }.ids
      for _, d in ipairs { { draft, 1 }, { target, 2 } } do
        local got = speculative.generate { target = target, draft = d[1], draft_slot = d[2], prompt = PROMPT, k = 4,
          max_tokens = tokens, on_round = function(round)
            assert.are.equal(round.position + #round.drafted + 1, target:length(1))
          end }
        assert.are.same(want, got.ids)
      end
    end)
  end

  it("refuses a draft whose chunk is too short to go back k - 1 positions", function()
    local opts = { device = 0, weights = "bf16", kv = "bf16", ctx = 64 }
    local target <close> = model:replica(H.with(opts, { slots = 1 }))
    local draft <close> = draft_model:replica(H.with(opts, { slots = 1, rows = 2, chunk = 2 }))
    H.expect_error(function()
      speculative.generate { target = target, draft = draft, prompt = PROMPT, k = 4, max_tokens = 4 }
    end, "speculative.generate: after a rejection the draft goes back up to k - 1 = 3 positions; "
      .. "it may go back at most 2 (its chunk)")
    local got = speculative.generate { target = target, draft = draft, prompt = PROMPT, k = 3, max_tokens = 4 }
    assert.are.equal(4, #got.ids)
  end)

  it("forks parallel samples that equal fresh prefills with their seeds (bf16)", function()
    local opts = { device = 0, weights = "bf16", kv = "bf16", ctx = 64 }
    local r <close> = model:replica(H.with(opts, { slots = 4 }))
    local fresh <close> = model:replica(H.with(opts, { slots = 1 }))
    local sampling = { temperature = 0.9, seed = 11 }
    local got = generate.parallel { replica = r, prompt = PROMPT, n = 4, max_tokens = 24, sampling = sampling }
    for i, s in ipairs(got.samples) do
      local want = generate.run { replica = fresh, prompt = PROMPT, max_tokens = 24,
        sampling = H.with(sampling, { seed = 11 + i - 1 }) }
      assert.are.same(want.ids, s.ids, "sample " .. i)
    end
  end)

  it("finds the CPU golden's beams in fp32", function()
    local opts = { slots = 4, ctx = 32, weights = "fp32", kv = "fp32" }
    local gpu <close> = model:replica(H.with(opts, { device = 0 }))
    local cpu <close> = model:replica(opts)
    local search = { prompt = PROMPT, width = 4, max_tokens = 10 }
    local g, c = beam.search(H.with(search, { replica = gpu })), beam.search(H.with(search, { replica = cpu }))
    assert.are.equal(#c.hypotheses, #g.hypotheses)
    for i, h in ipairs(c.hypotheses) do
      assert.are.same(h.ids, g.hypotheses[i].ids)
      assert.is_true(math.abs(h.score - g.hypotheses[i].score) < 1e-4) -- fp32 logits within 1e-6 of the golden
    end
  end)

  it("runs getp's chat requests with the shared prefix forked: the outputs without it (bf16)", function()
    local tok = gptoss.tokenizer(H.TOKENIZER)
    local base = { model = model, tokenizer = tok, devices = { 0 }, steps = 96, chat = true,
      replica = { weights = "bf16", kv = "bf16" },
      requests = { "Hello", "Write a short haiku about the ocean.", "2 + 2 =", "Once upon a time" } }
    local shared = getp.run(base)
    local plain = getp.run(H.with(base, { share_prefix = false }))
    assert.are.same(plain.outputs, shared.outputs)
    assert.is_true(shared.prefill_saved > 0 and plain.prefill_saved == 0)
    io.stderr:write(("[gpu-loops] getp chat on a GPU: %d prefill rows saved\n"):format(shared.prefill_saved))
  end)

  it("answers a chat's second ask after a first reply longer than the windowed ring, feeding it all again", function()
    local tok = gptoss.tokenizer(H.TOKENIZER)
    -- a window of 8 and chunks of 4: the windowed layers keep a ring of the last 11 positions
    local windowed = gptoss.synthetic({ sliding_window = 8 }, { seed = 1 })
    local r <close> = windowed:replica { device = 0, slots = 1, ctx = 256, rows = 8, chunk = 4 }
    local s = chat.new { replica = r, tokenizer = tok, sampling = { temperature = 0 }, max_tokens = 40 }
    s:ask("Tell me about the sea.")
    -- the slot wrote positions 0..#held - 1 in order: its ring holds those from #held - 11 on
    local held, limit = #s.held, r:rewind_limit(1)
    assert.are.equal(held - 11 + 8 - 1, limit)
    -- the second rendering's common prefix with the slot, as the session finds it, lies below
    local messages = table.move(s.messages, 1, #s.messages, 1, {})
    messages[#messages + 1] = harmony.user("And the sky?")
    local ids, keep = harmony.render_ids(messages, tok), 0
    while keep < held and keep < #ids - 1 and s.held[keep + 1] == ids[keep + 1] do keep = keep + 1 end
    assert(keep > 0 and keep < limit, ("the common prefix (%d ids) lies below %d"):format(keep, limit))
    -- a step there is refused, naming the limit, and changes nothing
    H.expect_error(function() r:step { slots = { 1 }, positions = { keep }, tokens = { ids[keep + 1] } } end,
      ("step: positions[1] = %d needs the keys of positions"):format(keep),
      ("which holds positions from %d on: rows can go back to position %d or start again at 0")
        :format(held - 11, limit))
    assert.are.equal(held, r:length(1))
    local _, stats = s:ask("And the sky?")
    assert.are.equal(#ids, stats.prefilled)
    assert.are.equal(r:length(1), #s.held)
    assert.are.same(ids, table.move(s.held, 1, #ids, 1, {}))
  end)
end)
