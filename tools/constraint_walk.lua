-- Generated JSON schemas decoded under their grammars by a random-weight 7m model on the CPU
-- engine (temperature 1, seeded by schema), every finished output validated by ajv; prints
-- the share that finished within the token limit. The suite runs a few dozen
-- (tests/constraint_walk_spec.lua); this runs as many as asked, outside it:
--   gptoss tools/constraint_walk.lua [SCHEMAS (500)] [MAX_TOKENS (600)]
-- Needs node and tests/schema-check's packages (npm ci there).
local here = debug.getinfo(1, "S").source:match("^@(.*)tools/[^/]*$") or "./"
package.path = here .. "tests/?.lua;" .. package.path
local gptoss = require "gptoss"
local G = require "grammar_gen"
local W = require "constraint_walk"

local n, max = math.tointeger(tonumber(arg[1] or "500")), math.tointeger(tonumber(arg[2] or "600"))
if not n or n < 1 or not max or max < 1 then error("usage: constraint_walk.lua [SCHEMAS] [MAX_TOKENS]", 0) end
local why = G.why_no_ajv()
if why then error(why, 0) end
local started = gptoss.clock()
local out = W.run { tokenizer = gptoss.tokenizer(), first = 1, n = n, max_tokens = max }
local seconds = gptoss.clock() - started
local verdicts, invalid = G.ajv(out.cases), 0
for i, c in ipairs(out.cases) do
  for j, verdict in ipairs(verdicts[i]) do
    if verdict ~= true then
      invalid = invalid + 1
      io.stderr:write(("schema %s\noutput %q\najv: %s\n"):format(c.text, c.outputs[j], tostring(verdict)))
    end
  end
end
print(("%d schemas: %d finished within %d tokens (%.1f%%), %d of them invalid by ajv; %d tokens in %d steps, %.1f s")
  :format(n, out.finished, max, 100 * out.finished / n, invalid, out.tokens, out.steps, seconds))
os.exit(invalid == 0)
