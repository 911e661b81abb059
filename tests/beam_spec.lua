-- gptoss.beam on CPU replicas of tiny models: with a width that covers every sequence of a
-- 5-token vocabulary, the search is exhaustive and its hypotheses are every sequence a
-- brute-force enumeration finds, in the same order of length-normalised score; with
-- narrower widths it equals a reference beam search written plainly here over the golden
-- engine's logits (each beam's prefix prefilled afresh, no forks, every token a
-- candidate); width 1 is greedy decoding; every bad-input error.
local gptoss = require "gptoss"
local beam = require "gptoss.beam"
local generate = require "gptoss.generate"
local H = require "helpers"

local PROMPT = { 3, 1, 4 }

-- log-softmax of a logits row, in double as the engines' logprobs
local function log_softmax(row)
  local logits, m, sum = row:totable(), -math.huge, 0
  for _, l in ipairs(logits) do m = math.max(m, l) end
  for _, l in ipairs(logits) do sum = sum + math.exp(l - m) end
  local lse, out = m + math.log(sum), {}
  for i, l in ipairs(logits) do out[i] = l - lse end
  return out
end

-- the logprobs of the id after ids, from a fresh prefill of a one-slot replica
local function logprobs_after(r, ids)
  return log_softmax(generate.feed(r, 1, ids, 0, { logits = true }):logits()[1])
end

