-- gptoss.speculative on CPU replicas: greedy speculative decoding equals plain greedy
-- decoding token for token, with drafts that agree often, rarely or always (the target
-- itself), one replica or two, and both slots' lengths after every round (rejected rows
-- are overwritten, never undone); stops and the context end it as they end generate.run.
-- With sampling, the acceptance rule's output distribution equals the target's exactly
-- (every uniform enumerated on a grid that the distributions' thresholds fall on) and, on
-- a model of four tokens, two ids sampled with fixed seeds have the target's joint
-- frequencies within five standard deviations of the sample count; every bad-input error.
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local speculative = require "gptoss.speculative"
local H = require "helpers"

local PROMPT = { 5, 17, 3, 88, 42 }
local target_model = gptoss.synthetic(H.TINY, { seed = 5 })

describe("speculative.generate, greedy", function()
  local drafts = {
    ["one layer of the target"] = gptoss.synthetic(H.with(H.TINY, { n_layers = 1 }), { seed = 5 }),
    ["other weights"] = gptoss.synthetic(H.TINY, { seed = 6 }),
  }

  it("gives plain greedy decoding's ids, rolling both slots back after each rejection", function()
    local target <close> = target_model:replica { slots = 2, ctx = 48 }
    local want = generate.run { replica = target, prompt = PROMPT, max_tokens = 30 }.ids
    local cases = {}
    for name, m in pairs(drafts) do cases[#cases + 1] = { name, m:replica { slots = 1, ctx = 48 }, 1 } end
    cases[#cases + 1] = { "the target itself, in its slot 2", target, 2 }
    for _, case in ipairs(cases) do
      local name, draft, draft_slot = case[1], case[2], case[3]
      for _, k in ipairs { 1, 3, 6 } do
        local what = ("%s, k = %d"):format(name, k)
        local rounds = 0
        local got = speculative.generate { target = target, draft = draft, draft_slot = draft_slot, prompt = PROMPT,
          k = k, max_tokens = 30, on_round = function(round)
            rounds = rounds + 1
            local n = #round.drafted
            -- the target stepped rows position .. position + n, the draft its slot to position + n - 1
            assert.are.equal(round.position + n + 1, target:length(1), what)
            if n > 0 then assert.are.equal(round.position + n, draft:length(draft_slot), what) end
          end }
        assert.are.same(want, got.ids, what)
        assert.are.equal("length", got.finish)
        assert.are.equal(rounds, got.rounds)
        assert.is_true(got.accepted <= got.proposed and got.proposed <= k * got.rounds, what)
        assert.are.equal(30, got.rounds + got.accepted, what) -- every round adds its accepted ids and one
        if draft_slot == 2 then
          assert.are.equal(got.proposed, got.accepted, what)
        else
          assert.is_true(got.accepted < got.proposed, what) -- rows were rejected and overwritten
        end
      end
      if draft ~= target then draft:close() end
    end
  end)

  it("ends at the context and at stops as generate.run does", function()
    local target <close> = target_model:replica { slots = 1, ctx = 14 }
    local draft <close> = drafts["other weights"]:replica { slots = 1, ctx = 10 } -- shorter: fewer drafted near the end
    local want = generate.run { replica = target, prompt = PROMPT }
    local got = speculative.generate { target = target, draft = draft, prompt = PROMPT, k = 3 }
    assert.are.same({ want.ids, "context" }, { got.ids, got.finish })
    local stop = { ids = { { want.ids[4] } } }
    want = generate.run { replica = target, prompt = PROMPT, stop = stop }
    got = speculative.generate { target = target, draft = draft, prompt = PROMPT, k = 3, stop = stop }
    assert.are.same({ want.ids, "stop" }, { got.ids, got.finish })
  end)

  it("streams the text, a stop string cutting it as in generate.run", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local m = gptoss.synthetic("7m", { seed = 1 })
    local target <close> = m:replica { slots = 2, ctx = 40 }
    local prompt = tok:encode("Once upon a time")
    local all = generate.run { replica = target, prompt = prompt, max_tokens = 10, stop = { tokenizer = tok } }
    local piece = tok:piece(all.ids[7])
    local stop = { tokenizer = tok, text = { piece:sub(1, utf8.offset(piece, 2) - 1) } }
    local want = generate.run { replica = target, prompt = prompt, max_tokens = 10, stop = stop }
    local shown = {}
    local got = speculative.generate { target = target, draft = target, draft_slot = 2, prompt = prompt, k = 4,
      max_tokens = 10, stop = stop, on_text = function(t) shown[#shown + 1] = t end }
    assert.are.same({ want.ids, want.text, want.finish, want.stop }, { got.ids, got.text, got.finish, got.stop })
    assert.are.equal(got.text, table.concat(shown))
  end)
end)

describe("the acceptance rule", function()
  -- The distribution of a round's first id (k = 1) under the rule, exactly: the draft's id x
  -- weighs q(x), and each of the two uniforms the round reads takes the midpoints of a grid
  -- of G cells. Distributions whose thresholds (min(1, p/q), the residual's cumulative sums)
  -- are multiples of 1/G make every count exact, and so the sums (dyadic).
  local G = 16
  local function first_id_distribution(p, q)
    local out = {}
    for y = 1, #p do out[y] = 0 end
    for x = 0, #q - 1 do
      if q[x + 1] > 0 then
        for i = 0, G - 1 do
          for j = 0, G - 1 do
            local us = { (i + 0.5) / G, (j + 0.5) / G }
            local n = 0
            local accepted, next_id = speculative.verify({ p, p }, { q }, { x }, function()
              n = n + 1
              return us[n]
            end)
            local y = accepted == 1 and x or next_id
            out[y + 1] = out[y + 1] + q[x + 1] / (G * G)
          end
        end
      end
    end
    return out
  end

  it("gives the target's distribution exactly, whatever the draft's", function()
    for _, case in ipairs {
      { { 1 / 4, 1 / 4, 1 / 4, 1 / 4 }, { 1 / 2, 1 / 4, 1 / 8, 1 / 8 } }, -- some rejected, residual {0, 0, 1/2, 1/2}
      { { 1 / 4, 1 / 2, 1 / 8, 1 / 8 }, { 0, 1, 0, 0 } },                 -- a one-hot draft
      { { 1 / 2, 1 / 2, 0, 0 }, { 0, 0, 1 / 2, 1 / 2 } },                 -- disjoint: always rejected
      { { 1 / 8, 3 / 8, 1 / 4, 1 / 4 }, { 1 / 8, 3 / 8, 1 / 4, 1 / 4 } }, -- equal: always accepted
    } do
      local p, q = case[1], case[2]
      assert.are.same(p, first_id_distribution(p, q))
    end
    -- the grid has the power to tell: the draft's own distribution is not the target's
    assert.are_not.same({ 1 / 2, 1 / 4, 1 / 8, 1 / 8 }, first_id_distribution({ 1 / 4, 1 / 4, 1 / 4, 1 / 4 },
      { 1 / 2, 1 / 4, 1 / 8, 1 / 8 }))
  end)

  it("accepts, draws and takes residuals as written", function()
    assert.is_true(speculative.accepts(0.5, 0.25, 0.999))  -- p >= q: always
    assert.is_true(speculative.accepts(0.25, 0.5, 0.49))
    assert.is_false(speculative.accepts(0.25, 0.5, 0.5))
    assert.are.same({ 0, 0, 2, 1, 3 }, { speculative.draw({ 1, 0, 1, 0 }, 0), speculative.draw({ 1, 0, 1, 0 }, 0.49),
      speculative.draw({ 1, 0, 1, 0 }, 0.5), speculative.draw({ 0, 1 }, 0.999), speculative.draw({ 1, 1, 1, 1 }, 0.9) })
    -- u * total rounded up to the total (a subnormal weight): the last id of non-zero weight
    assert.are.equal(1, speculative.draw({ 0, 2.0 ^ -1074, 0 }, 0.9))
    assert.are.same({ 0, 0.25, 0 }, speculative.residual({ 0.25, 0.5, 0.25 }, { 0.5, 0.25, 0.25 }))
    assert.are.same({ 0.5, 0.5 }, speculative.residual({ 0.5, 0.5 }, { 0.5, 0.5 })) -- none left: p
    local u, sum = speculative.uniforms(3), 0
    for _ = 1, 1000 do
      local v = u()
      assert.is_true(v >= 0 and v < 1)
      sum = sum + v
    end
    assert.is_true(math.abs(sum / 1000 - 0.5) < 0.05)
    assert.are_not.equal(speculative.uniforms(3)(), speculative.uniforms(4)())
  end)
end)

describe("speculative.generate, sampling", function()
  it("samples the target's joint distribution of two ids (4 tokens, fixed seeds, 5 sigma)", function()
    local small = H.with(H.TINY, { vocab_size = 4 })
    local target <close> = gptoss.synthetic(small, { seed = 5 }):replica { slots = 1, ctx = 16 }
    local draft <close> = gptoss.synthetic(small, { seed = 6 }):replica { slots = 1, ctx = 16 }
    local prompt, T = { 1, 2, 3 }, 0.8
    -- the target's distributions after the prompt, and after it and each first id
    local function distribution(ids)
      return speculative.probabilities(generate.feed(target, 1, ids, 0, { logits = true }):logits()[1], T)
    end
    local p1, p2 = distribution(prompt), {}
    for y = 0, 3 do p2[y] = distribution({ 1, 2, 3, y }) end
    local N, counts, proposed, accepted = 4000, {}, 0, 0
    for seed = 1, N do
      local got = speculative.generate { target = target, draft = draft, prompt = prompt, k = 2, max_tokens = 2,
        sampling = { temperature = T, seed = seed } }
      local cell = got.ids[1] * 4 + got.ids[2]
      counts[cell] = (counts[cell] or 0) + 1
      proposed, accepted = proposed + got.proposed, accepted + got.accepted
    end
    assert.is_true(accepted > N / 4 and proposed - accepted > N / 4, "both branches of the rule ran")
    local function within(joint)
      for y1 = 0, 3 do
        for y2 = 0, 3 do
          local p, f = joint(y1, y2), (counts[y1 * 4 + y2] or 0) / N
          if math.abs(f - p) > 5 * math.sqrt(p * (1 - p) / N) + 1 / N then return false, y1, y2, f, p end
        end
      end
      return true
    end
    assert.is_true(within(function(y1, y2) return p1[y1 + 1] * p2[y1][y2 + 1] end))
    -- the tolerance has the power to tell: the draft's own joint distribution is outside it
    local q1, q2 = speculative.probabilities(generate.feed(draft, 1, prompt, 0, { logits = true }):logits()[1], T), {}
    for y = 0, 3 do
      q2[y] = speculative.probabilities(generate.feed(draft, 1, { 1, 2, 3, y }, 0, { logits = true }):logits()[1], T)
    end
    assert.is_false(within(function(y1, y2) return q1[y1 + 1] * q2[y1][y2 + 1] end))
  end)

  it("draws the same ids from the same seed", function()
    local target <close> = target_model:replica { slots = 2, ctx = 32 }
    local opts = { target = target, draft = target, draft_slot = 2, prompt = PROMPT, max_tokens = 12,
      sampling = { temperature = 1, seed = 9 } }
    local a, b = speculative.generate(opts), speculative.generate(opts)
    assert.are.same(a.ids, b.ids)
    assert.are.equal(9, a.seed)
    assert.are.equal(12, #a.ids)
    assert.are_not.same(a.ids, speculative.generate(H.with(opts, { sampling = { temperature = 1, seed = 10 } })).ids)
    assert.are.equal("integer", math.type(speculative.generate(H.with(opts, { sampling = { temperature = 1 } })).seed))
  end)
end)

describe("speculative.generate's errors", function()
  it("refuses bad options", function()
    local target <close> = target_model:replica { slots = 2, ctx = 16 }
    local other <close> = gptoss.synthetic(H.with(H.TINY, { vocab_size = 50 })):replica { slots = 1, ctx = 16 }
    local function bad(opts, text)
      H.expect_error(function()
        speculative.generate(H.with({ target = target, draft = target, draft_slot = 2, prompt = PROMPT }, opts))
      end, text)
    end
    bad({ draft = other }, "speculative.generate: the draft's vocabulary has 50 tokens, the target's 97")
    bad({ draft = "r" }, "speculative.generate: draft must be a gptoss replica (got string)")
    bad({ draft_slot = 1 }, "speculative.generate: the target and the draft are one replica and both use slot 1")
    bad({ draft_slot = 3 }, "speculative.generate: draft_slot must be a slot of the replica, 1..2 (got 3)")
    bad({ k = 0 }, "speculative.generate: k must be an integer >= 1 (got 0)")
    bad({ k = 64 }, "speculative.generate: a round steps k + 1 = 65 rows of the target's slot; it takes at most 64")
    bad({ sampling = { temperature = 1, top_p = 0.9 } },
      "speculative.generate: sampling: unknown option 'top_p' (known: temperature, seed: speculative sampling")
    bad({ sampling = { temperature = -1 } }, "speculative.generate: sampling.temperature must be a finite number >= 0")
    bad({ sampling = { seed = 1.5 } }, "speculative.generate: sampling.seed must be an integer (got 1.5)")
    bad({ sampling = 0 }, "speculative.generate: sampling must be a table {temperature =, seed =} (got number)")
    bad({ on_round = 1 }, "speculative.generate: on_round must be a function (got number)")
    bad({ prompt = { 97 } }, "speculative.generate: prompt[1] = 97 is not a token id (0..96)")
    bad({ max_tokens = 0 }, "speculative.generate: max_tokens must be an integer >= 1 (got 0)")
    bad({ stop = { text = { "a" } } }, "speculative.generate: stop: stop strings need the tokenizer")
    bad({ depth = 1 }, "speculative.generate: unknown option 'depth'")
  end)
end)
