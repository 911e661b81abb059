-- Generated JSON schemas decoded by a random-weight 7m model on the CPU engine at temperature
-- 1 (tests/constraint_walk.lua), sixteen sequences to a step, each row under its schema's
-- matcher: every finished output is validated by ajv (pending where node or ajv is missing),
-- and nearly all finish within 600 tokens. tools/constraint_walk.lua runs hundreds.

local H = require "helpers"
local G = require "grammar_gen"
local W = require "constraint_walk"

local SCHEMAS, MAX_TOKENS = 48, 600

describe("a random-weight model under generated schemas", function()
  it("writes JSON that ajv validates, nearly always within 600 tokens", function()
    local why = G.why_no_ajv()
    if why then pending(why) end
    local tok = H.tokenizer(pending)
    local out = W.run { tokenizer = tok, first = 1, n = SCHEMAS, max_tokens = MAX_TOKENS }
    assert.are.equal(SCHEMAS, #out.cases)
    local verdicts = G.ajv(out.cases)
    for i, c in ipairs(out.cases) do
      for j, verdict in ipairs(verdicts[i]) do
        assert(verdict == true, ("schema %s\noutput %q\najv: %s"):format(c.text, c.outputs[j], tostring(verdict)))
      end
    end
    assert.is_true(out.finished >= 0.9 * SCHEMAS, ("%d of %d finished"):format(out.finished, SCHEMAS))
  end)
end)
