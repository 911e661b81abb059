-- gptoss serve's structured-output turns fed on the device while free (gptoss.runner's
-- header, docs/serve.md#structured-outputs): with two steps in flight, a turn's row in its
-- free analysis is fed by the step before on the device; an id that changes the turn drops
-- the draw made after it. A seeded request gives the ids of a run that waits for every id
-- (the engine at depth 1), on a 7m replica on the CPU (tests/serve_engine_jobs.lua).
local cjson = require "cjson"
local gptoss = require "gptoss"
local H = require "helpers"

describe("a structured-output turn fed on the device while free (a 7m replica on the CPU)", function()
  if not pcall(require, "gptoss.serve_http") then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local serve_engine_jobs = require "serve_engine_jobs"
  local tok = H.tokenizer(pending)
  local SCHEMA = { type = "object", additionalProperties = false, required = { "n" },
    properties = { n = { type = "integer", minimum = 0, maximum = 99 } } }
  local FORMAT = { type = "json_schema", json_schema = { name = "record", schema = SCHEMA, strict = true } }
  local TOOLS = { { type = "function", ["function"] = { name = "get_weather", strict = true,
    parameters = SCHEMA } } }

  -- Each job's {ids =, message =} with the engine at depth, and how many rows of a turn's
  -- sequence were fed on the device (a token -j: row j of the step before).
  local function serve(bodies, depth, plans)
    local device_fed = 0
    local function on_step(batch, _, running)
      for i, token in ipairs(batch.tokens) do
        for _, seq in ipairs(running) do
          if token < 0 and seq.turn and seq.slot == batch.slots[i] then device_fed = device_fed + 1 end
        end
      end
    end
    local out, seqs = serve_engine_jobs(bodies, { tok = tok, depth = depth, plans = plans, on_step = on_step })
    for k, choices in ipairs(out) do
      local message = choices[1]:message()
      for _, call in ipairs(message.tool_calls or {}) do call.id = nil end -- numbered by the process
      out[k] = { ids = seqs[k][1].output, message = message }
    end
    return out, device_fed
  end

  -- Asserts that bodies give the same ids and messages with two steps in flight as at
  -- depth 1 (plans_of() makes each run's plans, or nil); returns how many turn rows were fed
  -- on the device, and the jobs.
  local function same_as_waiting(bodies, plans_of)
    local waited = serve(bodies, 1, plans_of and plans_of())
    local pipelined, device_fed = serve(bodies, 2, plans_of and plans_of())
    for k in ipairs(bodies) do
      assert.are.same(waited[k].ids, pipelined[k].ids, "job " .. k .. "'s ids")
      assert.are.same(waited[k].message, pipelined[k].message, "job " .. k .. "'s message")
    end
    return device_fed, pipelined
  end

  it("feeds a json_schema turn's free analysis on the device, its ids those of a run that waits", function()
    local device_fed, out = same_as_waiting {
      { response_format = FORMAT, max_tokens = 60, temperature = 1 },
      { response_format = FORMAT, max_reasoning_tokens = 9, max_tokens = 80, temperature = 1 },
      { max_tokens = 30, temperature = 1 }, -- a free request beside them
    }
    assert.is_true(device_fed > 10, device_fed .. " turn rows fed on the device")
    -- the budget forced the final channel, its object after what the random model wrote
    local answer = out[2].message.content
    assert.is_table(cjson.decode(answer:match("(%b{})$") or "none"), answer)
  end)

  it("gives a required call's and a strict tool's turn the ids of a run that waits", function()
    same_as_waiting {
      { tools = TOOLS, tool_choice = "required", max_reasoning_tokens = 5, max_tokens = 60, temperature = 1 },
      { tools = TOOLS, max_reasoning_tokens = 6, max_tokens = 40, temperature = 1 },
    }
  end)

  -- A turn scripted by the count of ids it has taken: force = ids forced after that one,
  -- open = a matcher opened (no forced ids), close = none again, finish = the turn ends.
  local function scripted(script)
    local plan = {}
    function plan.new()
      local t = { taken = 0, finished = false }
      function t.matcher() return t.m end
      function t.push(_, _)
        t.taken = t.taken + 1
        local at = script[t.taken] or {}
        if at.open then t.m = gptoss.grammar.regex(at.open):matcher(tok) end
        if at.close then t.m = nil end
        t.finished = at.finish or false
        return at.force or {}
      end
      return t
    end
    return plan
  end

  it("drops the draw after an id that forced ids or opened a matcher, and feeds from the right position", function()
    local forced = tok:encode(" forced here", { mode = "o200k" })
    local script = { [4] = { force = forced }, [9] = { open = "[a-z]+" }, [14] = { close = true },
      [20] = { open = "[0-9]+" }, [24] = { close = true }, [30] = { finish = true } }
    -- the third's penalties would count a dropped draw (its greedy draw under an open matcher
    -- would then differ): it waits for each id
    local ANY = "[\\s\\S]*"
    local bodies = { { max_tokens = 60, temperature = 1 }, { max_tokens = 60, temperature = 1 },
      { max_tokens = 40, temperature = 0, presence_penalty = 2, frequency_penalty = 2 } }
    local device_fed, out = same_as_waiting(bodies, function()
      return { scripted(script), scripted { [2] = { open = "[a-z]+" }, [6] = { close = true } },
        scripted { [3] = { open = ANY }, [5] = { close = true }, [9] = { open = ANY }, [12] = { close = true },
          [16] = { open = ANY } } }
    end)
    assert.is_true(device_fed > 10, device_fed .. " turn rows fed on the device")
    local ids = out[1].ids
    assert.are.equal(30 + #forced, #ids) -- every draw taken once: none dropped was kept
    assert.are.same(forced, { table.unpack(ids, 5, 4 + #forced) })
    local under = tok:decode { table.unpack(ids, 10 + #forced, 14 + #forced) } -- drawn under [a-z]+
    assert.truthy(under:find("^[a-z]+$"), under)
  end)
end)
