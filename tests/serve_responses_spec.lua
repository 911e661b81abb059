-- gptoss serve's Responses API (POST /v1/responses, GET /v1/responses/{id}): the request read
-- into a harmony prompt (checked against harmony's own rendering), every field and error path
-- through curl against the synthetic 7m model on the CPU, the stream's events and their
-- order, previous_response_id chains and eviction, a tool loop over a scripted model
-- (tests/serve_scripted.lua), and the official openai client's responses.create and
-- responses.stream (tests/serve-client/responses.mjs).
local dkjson = require "dkjson"
local H = require "helpers"
local SH = require "serve_helpers"

local q = H.shell_quote
local why_not_http, why_not_client = SH.why_not_http, SH.why_not_client
local start, stop, kill_leftovers, curl = SH.start, SH.stop, SH.kill_leftovers, SH.curl

local WEATHER = { type = "function", name = "get_weather", description = "The weather in a city.", strict = false,
  parameters = { type = "object", properties = { city = { type = "string" } }, required = { "city" } } }

-- POST body (a table) to s's /v1/responses: the status, the decoded answer (JSON null as
-- dkjson.null) and its text.
local function post(s, body)
  local headers, text = curl(s, "/v1/responses", "-d " .. q(dkjson.encode(body)))
  return tonumber(headers:match("^HTTP/1%.1 (%d+)")), dkjson.decode(text, 1, dkjson.null), text
end

local function get(s, id)
  local headers, text = curl(s, "/v1/responses/" .. id)
  return tonumber(headers:match("^HTTP/1%.1 (%d+)")), dkjson.decode(text, 1, dkjson.null)
end

