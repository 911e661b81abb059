-- The GPU sampler under constraints (tag gpu; pending without a GPU): a constrained row's
-- token and logprobs are the CPU sampler's on the GPU's own logits with the mask's tokens at
-- -inf, for greedy and filtered draws, beside an unconstrained row that draws as it would
-- alone; a generation fed on the device (tokens = h) stays in its grammar; a bias that leaves
-- the mask nothing fails the row saying so. The CPU engine's copy: constraint_step_spec.lua.
local gptoss = require "gptoss"
local H = require "helpers"
local json = require "dkjson"
local T = gptoss.tensor

local function tok() return H.tokenizer(pending) end

-- row (a host tensor row) as a table with the tokens m's allowed set leaves out at -inf
local function masked(row, allowed)
  local out = row:totable()
  for i = 1, #out do
    if not allowed:has(i - 1) then out[i] = -math.huge end
  end
  return T.from(out)
end

describe("the GPU sampler under a constraint #gpu", function()
  if H.no_gpu(pending) then return end

  it("draws what the CPU sampler draws from the masked logits, and leaves other rows alone", function()
    local r <close> = gptoss.synthetic("7m", { seed = 3 }):replica { device = 0, slots = 2, ctx = 64 }
    local settings = { { temperature = 0 }, { temperature = 1, seed = 5 }, { temperature = 0.7, top_k = 20, seed = 6 },
      { temperature = 1.3, top_p = 0.8, min_p = 0.02, seed = 7 } }
    for _, params in ipairs(settings) do
      params.logprobs = 4
      r:sampling(1, params)
      r:sampling(2, params)
      local m = gptoss.grammar.regex("[a-z]{1,8}( [a-z]{1,8}){0,3}"):matcher(tok())
      local allowed = m:allowed()
      local h = r:step { slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 13225, 13225 }, logits = true,
        constraint = { [1] = m } }
      local logits, ids, lps = h:logits(), h:tokens(), h:logprobs()
      local cpu = gptoss.sampler { temperature = params.temperature, top_k = params.top_k, top_p = params.top_p,
        min_p = params.min_p, seed = params.seed or 0, logprobs = 4 }
      local id, lp, top = cpu:sample(masked(logits[1], allowed), 1)
      assert.are.equal(id, ids[1])
      assert.is_true(allowed:has(ids[1]))
      assert.near(lp, lps[1].logprob, 1e-6)
      for k, t in ipairs(top) do assert.are.equal(t.id, lps[1].top[k].id) end
      local free = cpu:sample(logits[2], 1)
      assert.are.equal(free, ids[2])
    end
  end)

  it("keeps a generation fed on the device in its grammar", function()
    local r <close> = gptoss.synthetic("7m", { seed = 4 }):replica { device = 0, slots = 1, ctx = 256 }
    r:sampling(1, { temperature = 1, seed = 8 })
    local schema = { type = "object", additionalProperties = false, required = { "n" },
      properties = { n = { type = "integer", minimum = 0, maximum = 999 } } }
    local m = gptoss.grammar.json_schema(schema):matcher(tok(), { end_ids = { tok().special["end"] } })
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 }, constraint = { m } }
    local steps = { h }
    while not m.ended and #steps < 200 do
      h = r:step { slots = { 1 }, positions = { #steps }, tokens = h, constraint = { m } }
      steps[#steps + 1] = h
    end
    local ids = {}
    for i = 1, #steps - 1 do ids[i] = steps[i]:tokens()[1] end
    assert.is_true(m.ended)
    assert.is_true(json.decode(tok():decode(ids)).n <= 999)
  end)

  it("fails a row whose bias leaves its mask nothing", function()
    local r <close> = gptoss.synthetic("7m"):replica { device = 0, slots = 1, ctx = 16 }
    local m = gptoss.grammar.regex("b"):matcher(tok())
    local bias = {}
    for _, id in ipairs(m:allowed():ids()) do bias[id] = -math.huge end
    r:sampling(1, { temperature = 1, seed = 1, logit_bias = bias })
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 }, constraint = { m } }
    H.expect_error(function() h:tokens() end, "row 1:", "the constraint allows no token")
  end)
end)