local function joined(prompt, ids)
  local all = table.move(prompt, 1, #prompt, 1, {})
  return table.move(ids, 1, #ids, #all + 1, all)
end

local function by_score(list)
  table.sort(list, function(a, b)
    if a.score ~= b.score then return a.score > b.score end
    return a.order < b.order
  end)
  for _, h in ipairs(list) do h.order = nil end
  return list
end

-- Every sequence of at most max_tokens ids after the prompt that ends at its first end id
-- or has max_tokens ids, with its summed logprob and score.
local function enumerate(r, prompt, max_tokens, ends, alpha)
  local all = {}
  local function walk(ids, logprob)
    local lps = logprobs_after(r, joined(prompt, ids))
    for id = 0, #lps - 1 do
      local seq = joined(ids, { id })
      local lp = logprob + lps[id + 1]
      if ends[id] or #seq == max_tokens then
        all[#all + 1] = { ids = seq, logprob = lp, finish = ends[id] and "end" or "length",
          score = lp / (#seq) ^ alpha, order = #all + 1 }
      else
        walk(seq, lp)
      end
    end
  end
  walk({}, 0)
  return by_score(all)
end

-- Beam search as beam.search documents it, plainly: each live beam's logprobs from a fresh
-- prefill, every token a candidate (ranked by logprob, then lower id).
local function reference(r, prompt, width, max_tokens, ends, alpha)
  local live, finished = { { ids = {}, logprob = 0 } }, {}
  local function finish(seq, how)
    finished[#finished + 1] = { ids = seq.ids, logprob = seq.logprob, finish = how,
      score = seq.logprob / (#seq.ids) ^ alpha, order = #finished + 1 }
  end
  for t = 1, max_tokens do
    local candidates = {}
    for parent, b in ipairs(live) do
      local lps = logprobs_after(r, joined(prompt, b.ids))
      local order = {}
      for id = 0, #lps - 1 do order[id + 1] = id end
      table.sort(order, function(x, y)
        if lps[x + 1] ~= lps[y + 1] then return lps[x + 1] > lps[y + 1] end
        return x < y
      end)
      for rank, id in ipairs(order) do
        candidates[#candidates + 1] = { parent = parent, rank = rank, id = id, logprob = b.logprob + lps[id + 1] }
      end
    end
    table.sort(candidates, function(x, y)
      if x.logprob ~= y.logprob then return x.logprob > y.logprob end
      if x.parent ~= y.parent then return x.parent < y.parent end
      return x.rank < y.rank
    end)
    local next_live = {}
    for rank, c in ipairs(candidates) do
      if #next_live == width then break end
      local seq = { ids = joined(live[c.parent].ids, { c.id }), logprob = c.logprob }
      if ends[c.id] then
        if rank <= width then finish(seq, "end") end
      else
        if t == max_tokens then finish(seq, "length") end
        next_live[#next_live + 1] = seq
      end
    end
    if #next_live == 0 then break end
    live = next_live
  end
  return by_score(finished)
end

-- hypotheses compared: ids and finish exactly, logprobs and scores within 1e-12
local function assert_same_hypotheses(want, got, what)
  assert.are.equal(#want, #got, what)
  for i, w in ipairs(want) do
    local g = got[i]
    assert.are.same({ w.ids, w.finish }, { g.ids, g.finish }, ("%s, hypothesis %d"):format(what, i))
    assert.is_true(math.abs(w.logprob - g.logprob) < 1e-12 and math.abs(w.score - g.score) < 1e-12, what)
  end
end

describe("beam.search", function()
  it("is exhaustive when the width covers every sequence: brute force's hypotheses, in order", function()
    local five = gptoss.synthetic(H.with(H.TINY, { vocab_size = 5 }), { seed = 2 })
    local ref <close> = five:replica { slots = 1, ctx = 8 }
    -- 3 ids at most, 0 ends: 1 + 4 + 80 sequences; the last step ranks 16 * 5 = 80 candidates
    local r <close> = five:replica { slots = 80, ctx = 8 }
    for _, alpha in ipairs { 1, 0, 0.5 } do
      local want = enumerate(ref, PROMPT, 3, { [0] = true }, alpha)
      assert.are.equal(85, #want)
      local got = beam.search { replica = r, prompt = PROMPT, width = 80, max_tokens = 3, end_ids = { 0 }, alpha = alpha }
      assert_same_hypotheses(want, got.hypotheses, "alpha " .. alpha)
      assert.are.same({ want[1].ids, want[1].score, want[1].finish }, { got.ids, got.score, got.finish })
      assert.are.equal(3, got.steps) -- the prompt, then one step for each of the first two ids
    end
  end)

  it("equals a plain reference beam search over the golden's logits when the width is narrower", function()
    local m = gptoss.synthetic(H.TINY, { seed = 4 })
    local ref <close> = m:replica { slots = 1, ctx = 16 }
    local r <close> = m:replica { slots = 4, ctx = 16 }
    local ends = { 35, 41, 4 } -- ids the best beams take: some end early
    local set = {}
    for _, id in ipairs(ends) do set[id] = true end
    local saw_end = false
    for _, case in ipairs { { 2, 1 }, { 3, 0 }, { 4, 1 }, { 3, 2 } } do
      local width, alpha = case[1], case[2]
      local want = reference(ref, PROMPT, width, 6, set, alpha)
      local got = beam.search { replica = r, prompt = PROMPT, width = width, max_tokens = 6, end_ids = ends, alpha = alpha }
      assert_same_hypotheses(want, got.hypotheses, ("width %d, alpha %g"):format(width, alpha))
      for _, h in ipairs(got.hypotheses) do saw_end = saw_end or h.finish == "end" end
    end
    assert.is_true(saw_end, "no beam ended on an end id: pick other end ids")
  end)

  it("is greedy decoding at width 1", function()
    local m = gptoss.synthetic(H.TINY, { seed = 4 })
    local r <close> = m:replica { slots = 1, ctx = 24 }
    local greedy = generate.run { replica = r, prompt = PROMPT, max_tokens = 12 }.ids
    local got = beam.search { replica = r, prompt = PROMPT, width = 1, max_tokens = 12 }
    assert.are.same({ greedy, "length", 1 }, { got.ids, got.finish, #got.hypotheses })
  end)

  it("refuses bad options", function()
    local m = gptoss.synthetic(H.TINY, { seed = 4 })
    local r <close> = m:replica { slots = 4, ctx = 8 }
    local function bad(opts, text)
      H.expect_error(function() beam.search(H.with({ replica = r, prompt = PROMPT, max_tokens = 4 }, opts)) end, text)
    end
    bad({ width = 5 }, "beam.search: 5 slots are needed (one for a beam); the replica has 4")
    bad({ width = 21, slots = {} }, "beam.search: each beam offers its top min(width, vocab_size) = 21 tokens")
    bad({ width = 2, slots = { 1 } }, "beam.search: slots must list at least 2 slots (got 1)")
    bad({ width = 2, slots = { 3, 3 } }, "beam.search: slots[2] = 3 repeats slots[1]")
    bad({ width = 2, slots = { 1, 5 } }, "beam.search: slots[2] must be a slot of the replica, 1..4 (got 5)")
    bad({ max_tokens = 7 }, "beam.search: the prompt's 3 tokens and max_tokens = 7 need 9 positions; the replica holds 8")
    bad({ max_tokens = false }, "beam.search: max_tokens must be an integer >= 1 (got false)")
    bad({ end_ids = { 97 } }, "beam.search: end_ids[1] = 97 is not a token id (0..96)")
    bad({ end_ids = 0 }, "beam.search: end_ids must be a list of token ids (got number)")
    bad({ alpha = "1" }, "beam.search: alpha must be a number >= 0 (got 1)")
    bad({ beams = 2 }, "beam.search: unknown option 'beams'")
    H.expect_error(function() beam.search { replica = r, prompt = PROMPT } end, "beam.search: max_tokens is required")
  end)
end)
