-- Constrained steps (r:step's constraint option, docs/structured.md#constrained-steps) on the
-- CPU golden engine: masked rows draw only what their matcher allows, greedy and sampled; the
-- mask comes before every filter and the logprobs are the masked distribution's; the drawn
-- token goes back to the matcher; a seeded constrained row draws the same ids alone or in any
-- batch, and unconstrained rows beside it draw as they would without it; bad constraints are
-- refused naming the problem. The GPU sampler's copy of these is in constraint_gpu_spec.lua.
-- Matchers that fail at a real limit, the stacks a matcher may hold (docs/structured.md#limits),
-- which an ambiguous grammar passes: a row whose mask cannot be computed fails the step before
-- it runs, naming that row (the first in row order), alone or among rows whose masks the host's
-- pool takes together; a row whose matcher cannot take the token it drew fails the read of the
-- step's tokens, after every other row's matcher took its own; the engine, the slots and every
-- other matcher come out as they were, and the next step works.

local gptoss = require "gptoss"
local H = require "helpers"
local expect_error = H.expect_error

local function tok() return H.tokenizer(pending) end
local model_cache
local function model()
  model_cache = model_cache or gptoss.synthetic("7m")
  return model_cache
end

local SCHEMA = { type = "object", additionalProperties = false, required = { "name", "n" },
  properties = { name = { type = "string", maxLength = 12 }, n = { type = "integer", minimum = 0, maximum = 99 } } }

local function json_matcher()
  return gptoss.grammar.json_schema(SCHEMA):matcher(tok(), { end_ids = { tok().special["end"] } })
end

-- Decodes on `slot` under matcher m from prompt until m ends or n ids, one row a step, each
-- step fed the last id; checks every id against a fork of m taken before its step. Returns
-- the ids.
local function constrained_run(r, slot, m, prompt, n)
  local h
  local before = m:fork() -- m as the step drawing the next id found it
  for i, id in ipairs(prompt) do
    h = r:step { slots = { slot }, positions = { i - 1 }, tokens = { id }, constraint = i == #prompt and { m } or nil }
  end
  local out = {}
  for pos = #prompt, #prompt + n - 1 do
    local id = h:tokens()[1]
    assert.is_true(before:allows(id), ("id %d is not allowed after %d ids"):format(id, #out))
    out[#out + 1] = id
    if m.ended then break end
    before = m:fork()
    h = r:step { slots = { slot }, positions = { pos }, tokens = { id }, constraint = { m } }
  end
  return out
end

describe("a constrained step", function()
  it("draws only allowed tokens, greedy and sampled, and gives each to the matcher", function()
    local r <close> = model():replica { device = "cpu", slots = 2, ctx = 128 }
    local prompt = tok():encode("Hello")
    for _, sampling in ipairs { { temperature = 0 }, { temperature = 1, seed = 3 }, { temperature = 1.5, top_k = 50,
      top_p = 0.9, min_p = 0.01, seed = 4 } } do
      r:sampling(1, sampling)
      local m = json_matcher()
      local ids = constrained_run(r, 1, m, prompt, 100)
      assert.is_true(m.ended, "the output ends within 100 ids")
      assert.are.equal(#ids, m.tokens)
      local text = tok():decode(table.move(ids, 1, #ids - 1, 1, {}))
      local decoded = require("cjson").decode(text)
      assert.is_string(decoded.name)
      assert.is_true(decoded.n == math.floor(decoded.n) and decoded.n >= 0 and decoded.n <= 99, text)
    end
  end)

  it("masks before the draw: greedy takes the best allowed logit; logprobs are the masked row's", function()
    local r <close> = model():replica { device = "cpu", slots = 1, ctx = 64 }
    r:sampling(1, { temperature = 0, logprobs = 5 })
    local m = gptoss.grammar.regex("(yes|no|maybe)"):matcher(tok())
    local allowed = m:allowed()
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 }, logits = true, constraint = { m } }
    local logits, id, lp = h:logits()[1], h:tokens()[1], h:logprobs()[1]
    local best, sum = nil, 0
    for _, a in ipairs(allowed:ids()) do
      if not best or logits[a + 1] > logits[best + 1] then best = a end
    end
    for _, a in ipairs(allowed:ids()) do sum = sum + math.exp(logits[a + 1] - logits[best + 1]) end
    assert.are.equal(best, id)
    assert.is_true(#allowed < 100 and #allowed > 1)
    assert.near(-math.log(sum), lp.logprob, 1e-9)
    assert.are.equal(5, #lp.top) -- a token the mask leaves out ranks last, at -inf
    for k, t in ipairs(lp.top) do assert.are.equal(k <= #allowed, allowed:has(t.id) and t.logprob > -math.huge) end
    assert.are.equal(1, m.tokens)
  end)

  it("draws the same seeded ids alone or in any batch; unconstrained rows draw as without it", function()
    local prompt = tok():encode("Once upon")
    local function alone()
      local r <close> = model():replica { device = "cpu", slots = 1, ctx = 96 }
      r:sampling(1, { temperature = 1, seed = 11 })
      return constrained_run(r, 1, json_matcher(), prompt, 60)
    end
    local want = alone()
    local r <close> = model():replica { device = "cpu", slots = 3, ctx = 96 }
    for s = 1, 3 do r:sampling(s, { temperature = 1, seed = 11 }) end
    local free_want = H.plain_generate(r, 3, prompt, 20)
    r:reset(3)
    -- slots 1 (constrained, from position 0) and 3 (free) in one batch, slot 2 (another
    -- constraint) stepping between
    local m1, m2 = json_matcher(), gptoss.grammar.regex("[a-z ]{1,40}"):matcher(tok())
    local got, free = {}, {}
    local tokens = { prompt[1], prompt[1], prompt[1] }
    for pos = 0, #prompt + 59 do
      local cons = pos >= #prompt - 1 and { [1] = not m1.ended and m1 or nil, [2] = not m2:done() and m2 or nil } or nil
      local h = r:step { slots = { 1, 2, 3 }, positions = { pos, pos, pos }, tokens = tokens, constraint = cons }
      local ids = h:tokens()
      for s = 1, 3 do tokens[s] = pos + 1 < #prompt and prompt[pos + 2] or ids[s] end
      if pos + 1 >= #prompt then
        if #got < #want then got[#got + 1] = ids[1] end
        if #free < 20 then free[#free + 1] = ids[3] end
      end
      if #got == #want and #free == 20 then break end
    end
    assert.are.same(want, got)
    assert.are.same(free_want, free)
  end)

  it("takes many rows' masks of one grammar together (on the host's cores), each row's own", function()
    -- 8 matchers of one grammar at 8 different states: the masks fill its shared cache
    -- together, and each row draws what its own matcher allows, the same ids as stepping
    -- each row alone
    local g = gptoss.grammar.json_schema(SCHEMA)
    local starts = { '{"', '{"n":', '{"n":4', '{"n":42,"', '{"n":4,"name":"', '{"n":4,"name":"ab', '{',
      '{"n":7,"name":"xyz' }
    local matchers, prompt = {}, tok():encode("Once upon")
    for i, text in ipairs(starts) do
      matchers[i] = g:matcher(tok())
      for _, id in ipairs(tok():encode(text)) do assert(matchers[i]:accept(id)) end
    end
    local function draws(rows)
      local r <close> = model():replica { device = "cpu", slots = 8, ctx = 32 }
      local b = { slots = {}, positions = {}, tokens = {}, constraint = {} }
      for k, i in ipairs(rows) do
        b.slots[k], b.positions[k], b.tokens[k], b.constraint[k] = i, 0, prompt[1], matchers[i]:fork()
      end
      return r:step(b):tokens(), b.constraint
    end
    local together, forks = draws { 1, 2, 3, 4, 5, 6, 7, 8 }
    for i = 1, 8 do
      assert.are.equal(draws { i }[1], together[i])
      assert.are.equal(1, forks[i].tokens - matchers[i].tokens) -- the fork took its draw
    end
  end)

  it("feeds from the step before: a matcher waits for its token, read or not", function()
    local r <close> = model():replica { device = "cpu", slots = 1, ctx = 64 }
    r:sampling(1, { temperature = 1, seed = 5 })
    local m = gptoss.grammar.regex("[0-9]{6}"):matcher(tok())
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 }, constraint = { m } }
    local steps = { h }
    while true do
      local done = m:done() -- settles the last step: m takes its token
      if done then break end
      h = r:step { slots = { 1 }, positions = { #steps }, tokens = h, constraint = { m } }
      steps[#steps + 1] = h
    end
    local ids = {}
    for i, s in ipairs(steps) do ids[i] = s:tokens()[1] end
    assert.are.equal(#ids, m.tokens)
    assert.truthy(tok():decode(ids):match("^%d%d%d%d%d%d$"), tok():decode(ids))
  end)

  it("fails a row whose bias leaves its mask nothing, saying so", function()
    local r <close> = model():replica { device = "cpu", slots = 1, ctx = 16 }
    local m = gptoss.grammar.regex("a"):matcher(tok())
    local bias = {}
    for _, id in ipairs(m:allowed():ids()) do bias[id] = -math.huge end
    r:sampling(1, { temperature = 0, logit_bias = bias })
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 }, constraint = { m } }
    expect_error(function() h:tokens() end, "row 1:", "the constraint allows no token")
    assert.are.equal(0, m.tokens)
  end)

  it("refuses bad constraints, naming the problem, and steps nothing", function()
    local r <close> = model():replica { device = "cpu", slots = 2, ctx = 16 }
    local m = gptoss.grammar.regex("a"):matcher(tok(), { end_ids = { 0 } })
    local function step(constraint, draw)
      return r:step { slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 1, 2 }, constraint = constraint, draw = draw }
    end
    expect_error(function() step(5) end, "step: constraint must be a table {[row] = matcher} (got number)")
    expect_error(function() step { [3] = m } end, "step: constraint[3] is out of range 1..2")
    expect_error(function() step { x = m } end, "step: constraint's keys must be row numbers (got string)")
    expect_error(function() step { "m" } end, "gptoss.matcher expected")
    expect_error(function() step { m, m } end, "is the matcher of constraint[", "fork it for each row")
    expect_error(function() step({ [2] = m }, { 1 }) end, "constraint names row 2, which does not draw a token")
    assert.are.equal(0, r:length(1))
    assert(m:accept(tok():encode("a")[1]))
    assert(m:accept(0))
    expect_error(function() step { m } end, "step: constraint[1]: the matcher has ended")
  end)
end)

-- Every "(" reads two ways (a ")" or a "]" closes it), so k of them open 2^k parse stacks:
-- a dozen pass the matcher's limit.
local AMBIGUOUS = [[
root ::= round | square
round ::= "(" root ")" | "x"
square ::= "(" root "]" | "x"
]]
local TOO_AMBIGUOUS = "the grammar is too ambiguous here: more than 4096 ways to read the output so far"
local PROMPT_ID = 13225

-- A matcher of AMBIGUOUS fed "(" until its mask cannot be computed, and how many it took.
local function past_the_limit()
  local m = gptoss.grammar.ebnf(AMBIGUOUS):matcher(tok())
  local open = tok():encode("(")[1]
  for opens = 1, 20 do
    assert(m:accept(open))
    if not pcall(m.mask, m) then return m, opens end
  end
  error("20 opening brackets stayed within the matcher's limit")
end

-- r:step of one row per slot, each at position 0, with the constraint given.
local function step_all(r, slots, constraint)
  local b = { slots = {}, positions = {}, tokens = {}, constraint = constraint }
  for s = 1, slots do b.slots[s], b.positions[s], b.tokens[s] = s, 0, PROMPT_ID end
  return r:step(b)
end

-- Each row of constraint stepped once: its token allowed before the step and taken after it.
local function steps_under(r, slots, constraint)
  local before = {}
  for row, m in pairs(constraint) do before[row] = { fork = m:fork(), tokens = m.tokens } end
  local ids = step_all(r, slots, constraint):tokens()
  for row, m in pairs(constraint) do
    assert.is_true(before[row].fork:allows(ids[row]), ("row %d drew %d"):format(row, ids[row]))
    assert.are.equal(before[row].tokens + 1, m.tokens)
  end
end

describe("a constrained step whose matcher fails", function()
  it("fails where a row's mask cannot be computed, naming it; nothing is stepped, and the next step works", function()
    local r <close> = model():replica { device = "cpu", slots = 1, ctx = 16 }
    local m, opens = past_the_limit()
    expect_error(function() step_all(r, 1, { m }) end, "step: constraint[1]: " .. TOO_AMBIGUOUS)
    assert.are.equal(0, r:length(1))
    assert.are.equal(opens, m.tokens)
    -- rolled back within its limit, the same matcher steps again
    m:rollback(opens // 2)
    steps_under(r, 1, { m })
    assert.are.equal(1, r:length(1))
    step_all(r, 1):tokens()
  end)

  it("names the first failing row among several whose masks are taken together; the others stay usable", function()
    local r <close> = model():replica { device = "cpu", slots = 6, ctx = 16 }
    local ok = { [1] = json_matcher(), [2] = json_matcher(), [5] = json_matcher(),
      [6] = gptoss.grammar.regex("[a-z]{2,6}"):matcher(tok()) }
    local bad, opens = past_the_limit()
    local function with(extra)
      local c = {}
      for row, m in pairs(ok) do c[row] = m end
      for row, m in pairs(extra) do c[row] = m end
      return c
    end
    -- row 3 is free: the failing row is the third of the constraint's rows, named by its own number
    expect_error(function() step_all(r, 6, with { [4] = bad }) end, "step: constraint[4]: " .. TOO_AMBIGUOUS)
    local second = past_the_limit()
    expect_error(function() step_all(r, 6, with { [2] = second, [4] = bad }) end, "step: constraint[2]: ")
    for s = 1, 6 do assert.are.equal(0, r:length(s)) end
    for _, m in pairs(ok) do assert.are.equal(0, m.tokens) end
    assert.are.equal(opens, bad.tokens)
    bad:rollback(opens // 2)
    steps_under(r, 6, with { [4] = bad })
  end)

  it("fails in a step fed by the one before it, which still feeds the next", function()
    local r <close> = model():replica { device = "cpu", slots = 1, ctx = 16 }
    local m, opens = past_the_limit()
    m:rollback(1)
    local open, bias = tok():encode("(")[1], {}
    for _, id in ipairs(m:allowed():ids()) do bias[id] = id ~= open and -math.huge or nil end
    r:sampling(1, { temperature = 0, logit_bias = bias })
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { PROMPT_ID }, constraint = { m } }
    expect_error(function() r:step { slots = { 1 }, positions = { 1 }, tokens = h, constraint = { m } } end,
      "step: constraint[1]: " .. TOO_AMBIGUOUS)
    assert.are.equal(opens, m.tokens) -- it took the fed step's "(" before its mask failed
    assert.are.same({ open }, h:tokens())
    r:step { slots = { 1 }, positions = { 1 }, tokens = h }:tokens()
    assert.are.equal(2, r:length(1))
  end)

  it("fails a row whose matcher cannot take the token it drew, after every other row took its own", function()
    local r <close> = model():replica { device = "cpu", slots = 3, ctx = 16 }
    local m, opens = past_the_limit()
    m:rollback(1)
    -- the mask allows tokens of several "(" that its cache takes whole; the matcher walking them
    -- from its stacks passes its limit: only those are left to draw
    local bias, left = {}, 0
    for _, id in ipairs(m:allowed():ids()) do
      local f = m:fork()
      if pcall(f.accept, f, id) then bias[id] = -math.huge else left = left + 1 end
    end
    assert.is_true(left > 0)
    r:sampling(2, { temperature = 0, logit_bias = bias })
    local first, last = json_matcher(), gptoss.grammar.regex("[a-z]{2,6}"):matcher(tok())
    local h = step_all(r, 3, { first, m, last })
    local err = expect_error(function() h:tokens() end, "step: constraint[2]: the matcher cannot take token ",
      TOO_AMBIGUOUS)
    assert.is_nil(err:find("a bug", 1, true))
    assert.are.equal(1, first.tokens)
    assert.are.equal(1, last.tokens)
    assert.are.equal(opens - 1, m.tokens) -- as it was, and no longer waiting on the step
    assert.is_true(m:accept(tok():encode("x")[1]))
    for s = 1, 3 do assert.are.equal(1, r:length(s)) end
  end)
end)
