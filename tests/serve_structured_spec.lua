-- gptoss serve's structured outputs (docs/serve.md#structured-outputs): chat's response_format,
-- strict tools, tool_choice "required" and named, reasoning_effort "none" and
-- max_reasoning_tokens read into a turn's plan (in this process); the engine's steps with
-- constrained sequences beside free ones on a 7m CPU replica; then a server of the random-weight
-- 7m model, the best adversary, through curl and the openai npm client, every finished output
-- validated by ajv (tests/schema-check).
local cjson = require "cjson"
local dkjson = require "dkjson"
local G = require "grammar_gen"
local H = require "helpers"
local SH = require "serve_helpers"

local q = H.shell_quote
local ok_http = pcall(require, "gptoss.serve_http")

local SCHEMA = { type = "object", additionalProperties = false, required = { "name", "n", "ok" },
  properties = { name = { type = "string", maxLength = 12 }, n = { type = "integer", minimum = 0, maximum = 99 },
    ok = { type = "boolean" }, tags = { type = "array", maxItems = 3, items = { enum = { "a", "b" } } } } }
local CITY = { type = "object", additionalProperties = false, required = { "city" },
  properties = { city = { type = "string", maxLength = 10 } } }
local TOOLS = { { type = "function", ["function"] = { name = "get_weather", strict = true, parameters = CITY } },
  { type = "function", ["function"] = { name = "note", parameters = { type = "object" } } } }
local FORMAT = { type = "json_schema", json_schema = { name = "record", schema = SCHEMA, strict = true } }
-- A schema whose properties are listed out of their names' order, as JSON text (a Lua table
-- keeps no order): OpenAI's and every engine's output writes them in the schema's order.
local ORDERED = '{"type":"object","additionalProperties":false,"required":["zeta","alpha","mid"],"properties":'
  .. '{"zeta":{"type":"boolean"},"alpha":{"enum":["a","b"]},"mid":{"type":"integer","minimum":0,"maximum":9}}}'

-- A chat body as the server decodes it (cjson: [] and {} alike, numbers as floats).
local function decoded(fields)
  return cjson.decode(dkjson.encode(H.with({ model = "7m", messages = { { role = "user", content = "Hi" } } }, fields)))
end

