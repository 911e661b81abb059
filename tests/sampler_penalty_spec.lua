-- Presence and frequency penalties (docs/api.md#penalties). gptoss.sampler's: its logprobs are
-- those of penalty.h's rule (float32 emulated here) over the ids it drew, a banned token stays
-- banned, greedy takes the penalized maximum. A replica slot's (CPU, and GPU with tag gpu,
-- pending without one): its rows draw what gptoss.sampler draws on h:logits() with the same
-- settings, the same ids alone and in a batch, unpenalized rows as without any penalty; a
-- step counts the slot's last row only, r:sampling starts the count again, a slot that
-- counted ctx ids is refused. Ranges and the course mode are refused naming the option.
local gptoss = require "gptoss"
local H = require "helpers"

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end

-- penalty.h's rule in float32: frequency times count off, then presence, each rounded
local function penalized(logit, count, presence, frequency)
  if count == 0 then return logit end
  return f32(f32(logit - f32(f32(frequency) * count)) - f32(presence))
end

local function log_sum_exp(row)
  local m = -math.huge
  for _, x in ipairs(row) do m = math.max(m, x) end
  local sum = 0
  for _, x in ipairs(row) do sum = sum + math.exp(x - m) end
  return m + math.log(sum)
end

describe("gptoss.sampler's penalties", function()
  it("take frequency off per earlier draw and presence once, as its logprobs show", function()
    local row, presence, frequency = { 1.5, 0.25, 0.75, 6.1, -1.0 }, 0.3, 1.7
    local s = gptoss.sampler { temperature = 1, seed = 11, presence_penalty = presence, frequency_penalty = frequency,
      logprobs = 5 }
    local counts, top_p = {}, {}
    for p = 0, 11 do
      local seen = {}
      for i, x in ipairs(row) do seen[i] = penalized(f32(x), counts[i] or 0, presence, frequency) end
      local lse = log_sum_exp(seen)
      local id, lp, top = s:sample(row, p)
      assert.near(seen[id + 1] - lse, lp, 1e-12)
      for _, t in ipairs(top) do assert.near(seen[t.id + 1] - lse, t.logprob, 1e-12) end
      counts[id + 1] = (counts[id + 1] or 0) + 1
      top_p[#top_p + 1] = math.exp(seen[4] - lse)
    end
    -- the row's favourite, drawn again and again, ends up unlikely
    assert.is_true(counts[4] >= 3)
    assert.is_true(top_p[1] > 0.9 and top_p[#top_p] < 0.15, ("%g then %g"):format(top_p[1], top_p[#top_p]))
  end)

  it("makes greedy take the penalized maximum", function()
    local row = { 5, 4, 0, 3.5 }
    local s = gptoss.sampler { temperature = 0, frequency_penalty = 2, presence_penalty = 0.25 }
    local counts, ids = {}, {}
    for p = 0, 7 do
      local best, at = -math.huge, nil
      for i, x in ipairs(row) do
        local v = penalized(x, counts[i] or 0, 0.25, 2)
        if v > best then best, at = v, i end
      end
      ids[#ids + 1] = s:sample(row, p)
      assert.are.equal(at - 1, ids[#ids])
      counts[at] = (counts[at] or 0) + 1
    end
    assert.are_not.same({ 0, 0, 0, 0, 0, 0, 0, 0 }, ids)
  end)

  it("keeps a banned token banned under a negative penalty", function()
    local s = gptoss.sampler { temperature = 0, presence_penalty = -2, frequency_penalty = -2, logprobs = 3 }
    assert.are.equal(1, s:sample({ 0, 1, 0.5 }, 0))
    assert.are.equal(1, s:sample({ 0, 1, 0.5 }, 1)) -- raised to 1 + 2 + 2
    local id, _, top = s:sample({ 0, 1, 0.5 }, { position = 2, logit_bias = { [1] = -math.huge } })
    assert.are.equal(2, id)
    for _, t in ipairs(top) do assert.is_true(t.id ~= 1 or t.logprob == -math.huge) end
  end)

  it("refuses penalties outside [-2, 2] and in the course mode, naming the option", function()
    H.expect_error(function() gptoss.sampler { presence_penalty = 2.5 } end,
      "sampler: presence_penalty must be within [-2, 2] (got 2.5)")
    H.expect_error(function() gptoss.sampler { frequency_penalty = -2.01 } end, "frequency_penalty must be within")
    H.expect_error(function() gptoss.sampler { frequency_penalty = 0 / 0 } end, "frequency_penalty must be within")
    H.expect_error(function() gptoss.sampler { frequency_penalty = "x" } end, "frequency_penalty")
    H.expect_error(function() gptoss.sampler { mode = "course", presence_penalty = 1 } end,
      "the course sampler has no presence_penalty")
    local r <close> = gptoss.synthetic("7m", { seed = 3 }):replica { device = "cpu", slots = 1, ctx = 8 }
    H.expect_error(function() r:sampling(1, { frequency_penalty = 2.1 }) end,
      "replica:sampling: frequency_penalty must be within [-2, 2]")
    H.expect_error(function() r:check_sampling { presence_penalty = -3 } end,
      "replica:check_sampling: presence_penalty must be within [-2, 2]")
    assert.is_true(r:check_sampling { presence_penalty = 2, frequency_penalty = -2 })
    local names = table.concat(gptoss.sample_options(), " ")
    assert.truthy(names:find("presence_penalty frequency_penalty", 1, true), names)
  end)
end)

local PROMPT = { 13225, 2375, 11 }

-- n ids of each of slots, decoded in steps that carry them all: the prompts prefilled (their
-- last rows drawn), then a row a slot fed the id before. Returns each slot's ids and the
-- logits each draw saw (h:logits() rows).
local function decode(r, slots, n)
  local ids, rows = {}, {}
  local batch = { slots = {}, positions = {}, tokens = {}, draw = {}, logits = {} }
  for _, s in ipairs(slots) do
    ids[s], rows[s] = {}, {}
    for i, t in ipairs(PROMPT) do
      local k = #batch.slots + 1
      batch.slots[k], batch.positions[k], batch.tokens[k] = s, i - 1, t
    end
    batch.draw[#batch.draw + 1] = #batch.slots
    batch.logits[#batch.logits + 1] = #batch.slots
  end
  for step = 1, n do
    local h = r:step(batch)
    local got, logits = h:tokens(), h:logits()
    local fed = { slots = {}, positions = {}, tokens = {}, logits = {} }
    for k, s in ipairs(slots) do
      ids[s][step], rows[s][step] = got[batch.logits[k]], logits[k]
      fed.slots[k], fed.positions[k], fed.tokens[k], fed.logits[k] = s, #PROMPT + step - 1, got[batch.logits[k]], k
    end
    batch = fed
  end
  return ids, rows
end

local PENALIZED = { temperature = 0.9, top_p = 0.95, seed = 21, presence_penalty = 1.5, frequency_penalty = 2 }
local OTHER = { temperature = 0.7, top_k = 50, seed = 4, presence_penalty = -0.5, frequency_penalty = 1 }
local PLAIN = { temperature = 0.8, seed = 9 }
local STEPS = 16

local function replica(device, slots, ctx)
  return gptoss.synthetic("7m", { seed = 3 }):replica { device = device, slots = slots, ctx = ctx or 64 }
end

local function without_penalties(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  out.presence_penalty, out.frequency_penalty = nil, nil
  return out
end

-- The checks every engine passes: device "cpu" or a GPU's number.
local function engine_checks(device)
  it("draws what gptoss.sampler draws on h:logits(), counting the ids drawn since r:sampling", function()
    local r <close> = replica(device, 1)
    r:sampling(1, PENALIZED)
    local ids, rows = decode(r, { 1 }, STEPS)
    local s = gptoss.sampler(PENALIZED)
    for step, row in ipairs(rows[1]) do assert.are.equal(s:sample(row, #PROMPT + step - 1), ids[1][step], step) end
    r:sampling(1, without_penalties(PENALIZED))
    assert.are_not.same(ids[1], decode(r, { 1 }, STEPS)[1]) -- the penalties changed some draw
  end)

  it("gives a penalized slot the same ids alone and in a batch, an unpenalized one its ids without", function()
    local alone <close> = replica(device, 1)
    alone:sampling(1, PENALIZED)
    local penalized = decode(alone, { 1 }, STEPS)[1]
    alone:sampling(1, PLAIN)
    local plain = decode(alone, { 1 }, STEPS)[1]
    local batch <close> = replica(device, 3)
    batch:sampling(1, PLAIN)
    batch:sampling(2, PENALIZED)
    batch:sampling(3, OTHER)
    local ids = decode(batch, { 3, 1, 2 }, STEPS)
    assert.are.same(penalized, ids[2])
    assert.are.same(plain, ids[1])
  end)
end

describe("a replica slot's penalties", function()
  engine_checks("cpu")

  it("counts the slot's last row of a step only, from when r:sampling set them", function()
    local r <close> = replica("cpu", 1)
    local settings = { temperature = 0, presence_penalty = 2, frequency_penalty = 0.5, logprobs = 20 }
    r:sampling(1, settings)
    local h = r:step { slots = { 1, 1, 1 }, positions = { 0, 1, 2 }, tokens = PROMPT, logits = true } -- all draw
    local first, last = h:tokens(), h:logits()[3]
    local s = gptoss.sampler(settings)
    assert.are.equal(first[3], s:sample(last, 3))
    local function next_row(token)
      local n = r:step { slots = { 1 }, positions = { 3 }, tokens = { token }, logits = true }
      return n:logprobs()[1], n:logits()[1]
    end
    local lp, row = next_row(first[3])
    local id, want, top = s:sample(row, 4)
    assert.are.same({ id = id, logprob = want, top = top }, lp)
    -- set again, the slot counts from none: a draw at position 3 once more sees no penalty
    r:sampling(1, settings)
    lp, row = next_row(first[3])
    id, want, top = gptoss.sampler(settings):sample(row, 4)
    assert.are.same({ id = id, logprob = want, top = top }, lp)
  end)

  it("refuses a step of a slot that counted ctx ids, changing nothing, until r:sampling", function()
    local r <close> = replica("cpu", 1, 4)
    r:sampling(1, { temperature = 0, presence_penalty = 1 })
    for _ = 1, 4 do r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 } }:tokens() end
    H.expect_error(function() r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 } } end,
      "step: slot 1 has counted 4 ids for its penalties since its sampling was set")
    assert.are.equal(1, r:length(1))
    r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 }, draw = {} } -- it draws, so counts, nothing
    r:sampling(1, { temperature = 0, presence_penalty = 1 })
    assert.are.equal("integer", math.type(r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 } }:tokens()[1]))
  end)
end)

describe("a GPU replica slot's penalties #gpu", function()
  if H.no_gpu(pending) then return end
  engine_checks(0)

  it("counts the ids of steps fed on the device, two in flight, as steps read on the host do", function()
    local r <close> = replica(0, 2)
    r:sampling(1, PENALIZED)
    r:sampling(2, OTHER)
    local read = decode(r, { 1, 2 }, STEPS)
    r:sampling(1, PENALIZED)
    r:sampling(2, OTHER)
    local batch = { slots = { 1, 1, 1, 2, 2, 2 }, positions = { 0, 1, 2, 0, 1, 2 }, draw = { 3, 6 } }
    batch.tokens = { PROMPT[1], PROMPT[2], PROMPT[3], PROMPT[1], PROMPT[2], PROMPT[3] }
    local h, fed = r:step(batch), { {}, {} }
    for step = 1, STEPS do
      local ahead = step < STEPS and
          r:step { slots = { 1, 2 }, positions = { #PROMPT + step - 1, #PROMPT + step - 1 }, from = h,
            tokens = step == 1 and { -3, -6 } or { -1, -2 } } or nil
      local ids = h:tokens()
      fed[1][step], fed[2][step] = ids[step == 1 and 3 or 1], ids[step == 1 and 6 or 2]
      h = ahead
    end
    assert.are.same(read[1], fed[1])
    assert.are.same(read[2], fed[2])
  end)
end)

describe("penalties in the loops", function()
  local generate = require "gptoss.generate"
  local getp = require "gptoss.getp"
  local SETTINGS = { temperature = 0.8, seed = 5, presence_penalty = 2, frequency_penalty = 2 }

  it("count a generate.parallel sample's own ids only: it is generate.run's with its seed", function()
    local r <close> = replica("cpu", 2)
    local prompt = { 13225, 2375, 11, 290 }
    local samples = generate.parallel { replica = r, prompt = prompt, n = 2, sampling = SETTINGS, max_tokens = 12 }
      .samples
    for i = 1, 2 do
      local one = {}
      for k, v in pairs(SETTINGS) do one[k] = v end
      one.seed = SETTINGS.seed + i - 1
      assert.are.same(generate.run { replica = r, prompt = prompt, sampling = one, max_tokens = 12 }.ids,
        samples[i].ids)
    end
    local plain = without_penalties(SETTINGS)
    assert.are_not.same(generate.run { replica = r, prompt = prompt, sampling = plain, max_tokens = 12 }.ids,
      samples[1].ids)
  end)

  it("count a chat reply's own ids, not the replies before", function()
    local chat = require "gptoss.chat"
    local r <close> = replica("cpu", 1, 512)
    -- negative: each reply repeats the first id it draws, penalized or not by the reply before
    local s = chat.new { replica = r, tokenizer = gptoss.tokenizer(H.TOKENIZER), max_tokens = 6,
      sampling = { temperature = 0, presence_penalty = -2, frequency_penalty = -2 } }
    s:ask("hello")
    local first = s.held[#s.held]
    assert.are.same({ first, first }, { s.held[#s.held - 1], s.held[#s.held - 2] })
    s:ask("again")
    assert.are_not.equal(first, s.held[#s.held])
  end)

  it("make getp sample slots even at temperature 0", function()
    local tok = gptoss.tokenizer(H.TOKENIZER)
    local model = gptoss.synthetic("7m", { seed = 3 })
    local function outputs(sampling)
      local g <close> = getp.new { model = model, tokenizer = tok, devices = { "cpu" }, steps = 24,
        requests = { "Once upon a time", "The sky" }, sampling = sampling }
      assert.are.equal(sampling ~= nil, g:describe():find("presence_penalty -2, frequency_penalty -2", 1, true) ~= nil)
      return g.sampling, g:run().outputs
    end
    local _, greedy = outputs(nil)
    -- negative: the random model's greedy ids never repeat, the penalized ones do
    local kept, penalized = outputs { temperature = 0, presence_penalty = -2, frequency_penalty = -2 }
    assert.are.same({ 0, -2, -2 }, { kept.temperature, kept.presence_penalty, kept.frequency_penalty })
    assert.are_not.same(greedy, penalized)
  end)
end)