-- A streamed answer's events: {name = the event: line, data = decoded}, in order.
local function events_of(text)
  local events = {}
  for name, data in text:gmatch("event: ([^\n]*)\ndata: ([^\n]*)\n\n") do
    events[#events + 1] = { name = name, data = dkjson.decode(data, 1, dkjson.null) }
  end
  return events
end

-- The steps each kind of output item is told in, in order (its deltas left out).
local ITEM_STEPS = {
  message = { "output_item.added", "content_part.added", "output_text.done", "content_part.done", "output_item.done" },
  reasoning = { "output_item.added", "content_part.added", "reasoning_text.done", "content_part.done",
    "output_item.done" },
  function_call = { "output_item.added", "function_call_arguments.done", "output_item.done" },
}

-- A stream's text checked against the API's order: nothing but events, each numbered from 0
-- and named as its data's type; created and in_progress first, completed last; each output
-- item told in its steps, one item after another, its deltas between its added and done
-- steps adding up to its text, its done item the final response's. Returns the events and
-- the final response.
local function checked_stream(text)
  assert.are.equal("", (text:gsub("event: [^\n]*\ndata: [^\n]*\n\n", "")))
  local events = events_of(text)
  for i, e in ipairs(events) do assert.are.same({ e.name, i - 1 }, { e.data.type, e.data.sequence_number }) end
  assert.are.same({ "response.created", "response.in_progress", "response.completed" },
    { events[1].name, events[2].name, events[#events].name }) -- completed whatever the status
  local final, items = events[#events].data.response, {}
  for i = 3, #events - 1 do
    local e, step = events[i].data, events[i].name:match("^response%.(.*)$")
    local index = e.output_index + 1
    assert.is_true(index == #items or index == #items + 1, "the items are told one after another")
    items[index] = items[index] or { steps = {}, deltas = {} }
    local item = items[index]
    if step:find("%.delta$") then
      assert.truthy(item.steps[#item.steps]:find("%.added$"), "a delta after its item's added steps")
      item.deltas[#item.deltas + 1] = e.delta
    else
      item.steps[#item.steps + 1] = step
    end
    if step:find("_text%.done$") or step == "function_call_arguments.done" then
      assert.are.equal(table.concat(item.deltas), e.text or e.arguments)
    end
    if step == "output_item.done" then assert.are.same(final.output[index], e.item) end
  end
  assert.are.equal(#final.output, #items)
  for i, item in ipairs(items) do assert.are.same(ITEM_STEPS[final.output[i].type], item.steps) end
  return events, final
end

-- The text of a response's output items of type kind (their content parts, or arguments).
local function text_of(response, kind)
  local parts = {}
  for _, item in ipairs(response.output) do
    if item.type == kind then
      if kind == "function_call" then parts[#parts + 1] = item.arguments end
      for _, p in ipairs(item.content or {}) do parts[#parts + 1] = p.text end
    end
  end
  return table.concat(parts)
end

-- The openai client's Responses op (tests/serve-client/responses.mjs) against s with params.
local function client(s, op, params) return SH.client(s, "responses_" .. op, params) end

describe("gptoss serve's Responses API, a request read into a prompt and settings", function()
  if why_not_http then return pending(why_not_http) end
  local gptoss = require "gptoss"
  local harmony = require "gptoss.harmony"
  local input = require "gptoss.serve_responses_input"
  local tok = gptoss.tokenizer()
  local function job(body, earlier)
    return input.job(H.with({ model = "m" }, body), tok, 4096, function() return earlier end)
  end
  local CALL = { type = "function_call", call_id = "call_1", name = "get_weather", arguments = '{"city":"Paris"}' }
  local OUTPUT = { type = "function_call_output", call_id = "call_1", output = '{"sky":"sunny"}' }
  local function reasoning(text) return { type = "reasoning", summary = {}, content = { { type = "reasoning_text",
    text = text } } } end
  local function expected(turns, opts)
    local convo = { harmony.system { reasoning = opts and opts.effort or "medium" } }
    if opts and (opts.instructions or opts.tools) then
      convo[2] = harmony.developer { instructions = opts.instructions, tools = opts.tools }
    end
    return harmony.render_ids(table.move(turns, 1, #turns, #convo + 1, convo), tok)
  end
  local call_message = harmony.assistant('{"city":"Paris"}', { channel = "commentary",
    recipient = "functions.get_weather", content_type = "<|constrain|>json" })
  local tool_message = harmony.tool("functions.get_weather", '{"sky":"sunny"}', { channel = "commentary",
    recipient = "assistant" })
  local tools = { { name = "get_weather", description = WEATHER.description, parameters = WEATHER.parameters } }

  it("renders instructions, a string input and reasoning.effort as chat renders them", function()
    assert.are.same(expected({ harmony.user("Hi") }, { instructions = "Be brief.", effort = "low" }),
      job({ input = "Hi", instructions = "Be brief.", reasoning = { effort = "low" } }).prompt)
  end)

  it("keeps the analysis before a tool call in the prompt while the loop goes on", function()
    local j = job({ input = { { role = "user", content = { { type = "input_text", text = "Weather?" } } },
      reasoning("I should call it."), CALL, OUTPUT }, tools = { WEATHER } })
    assert.are.same(expected({ harmony.user("Weather?"), harmony.assistant("I should call it.",
      { channel = "analysis" }), call_message, tool_message }, { tools = tools }), j.prompt)
  end)

  it("drops the earlier turns' analysis once a final answer followed, the earlier items from the chain", function()
    local earlier = { { role = "user", content = "Weather?" }, reasoning("I should call it."), CALL, OUTPUT,
      reasoning("It is sunny."), { type = "message", role = "assistant", content = { { type = "output_text",
        text = "Sunny.", annotations = {} } } } }
    local j = job({ input = { { role = "user", content = "And tomorrow?" } }, tools = { WEATHER },
      previous_response_id = "resp_x" }, earlier)
    assert.are.same(expected({ harmony.user("Weather?"), call_message, tool_message,
      harmony.assistant("Sunny.", { channel = "final" }), harmony.user("And tomorrow?") }, { tools = tools }),
      j.prompt)
  end)

  it("leaves the tools out with tool_choice none, and echoes the request's settings", function()
    local j = job({ input = "Hi", tools = { WEATHER }, tool_choice = "none", metadata = { k = "v" }, store = false,
      max_output_tokens = 7, temperature = 0.5 })
    assert.are.same(expected({ harmony.user("Hi") }), j.prompt)
    local s = j.settings
    assert.are.same({ "none", "v", false, 7, 0.5, 7 }, { s.tool_choice, s.metadata.k, s.store, s.max_output_tokens,
      s.temperature, j.limit })
    assert.are.equal("get_weather", s.tools[1].name)
  end)

  it("echoes a tool's empty schema objects as objects and its empty lists as lists, and no metadata as none", function()
    local ping = { type = "function", name = "ping", parameters = { type = "object", properties = {}, required = {},
      items = { anyOf = { {} } } } }
    local j = job({ input = "Hi", tools = { ping }, metadata = {} })
    assert.are.equal('{"anyOf":[{}]}', dkjson.encode(j.settings.tools[1].parameters.items))
    local echoed = dkjson.encode(j.settings.tools[1].parameters)
    assert.truthy(echoed:find('"properties":{}', 1, true), echoed)
    assert.truthy(echoed:find('"required":[]', 1, true), echoed)
    assert.is_nil(j.settings.metadata)
  end)

  it("takes a count of responses to keep, and refuses another value", function()
    local serve = require "gptoss.serve"
    for _, bad in ipairs { 0, 2.5, "10" } do
      H.expect_error(function() serve.new { model = gptoss.synthetic("7m"), stored_responses = bad } end,
        "serve: stored_responses must be an integer >= 1")
    end
  end)
end)

describe("gptoss serve's Responses API", function()
  if why_not_http then return pending(why_not_http) end
  local s
  setup(function()
    s = start { "7m", "--port", "0", "--slots", "2", "--ctx", "512", "--stored-responses", "3" }
  end)
  teardown(function() SH.teardown_server(s) end)
  after_each(H.cleanup)

  it("answers a response object: its output, usage, status and the settings echoed", function()
    local status, r = post(s, { model = "7m", input = "Hello", instructions = "Be brief.", max_output_tokens = 6,
      temperature = 0, metadata = { topic = "greeting" } })
    assert.are.equal(200, status)
    assert.truthy(r.id:find("^resp_"))
    assert.are.same({ "response", "7m", "Be brief.", 6, 0, 1, "greeting", true, "auto" }, { r.object, r.model,
      r.instructions, r.max_output_tokens, r.temperature, r.top_p, r.metadata.topic, r.store, r.tool_choice })
    assert.are.same({ dkjson.null, dkjson.null, "medium" }, { r.previous_response_id, r.error, r.reasoning.effort })
    local u = r.usage
    assert.are.equal(u.input_tokens + u.output_tokens, u.total_tokens)
    assert.is_true(u.output_tokens >= 1 and u.output_tokens <= 6 and u.input_tokens > 0)
    -- all six tokens: incomplete, for max_output_tokens; fewer: the model ended it
    assert.are.equal(u.output_tokens == 6 and "incomplete" or "completed", r.status)
    for _, item in ipairs(r.output) do
      assert.truthy(item.id:find("^%l+_"))
      assert.truthy(item.type == "message" or item.type == "reasoning" or item.type == "function_call", item.type)
    end
  end)

  it("refuses each bad field with a 400 (404 for a model or response it does not have) naming it", function()
    local cases = {
      { {}, 400, "input" },
      { { input = { { type = "image", url = "x" } } }, 400, "input[0].type" },
      { { input = { { role = "user", content = { { type = "input_image", image_url = "x" } } } } }, 400,
        "input[0].content" },
      { { input = { { role = "tool", content = "x" } } }, 400, "input[0].role" },
      { { input = { { type = "function_call_output", call_id = "call_9", output = "x" } } }, 400, "input[0].call_id" },
      { { input = { { type = "function_call", call_id = "c", arguments = "{}" } } }, 400, "input[0].name" },
      { { tools = { { type = "web_search" } } }, 400, "tools[0]" },
      { { tools = { H.with(WEATHER, { name = "get weather" }) } }, 400, "tools[0].name" },
      { { tools = { H.with(WEATHER, { parameters = { 1, 2 } }) } }, 400, "tools" },
      { { tool_choice = "required" }, 400, "tool_choice", nil, "needs tools" },
      { { tool_choice = { type = "function", name = "nope" }, tools = { WEATHER } }, 400, "tool_choice" },
      { { tool_choice = { type = "file_search" }, tools = { WEATHER } }, 400, "tool_choice" },
      { { reasoning = { effort = "extreme" } }, 400, "reasoning.effort", nil, "'reasoning.effort' must be" },
      { { max_output_tokens = 100000 }, 400, "max_output_tokens", "context_length_exceeded", "'max_output_tokens'" },
      { { max_output_tokens = 0 }, 400, "max_output_tokens" },
      { { temperature = 3 }, 400, "temperature" },
      { { top_p = 0 }, 400, "top_p" },
      { { store = "yes" }, 400, "store" },
      { { parallel_tool_calls = 1 }, 400, "parallel_tool_calls" },
      { { instructions = 5 }, 400, "instructions" },
      { { metadata = { n = 5 } }, 400, "metadata" },
      { { text = { format = { type = "json_schema" } } }, 400, "text.format" },
      { { background = true }, 400, "background" },
      { { truncation = "auto" }, 400, "truncation" },
      { { previous_response_id = "resp_nothing" }, 404, "previous_response_id", "previous_response_not_found",
        "resp_nothing" },
      { { model = "gpt-4" }, 404, "model", "model_not_found" },
    }
    for i, case in ipairs(cases) do
      local body = H.with({ model = "7m", input = "Hi", max_output_tokens = 2 }, case[1])
      if i == 1 then body.input = nil end
      local status, answer, text = post(s, body)
      local e = answer.error or {}
      assert.are.same({ case[2], case[3] }, { status, e.param }, text)
      if case[4] then assert.are.equal(case[4], e.code, text) end
      if case[5] then assert.truthy(e.message:find(case[5]), text) end
    end
  end)

  it("ignores an unknown field, as chat does, and logs its name once", function()
    local status, r = post(s, { model = "7m", input = "Hi", max_output_tokens = 2, frobnicate = { 1 } })
    assert.are.same({ 200, "response" }, { status, r.object })
    assert.truthy(H.read_file(s.log):find("ignoring the unknown field 'frobnicate'", 1, true))
  end)

  it("gives a stored response to GET, and 404 for one not stored or unknown", function()
    local _, r = post(s, { model = "7m", input = "Hi", max_output_tokens = 3 })
    local status, again = get(s, r.id)
    assert.are.equal(200, status)
    assert.are.same(r, again)
    local _, unstored = post(s, { model = "7m", input = "Hi", max_output_tokens = 3, store = false })
    assert.are.equal(false, unstored.store)
    local e
    status, e = get(s, unstored.id)
    assert.are.same({ 404, "response_not_found" }, { status, e.error.code })
    assert.truthy(e.error.message:find(unstored.id, 1, true))
    status = get(s, "resp_unknown")
    assert.are.equal(404, status)
  end)

  it("chains previous_response_id: the prompt is the conversation given whole", function()
    local first = select(2, post(s, { model = "7m", input = "Hello", max_output_tokens = 4, temperature = 0 }))
    local next_turn = { role = "user", content = "Again" }
    local _, chained = post(s, { model = "7m", input = { next_turn }, previous_response_id = first.id,
      max_output_tokens = 4, temperature = 0 })
    assert.are.equal(first.id, chained.previous_response_id)
    local whole = { { role = "user", content = "Hello" } }
    for _, item in ipairs(first.output) do whole[#whole + 1] = item end
    whole[#whole + 1] = next_turn
    local _, given = post(s, { model = "7m", input = whole, max_output_tokens = 4, temperature = 0 })
    assert.are.equal(given.usage.input_tokens, chained.usage.input_tokens)
    assert.is_true(chained.usage.input_tokens > first.usage.input_tokens)
    assert.are.equal(text_of(given, "message"), text_of(chained, "message")) -- greedy: the same prompt, the same ids
  end)

  it("keeps the last --stored-responses responses, evicting the oldest first", function()
    local ids = {}
    for i = 1, 4 do ids[i] = select(2, post(s, { model = "7m", input = "Hi", max_output_tokens = 2 })).id end
    local status, e = get(s, ids[1])
    assert.are.equal(404, status)
    assert.truthy(e.error.message:find("keeps the last 3", 1, true))
    for i = 2, 4 do assert.are.equal(200, (get(s, ids[i]))) end
    local answer
    status, answer = post(s, { model = "7m", input = "Hi", max_output_tokens = 2, previous_response_id = ids[1] })
    assert.are.same({ 404, "previous_response_id" }, { status, answer.error.param })
  end)

  it("streams numbered events in the API's order, adding up to the response the whole answer is", function()
    local body = { model = "7m", input = "Hello", max_output_tokens = 8, temperature = 0 }
    local whole = select(2, post(s, body))
    local headers, text = curl(s, "/v1/responses", "-d " .. q(dkjson.encode(H.with(body, { stream = true }))))
    assert.truthy(headers:find("content-type: text/event-stream", 1, true))
    local events, last = checked_stream(text)
    assert.are.equal("in_progress", events[1].data.response.status)
    -- greedy: the stream's response is the whole one's, but for the ids
    assert.are.same({ whole.status, whole.usage, text_of(whole, "message") },
      { last.status, last.usage, text_of(last, "message") })
  end)
end)

describe("gptoss serve's Responses API over a scripted model (tests/serve_scripted.lua)", function()
  if why_not_http then return pending(why_not_http) end
  after_each(H.cleanup)
  teardown(kill_leftovers)
  local body = { model = "scripted", input = "What is the weather in Paris?", max_output_tokens = 100,
    temperature = 0, tools = { WEATHER } }

  it("runs a tool loop: a function_call, its output back, then reasoning and an answer, streamed too", function()
    local s = start({}, "tests/serve_scripted.lua")
    local _, first = post(s, body)
    assert.are.equal(1, #first.output)
    local call = first.output[1]
    assert.are.same({ "function_call", "get_weather", '{"city": "Paris"}', "completed" },
      { call.type, call.name, call.arguments, first.status })
    local result = { type = "function_call_output", call_id = call.call_id, output = '{"sky": "sunny"}' }
    local streamed = select(3, post(s, H.with(body, { input = { result }, previous_response_id = first.id,
      stream = true })))
    local events, second = checked_stream(streamed)
    assert.are.same({ "reasoning", "message" }, { second.output[1].type, second.output[2].type })
    -- what openai/gpt-oss's compatibility test asks of a reasoning item: its text in content parts
    assert.are.same({ { type = "reasoning_text", text = "The tool says sunny." } }, second.output[1].content)
    assert.are.equal("It is sunny in Paris.", text_of(second, "message"))
    -- the analysis's text and its <|end|>, as the script writes them
    local tok = require("gptoss").tokenizer()
    assert.are.equal(#tok:encode("The tool says sunny.", { mode = "o200k" }) + 1,
      second.usage.output_tokens_details.reasoning_tokens)
    local seen = {}
    for _, e in ipairs(events) do seen[e.name] = (seen[e.name] or 0) + 1 end
    for _, name in ipairs { "response.reasoning_text.delta", "response.reasoning_text.done",
      "response.output_text.delta", "response.output_text.done", "response.completed" } do
      assert.truthy(seen[name], name)
    end
    -- the call's events, streamed
    events = checked_stream(select(3, post(s, H.with(body, { stream = true }))))
    local args = {}
    for _, e in ipairs(events) do
      if e.name == "response.function_call_arguments.delta" then args[#args + 1] = e.data.delta end
      if e.name == "response.function_call_arguments.done" then
        assert.are.same({ "get_weather", '{"city": "Paris"}' }, { e.data.name, e.data.arguments })
      end
    end
    assert.are.equal('{"city": "Paris"}', table.concat(args))
    assert.are.equal(0, stop(s))
  end)

  it("frees the slot of a client that goes away mid-stream", function()
    local f = start({ "--unscripted", "--delay", "0.02" }, "tests/serve_scripted.lua")
    curl(f, "/v1/responses", "-m 1 -d " .. q(dkjson.encode { model = "scripted", input = "Hi",
      max_output_tokens = 250, stream = true }))
    assert.are.equal(0, SH.metric_reaches(f, "gptoss_slots_in_use", 0))
    assert.truthy(H.read_file(f.log):find("the client went away", 1, true))
    local generated = SH.metric(f, "gptoss_generation_tokens_total")
    assert.is_true(generated < 250, ("the sequence ran on: %d tokens"):format(generated))
    assert.are.equal(0, stop(f))
  end)
end)

describe("gptoss serve's Responses API through the openai client", function()
  if why_not_client then return pending(why_not_client) end
  after_each(H.cleanup)
  teardown(kill_leftovers)

  it("answers responses.create, responses.stream and retrieve, and raises the 404 of an unknown id", function()
    local s = start { "7m", "--port", "0", "--slots", "2", "--ctx", "512" }
    local body = { model = "7m", input = "Hello", max_output_tokens = 6, temperature = 0 }
    local whole = client(s, "create", body)
    assert.are.equal("response", whole.object)
    local helper = client(s, "helper_stream", body)
    -- the client's own accumulation of the events is the response the stream ended with
    assert.are.equal(text_of(whole, "message"), text_of(helper.final, "message"))
    assert.are.equal(whole.usage.output_tokens, helper.final.usage.output_tokens)
    local events = client(s, "create_stream", body)
    assert.are.equal("response.created", events[1].type)
    assert.are.same(whole.usage, events[#events].response.usage)
    assert.are.equal(whole.id, client(s, "retrieve", { id = whole.id }).id)
    local e = client(s, "create", H.with(body, { previous_response_id = "resp_gone" })).error
    assert.are.same({ 404, "previous_response_id", "previous_response_not_found" }, { e.status, e.param, e.code })
    assert.are.equal(0, stop(s))
  end)

  it("runs a tool loop, chained by previous_response_id or given whole", function()
    local s = start({}, "tests/serve_scripted.lua")
    for _, chain in ipairs { true, false } do
      local r = client(s, "tool_loop", { chain = chain, model = "scripted", input = "What is the weather in Paris?",
        max_output_tokens = 100, temperature = 0, tools = { WEATHER } })
      assert.are.same({ city = "Paris" }, r.args)
      assert.are.equal("It is sunny in Paris.", r.second.output_text)
      assert.are.equal(chain and r.first.id or nil, r.second.previous_response_id)
    end
    assert.are.equal(0, stop(s))
  end)
end)