describe("serve_openai's structured-output fields", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local serve_openai = require "gptoss.serve_openai"
  local tok = H.tokenizer(pending)
  local function chat(fields) return serve_openai.chat(decoded(fields), tok, 600) end

  it("takes response_format text as nothing; shows a schema and constrains the reply to it", function()
    local plain = chat {}
    local text = chat { response_format = { type = "text" } }
    assert.are.same({ plain.prompt }, { text.prompt, text.plan, text.prefill })
    local job = chat { response_format = FORMAT, reasoning_effort = "none" }
    local shown = tok:decode(job.prompt)
    assert.truthy(shown:find('<|start|>developer<|message|># Response Formats\n\n## record\n\n// \n'
      .. '{"additionalProperties":false,"properties":{"n":{"maximum":99,"minimum":0,"type":"integer"},', 1, true),
      shown)
    assert.truthy(shown:find("Reasoning: low", 1, true), shown)
    assert.truthy(shown:find("<|start|>assistant<|channel|>final<|message|>$"), shown)
    assert.is_true(job.plan.constrains)
    -- an empty list and whole numbers as cjson decodes them still make the schema meant
    local empty = { type = "object", properties = {}, required = {}, additionalProperties = false }
    job = chat { response_format = { type = "json_schema", json_schema = { name = "e", schema = empty } } }
    assert.truthy(tok:decode(job.prompt):find('{"additionalProperties":false,"properties":{},"required":[],'
      .. '"type":"object"}', 1, true))
    job = chat { tools = TOOLS, tool_choice = { type = "function", ["function"] = { name = "note" } } }
    assert.truthy(tok:decode(job.prompt):find("<|start|>assistant<|channel|>analysis<|message|>$"))
    assert.is_nil(chat({ tools = TOOLS, tool_choice = "none" }).plan)
    assert.is_true(chat({ tools = TOOLS }).plan.constrains) -- get_weather is strict
  end)

  it("keeps a schema's property order from the body's text: prompt, grammar and echo, chat, tools and Responses",
    function()
      local serve_http = require "gptoss.serve_http"
      local serve_responses_input = require "gptoss.serve_responses_input"
      local spaced = ORDERED:gsub('":', '" : '):gsub(",", ",\n  ") -- the prompt shows it compact
      local function fits(g, text)
        local m = g:matcher(tok)
        for _, id in ipairs(tok:encode(text, { mode = "o200k" })) do
          if not m:accept(id) then return false end
        end
        return m:done()
      end
      local function in_order(g)
        assert.is_true(fits(g, '{"zeta":true,"alpha":"a","mid":3}'))
        assert.is_false(fits(g, '{"alpha":"a","mid":3,"zeta":true}'))
      end
      local head = '{"model":"7m","messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"none",'
      local job = serve_openai.chat(serve_http.decode(head .. '"response_format":{"type":"json_schema",'
        .. '"json_schema":{"name":"ordered","strict":true,"schema":' .. spaced .. '}}}'), tok, 600)
      local shown = tok:decode(job.prompt)
      assert.truthy(shown:find("## ordered\n\n// \n" .. ORDERED, 1, true), shown)
      in_order(job.plan.final)
      job = serve_openai.chat(serve_http.decode(head .. '"tool_choice":"required","tools":[{"type":"function",'
        .. '"function":{"name":"f","strict":true,"parameters":' .. spaced .. '}}]}'), tok, 600)
      in_order(job.plan.tools.f)
      job = serve_responses_input.job(serve_http.decode('{"model":"7m","input":"Hi","text":{"format":{"type":'
        .. '"json_schema","name":"ordered","strict":true,"schema":' .. spaced .. '}}}'), tok, 600)
      in_order(job.plan.final)
      assert.are.equal(ORDERED, dkjson.encode(job.settings.format.schema))
    end)

  it("declares a tool's parameters in the body's order in the prompt's # Tools, nested ones too; chat and Responses",
    function()
      local serve_http = require "gptoss.serve_http"
      local serve_responses_input = require "gptoss.serve_responses_input"
      local parameters = '{"type":"object","required":["zeta"],"properties":{"zeta":{"type":"object","properties":'
        .. '{"y":{"type":"string"},"x":{"type":"number"}}},"alpha":{"type":"array","items":{"oneOf":[{"type":'
        .. '"object","properties":{"q":{"type":"boolean"},"p":{"type":"null"}}},{"type":"string"}]}}}}'
      local declared = "type f = (_: {\nzeta: {\n    y?: string,\n    x?: number,\n    },\nalpha?: \n"
        .. "     | {\n       q?: boolean,\n       p?: null,\n       }\n     | string[],\n}) => any;"
      local chat_job = serve_openai.chat(serve_http.decode('{"model":"7m","messages":[{"role":"user","content":"Hi"}],'
        .. '"tools":[{"type":"function","function":{"name":"f","parameters":' .. parameters .. '}}]}'), tok, 600)
      local responses_job = serve_responses_input.job(serve_http.decode('{"model":"7m","input":"Hi","tools":[{"type":'
        .. '"function","name":"f","parameters":' .. parameters .. '}]}'), tok, 600)
      for _, job in ipairs { chat_job, responses_job } do
        local shown = tok:decode(job.prompt)
        assert.truthy(shown:find(declared, 1, true), shown)
      end
      -- a body decoded without its text (a caller's tables) keeps name order
      local unordered = chat { tools = { { type = "function", ["function"] = { name = "f",
        parameters = cjson.decode(parameters) } } } }
      local shown = tok:decode(unordered.prompt)
      assert.truthy(shown:find("type f = (_: {\nalpha?: ", 1, true), shown)
    end)

  it("refuses a bad format, schema, tool choice or budget with a 400 naming the field", function()
    for _, case in ipairs {
      { { response_format = { type = "xml" } }, "response_format", "must be {\"type\": \"text\"}" },
      { { response_format = { type = "json_schema", json_schema = { schema = SCHEMA } } }, "response_format",
        "'response_format.json_schema' must be" },
      { { response_format = { type = "json_schema", json_schema = { name = "p",
        schema = { type = "object", properties = { x = { typ = 1 } } } } } }, "response_format",
        "response_format.json_schema: format: $.properties.x: unknown keyword 'typ'" },
      { { response_format = { type = "json_schema", json_schema = { name = "p", schema = { minimum = 5,
        maximum = 3 } } } }, "response_format", "$.minimum: 5 is above the maximum 3" },
      { { tools = { { type = "function", ["function"] = { name = "f", strict = true,
        parameters = { type = "object", oneOf = {} } } } } }, "tools", "tools[0] (f): format: $.oneOf" },
      { { tools = { { type = "function", ["function"] = { name = "f", strict = "yes" } } } },
        "tools[0].function.strict", "must be a boolean" },
      { { tool_choice = "required" }, "tool_choice", "needs tools" },
      { { tool_choice = "any", tools = TOOLS }, "tool_choice", "must be \"auto\", \"none\", \"required\"" },
      { { tool_choice = { type = "function", ["function"] = { name = "nope" } }, tools = TOOLS }, "tool_choice",
        "one of the tools" },
      { { max_reasoning_tokens = -1 }, "max_reasoning_tokens", "must be an integer >= 0" },
    } do
      local err = SH.refusal(serve_openai.chat, decoded(case[1]), tok, 600)
      assert.are.same({ 400, case[2] }, { err.status, err.param }, err.message)
      assert.truthy(err.message:find(case[3], 1, true), err.message)
    end
  end)
end)

describe("the serve engine with constrained sequences beside free ones (a 7m replica on the CPU)", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local serve_engine_jobs = require "serve_engine_jobs"
  local tok = H.tokenizer(pending)

  -- Each job's choices (tests/serve_engine_jobs.lua); every step's batch is seen by
  -- on_step(batch, unread) (unread: whether the step before was still unread when it was
  -- enqueued).
  local function serve(bodies, on_step)
    return (serve_engine_jobs(bodies, { tok = tok, on_step = on_step }))
  end

  -- Checks that each slot's rows feed its positions in order, none skipped.
  local function gapless()
    local next_position = {}
    return function(batch)
      for i, slot in ipairs(batch.slots) do
        assert.are.equal(next_position[slot] or 0, batch.positions[i], "slot " .. slot .. "'s next position")
        next_position[slot] = batch.positions[i] + 1
      end
    end
  end

  it("keeps two steps in flight: a constrained row waits for its id, free rows run ahead and draw as alone", function()
    local free = { max_tokens = 40, temperature = 1 }
    local alone = serve({ free })[1][1]:message()
    local constrained = { response_format = FORMAT, reasoning_effort = "none", max_tokens = 120 }
    local turn_slots, unread_before, constraints, in_order = {}, {}, 0, gapless()
    local both = serve({ free, constrained }, function(batch, unread)
      in_order(batch)
      unread_before[#unread_before + 1] = unread
      for row, m in pairs(batch.constraint or {}) do
        constraints = constraints + 1
        turn_slots[batch.slots[row]] = true
        assert.is_true(m.tokens >= 0)
      end
      for i, slot in ipairs(batch.slots) do
        -- a constrained sequence's rows feed ids read back, never a row of the step before
        if turn_slots[slot] then assert.is_true(batch.tokens[i] >= 0, "a constrained row fed on the device") end
      end
    end)
    assert.are.same(alone, both[1][1]:message())
    local answer = both[2][1]:message().content
    assert.is_table(cjson.decode(answer), answer)
    assert.is_true(constraints > 5)
    for i = 2, #unread_before - 1 do assert.is_true(unread_before[i], "step " .. i .. " waited for the one before") end
  end)

  it("feeds a turn's forced ids after the id that called for them, as generated ids", function()
    local named = { type = "function", ["function"] = { name = "get_weather" } }
    local out = serve({ { tools = TOOLS, tool_choice = named, max_reasoning_tokens = 3, max_tokens = 80 } }, gapless())
    local m = out[1][1]:message()
    assert.are.equal("get_weather", m.tool_calls and m.tool_calls[1]["function"].name, dkjson.encode(m))
    assert.is_table(cjson.decode(m.tool_calls[1]["function"].arguments))
    assert.is_string(m.reasoning_content)
  end)
end)

describe("gptoss serve's structured outputs (a random-weight 7m server)", function()
  if SH.why_not_client then
    pending(SH.why_not_client)
    return
  end
  local s
  setup(function() s = SH.start { "7m", "--port", "0", "--slots", "16", "--ctx", "512" } end)
  teardown(function() SH.teardown_server(s) end)
  after_each(H.cleanup)

  -- POST body to s's path: the decoded answer (a stream's: the decoded data of its events).
  local function post(path, body)
    local _, text = SH.curl(s, path, "-d " .. q(dkjson.encode(body)))
    if not body.stream then return dkjson.decode(text, 1, dkjson.null), text end
    local events = {}
    for data in text:gmatch("data: ([^\n]*)\n\n") do
      if data ~= "[DONE]" then events[#events + 1] = dkjson.decode(data, 1, dkjson.null) end
    end
    return events, text
  end

  -- ajv's verdict on each text of outputs under schema: asserts all are valid.
  local function all_valid(schema, outputs)
    local why = G.why_no_ajv()
    if why then return pending(why) end
    for i, verdict in ipairs(G.ajv { { schema = schema, outputs = outputs } }[1]) do
      assert(verdict == true, ("output %q: %s"):format(outputs[i], tostring(verdict)))
    end
  end

  it("answers in the schema: every finished choice of 32 seeds, whole and streamed, is valid", function()
    local body = { model = "7m", messages = { { role = "user", content = "A record?" } }, n = 16, seed = 7,
      max_tokens = 200, reasoning_effort = "none", response_format = FORMAT }
    local whole = post("/v1/chat/completions", body)
    local finished = {}
    for _, c in ipairs(whole.choices) do
      if c.finish_reason == "stop" then finished[#finished + 1] = c.message.content end
    end
    local streamed, ends = {}, {}
    for _, e in ipairs(post("/v1/chat/completions", H.with(body, { seed = 23, stream = true }))) do
      for _, c in ipairs(e.choices) do
        local i = c.index + 1
        streamed[i] = (streamed[i] or "") .. (c.delta.content ~= dkjson.null and c.delta.content or "")
        if c.finish_reason ~= dkjson.null then ends[i] = c.finish_reason end
      end
    end
    for i = 1, 16 do
      if ends[i] == "stop" then finished[#finished + 1] = streamed[i] end
    end
    assert.is_true(#finished >= 28, ("%d of 32 finished within 200 tokens"):format(#finished))
    all_valid(SCHEMA, finished)
  end)

  it("writes a schema's properties in the order the body lists them", function()
    local _, text = SH.curl(s, "/v1/chat/completions", "-d " .. q('{"model":"7m","messages":[{"role":"user",'
      .. '"content":"In order?"}],"n":4,"seed":11,"max_tokens":60,"reasoning_effort":"none","response_format":'
      .. '{"type":"json_schema","json_schema":{"name":"ordered","strict":true,"schema":' .. ORDERED .. '}}}'))
    local answer = cjson.decode(text)
    for _, c in ipairs(answer.choices) do
      assert.are.equal("stop", c.finish_reason)
      assert.truthy(c.message.content:find('^{"zeta":[a-z]+,"alpha":"[ab]","mid":%d}$'), c.message.content)
    end
  end)

  -- (any object's keys and strings are unbounded: a random model rarely closes one, so
  -- many choices run to max_tokens, their content an object's beginning)
  it("holds json_object to an object", function()
    local whole = post("/v1/chat/completions", { model = "7m", messages = { { role = "user", content = "JSON?" } },
      n = 8, seed = 3, max_tokens = 100, reasoning_effort = "none", response_format = { type = "json_object" } })
    local objects = {}
    for _, c in ipairs(whole.choices) do
      if c.finish_reason == "stop" then objects[#objects + 1] = c.message.content end
      assert.are.equal("{", c.message.content:sub(1, 1))
    end
    assert.is_true(#objects >= 1, "none finished")
    all_valid({ type = "object" }, objects)
  end)

  it("makes the call tool_choice requires after max_reasoning_tokens, of the tool it names, its strict arguments valid",
    function()
      local body = { model = "7m", messages = { { role = "user", content = "Weather?" } }, n = 8, seed = 5,
        max_tokens = 100, max_reasoning_tokens = 4, tools = TOOLS, tool_choice = "required", logprobs = true }
      local args, calls = {}, 0
      for _, choice in ipairs { "required", { type = "function", ["function"] = { name = "note" } } } do
        local allowed = choice == "required" and { get_weather = true, note = true } or { note = true }
        local answer = post("/v1/chat/completions", H.with(body, { tool_choice = choice }))
        local entries = 0 -- the forced ids' too (logprob 0): one a token generated
        for _, c in ipairs(answer.choices) do entries = entries + #c.logprobs.content end
        assert.are.equal(answer.usage.completion_tokens, entries)
        for _, c in ipairs(answer.choices) do
          local call = c.message.tool_calls[1]["function"] -- made by each, if cut short by max_tokens
          assert.are.equal(c.message.reasoning, c.message.reasoning_content) -- vLLM's two names
          assert.is_true(#c.message.reasoning > 0)
          assert.is_true(allowed[call.name], call.name)
          if c.finish_reason == "tool_calls" then
            assert.is_table(cjson.decode(call.arguments))
            calls = calls + 1
            if call.name == "get_weather" then args[#args + 1] = call.arguments end
          else
            assert.are.equal("length", c.finish_reason) -- a note's arguments, any object, still under way
          end
        end
      end
      assert.is_true(calls >= 4, calls .. " of 16 calls finished within 100 tokens")
      all_valid(CITY, args)
    end)

  it("answers the Responses API's text.format and a required call", function()
    local outputs = {}
    for _ = 1, 4 do
      local r = post("/v1/responses", { model = "7m", input = "A record?", reasoning = { effort = "none" },
        max_output_tokens = 200, text = { format = { type = "json_schema", name = "record", schema = SCHEMA,
          strict = true } } })
      assert.are.same({ "json_schema", "record" }, { r.text.format.type, r.text.format.name })
      if r.status == "completed" then outputs[#outputs + 1] = r.output[#r.output].content[1].text end
    end
    assert.is_true(#outputs >= 3, #outputs .. " of 4 completed")
    all_valid(SCHEMA, outputs)
    local r = post("/v1/responses", { model = "7m", input = "Weather?", max_reasoning_tokens = 3,
      max_output_tokens = 120, tool_choice = { type = "function", name = "get_weather" },
      tools = { { type = "function", name = "get_weather", strict = true, parameters = CITY } } })
    local call = r.output[#r.output]
    assert.are.same({ "function_call", "get_weather" }, { call.type, call.name })
    all_valid(CITY, { call.arguments })
  end)

  it("gives the openai client's parse its parsed message, arguments and Responses output", function()
    local chat = { model = "7m", messages = { { role = "user", content = "A record?" } }, seed = 2, max_tokens = 200,
      reasoning_effort = "none", response_format = FORMAT }
    local parsed = SH.client(s, "chat_parse", chat)
    local m = parsed.choices[1].message
    assert.are.same(cjson.decode(m.content), cjson.decode(dkjson.encode(m.parsed)))
    all_valid(SCHEMA, { m.content })
    parsed = SH.client(s, "chat_parse", { model = "7m", messages = chat.messages, seed = 2, max_tokens = 120,
      max_reasoning_tokens = 3, tools = { TOOLS[1] }, tool_choice = "required" })
    local call = parsed.choices[1].message.tool_calls[1]["function"]
    assert.are.equal("get_weather", call.name)
    assert.are.same(cjson.decode(call.arguments), cjson.decode(dkjson.encode(call.parsed_arguments)))
    local response = SH.client(s, "responses_parse", { model = "7m", input = "A record?",
      reasoning = { effort = "none" }, max_output_tokens = 200,
      text = { format = { type = "json_schema", name = "record", schema = SCHEMA, strict = true } } })
    all_valid(SCHEMA, { dkjson.encode(response.output_parsed) })
    local e = SH.client(s, "chat_parse", H.with(chat, { response_format = { type = "json_schema",
      json_schema = { name = "p", schema = { type = "object", properties = { x = { typ = 1 } } } } } })).error
    assert.are.same({ 400, "response_format" }, { e.status, e.param })
    assert.truthy(e.message:find("$.properties.x: unknown keyword 'typ'", 1, true), e.message)
  end)
end)
