-- gptoss.generate on CPU replicas: generate.run equals the plainest loop (one position a step,
-- helpers.plain_generate), greedy and sampled, with its logprobs, and ends at max_tokens, the
-- context, a stop id sequence or a stop string (text cut before it); generate.parallel's
-- samples (the prompt prefilled once, forked) each equal generate.run from a fresh prefill
-- with the sample's seed, scored by logprob / length^alpha; every bad-input error.
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local H = require "helpers"

local tiny = gptoss.synthetic(H.TINY, { seed = 5 })
local PROMPT = { 5, 17, 3, 88, 42 }

-- the list's first n entries
local function head(list, n) return table.move(list, 1, n, 1, {}) end

describe("generate.run", function()
  it("gives the plainest loop's ids, greedy and sampled, with their logprobs", function()
    local r <close> = tiny:replica { slots = 2, ctx = 40 }
    local ref <close> = tiny:replica { slots = 1, ctx = 40 }
    local want = H.plain_generate(ref, 1, PROMPT, 20)
    local got = generate.run { replica = r, prompt = PROMPT, max_tokens = 20 }
    assert.are.same({ want, "length", 20 }, { got.ids, got.finish, got.steps })
    -- sampled, in slot 2, with logprobs
    local sampling = { temperature = 1.5, top_p = 0.9, seed = 8 }
    ref:sampling(1, H.with(sampling, { logprobs = 0 }))
    local ids, logprobs = H.plain_generate(ref, 1, PROMPT, 20, { logprobs = true })
    got = generate.run { replica = r, slot = 2, prompt = PROMPT, max_tokens = 20, sampling = sampling, logprobs = true }
    assert.are.same(ids, got.ids)
    assert.are_not.same(want, got.ids)
    assert.are.same(logprobs, got.logprobs)
    local sum = 0
    for _, lp in ipairs(logprobs) do sum = sum + lp end
    assert.are.equal(sum, got.logprob)
  end)

  it("ends where prompt and ids fill the context, and prefills a long prompt in chunks", function()
    local r <close> = tiny:replica { slots = 1, ctx = 12 }
    local got = generate.run { replica = r, prompt = PROMPT }
    assert.are.same({ 7, "context" }, { #got.ids, got.finish })
    assert.are.same(got.ids, generate.run({ replica = r, prompt = PROMPT, max_tokens = 7 }).ids)
    assert.are.equal("length", generate.run({ replica = r, prompt = PROMPT, max_tokens = 7 }).finish)
    -- 70 prompt ids: two chunks of at most 64 rows
    local long, ctx = {}, 80
    for i = 1, 70 do long[i] = (i * 7) % 97 end
    local big <close> = tiny:replica { slots = 1, ctx = ctx }
    local ref <close> = tiny:replica { slots = 1, ctx = ctx }
    got = generate.run { replica = big, prompt = long, max_tokens = 4 }
    assert.are.same({ H.plain_generate(ref, 1, long, 4), 2 + 3 }, { got.ids, got.steps })
  end)

  it("stops at a stop id sequence (kept in ids) or a stop string (cut from the text)", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local m = gptoss.synthetic("7m", { seed = 1 })
    local r <close> = m:replica { slots = 1, ctx = 48 }
    local prompt = tok:encode("Once upon a time")
    local all = generate.run { replica = r, prompt = prompt, max_tokens = 12, stop = { tokenizer = tok } }
    assert.are.equal(tok:decode(all.ids), all.text)
    -- the 4th and 5th ids as a stop sequence
    local seq = { all.ids[4], all.ids[5] }
    local shown = {}
    local got = generate.run { replica = r, prompt = prompt, max_tokens = 12, stop = { ids = { seq }, tokenizer = tok },
      on_text = function(t) shown[#shown + 1] = t end }
    assert.are.same({ head(all.ids, 5), "stop", { ids = seq } }, { got.ids, got.finish, got.stop })
    assert.are.equal(tok:decode(head(all.ids, 3)), got.text)
    assert.are.equal(got.text, table.concat(shown))
    -- a stop string across the 6th and 7th ids' text: the last character of one, the first of the other
    local before, piece6, piece7 = tok:decode(head(all.ids, 5)), tok:piece(all.ids[6]), tok:piece(all.ids[7])
    assert(utf8.len(piece6) and utf8.len(piece6) >= 2 and utf8.len(piece7), "the greedy 7m output changed: pick other ids")
    local last = utf8.offset(piece6, -1)
    local stop = piece6:sub(last) .. piece7:sub(1, utf8.offset(piece7, 2) - 1)
    before = before .. piece6:sub(1, last - 1)
    assert(not before:find(stop, 1, true), "the stop string occurs earlier")
    got = generate.run { replica = r, prompt = prompt, max_tokens = 12, stop = { text = { stop }, tokenizer = tok } }
    assert.are.same({ head(all.ids, 7), "stop", { text = stop } }, { got.ids, got.finish, got.stop })
    assert.are.equal(before, got.text)
    -- ids alone, without a tokenizer: no text
    got = generate.run { replica = r, prompt = prompt, max_tokens = 12, stop = { ids = { { all.ids[2] } } } }
    assert.are.same({ head(all.ids, 2), "stop" }, { got.ids, got.finish })
    assert.is_nil(got.text)
  end)

  it("refuses bad options", function()
    local r <close> = tiny:replica { slots = 2, ctx = 8 }
    local function bad(opts, text)
      H.expect_error(function() generate.run(H.with({ replica = r, prompt = PROMPT }, opts)) end, text)
    end
    bad({ replica = "r" }, "generate.run: replica must be a gptoss replica (got string)")
    bad({ slot = 3 }, "generate.run: slot must be a slot of the replica, 1..2 (got 3)")
    bad({ prompt = {} }, "generate.run: prompt must be a non-empty list of token ids (got an empty list)")
    bad({ prompt = { 1, 97 } }, "generate.run: prompt[2] = 97 is not a token id (0..96)")
    bad({ prompt = { 1, 2, 3, 4, 5, 6, 7, 8 } }, "generate.run: the prompt's 8 tokens leave no room in a context of 8")
    bad({ max_tokens = 0 }, "generate.run: max_tokens must be an integer >= 1 (got 0)")
    bad({ stop = { text = { "x" } } }, "generate.run: stop: stop strings need the tokenizer")
    bad({ stop = "x" }, "generate.run: stop must be a table {text =, ids =, tokenizer =} (got string)")
    bad({ sampling = { temperature = -1 } }, "generate.run: sampling: temperature must be a finite number >= 0 (got -1)")
    bad({ sampling = 1 }, "generate.run: sampling: options must be a table (got number)")
    bad({ seed = 1 }, "generate.run: unknown option 'seed'")
    local closed = tiny:replica { slots = 1, ctx = 8 }
    closed:close()
    bad({ replica = closed }, "generate.run: replica is closed")
  end)
end)

describe("generate.parallel", function()
  local sampling = { temperature = 1.2, seed = 30 }

  it("forks one prefill into n slots, each sample the sequence a fresh prefill with its seed gives", function()
    for _, prompt in ipairs { PROMPT, { 9 } } do
      local r <close> = tiny:replica { slots = 5, ctx = 32 }
      local got = generate.parallel { replica = r, prompt = prompt, n = 4, slots = { 5, 2, 3, 1 }, max_tokens = 12,
        sampling = sampling, alpha = 0.5 }
      assert.are.equal(#prompt - 1 + 4, got.prefill_rows)
      local fresh <close> = tiny:replica { slots = 1, ctx = 32 }
      local distinct, best = {}, 1
      for i, s in ipairs(got.samples) do
        local want = generate.run { replica = fresh, prompt = prompt, max_tokens = 12, logprobs = true,
          sampling = H.with(sampling, { seed = 30 + i - 1 }) }
        assert.are.same({ want.ids, want.logprobs, "length" }, { s.ids, s.logprobs, s.finish }, "sample " .. i)
        assert.are.equal(want.logprob / 12 ^ 0.5, s.score)
        distinct[table.concat(s.ids, " ")] = true
        if s.score > got.samples[best].score then best = i end
      end
      assert.are.equal(best, got.best)
      assert.is_true(next(distinct, next(distinct)) ~= nil) -- the seeds give different samples
    end
  end)

  it("stops each sample on its own", function()
    local r <close> = tiny:replica { slots = 3, ctx = 32 }
    local all = generate.parallel { replica = r, prompt = PROMPT, n = 3, max_tokens = 10, sampling = sampling }
    local stop = { all.samples[2].ids[3] } -- sample 2's third id ends it there, and any other where it shows
    local got = generate.parallel { replica = r, prompt = PROMPT, n = 3, max_tokens = 10, sampling = sampling,
      stop = { ids = { stop } } }
    for i, s in ipairs(got.samples) do
      local ids, at = all.samples[i].ids, nil
      for j, id in ipairs(ids) do
        if id == stop[1] then at = at or j end
      end
      assert.are.same({ head(ids, at or 10), at and "stop" or "length" }, { s.ids, s.finish }, "sample " .. i)
    end
    assert.are.equal("stop", got.samples[2].finish)
  end)

  it("refuses bad options", function()
    local r <close> = tiny:replica { slots = 3, ctx = 16 }
    local function bad(opts, text)
      H.expect_error(function()
        generate.parallel(H.with({ replica = r, prompt = PROMPT, n = 2, sampling = sampling }, opts))
      end, text)
    end
    bad({ n = 0 }, "generate.parallel: n must be an integer >= 1 (got 0)")
    bad({ n = false }, "generate.parallel: n must be an integer >= 1 (got false)")
    bad({ n = 4 }, "generate.parallel: 4 slots are needed (one for a sample); the replica has 3")
    bad({ slots = { 1 } }, "generate.parallel: slots must list at least 2 slots (got 1)")
    bad({ slots = 2 }, "generate.parallel: slots must list at least 2 slots (got number)")
    bad({ slots = { 1, 1 } }, "generate.parallel: slots[2] = 1 repeats slots[1]")
    bad({ slots = { 1, 4 } }, "generate.parallel: slots[2] must be a slot of the replica, 1..3 (got 4)")
    bad({ sampling = { temperature = 1 } }, "generate.parallel: sampling.seed must be an integer: sample i draws with seed + i - 1")
    bad({ alpha = -1 }, "generate.parallel: alpha must be a number >= 0 (got -1)")
    H.expect_error(function() generate.parallel { replica = r, prompt = PROMPT, sampling = sampling } end,
      "generate.parallel: n (how many samples) is required")
  end)
end)
