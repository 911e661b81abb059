-- What OpenAI's conformance suite for gpt-oss providers (compatibility-test/ in openai/gpt-oss,
-- run as docs/serve.md#conformance says) checks of a server, as our own specs: an agent's tool
-- loop in the request shapes OpenAI's Agents SDK sends (tests/serve-client/agent_loop.mjs,
-- the official openai client) against a random-weight 7m server, over chat completions and
-- the Responses API, whole and streamed. The first turn requires the call (a random model
-- would not make one) of a strict tool whose arguments can only be one of two objects, greedy
-- after a reasoning budget, so that every answer is the same whatever the run; the tool's
-- output goes back and the second turn is the model's own.
local dkjson = require "dkjson"
local G = require "grammar_gen"
local H = require "helpers"
local SH = require "serve_helpers"

local TOOL = { name = "set_units", description = "Sets the units of the weather report.",
  parameters = { type = "object", properties = { unit = { type = "string", enum = { "celsius", "fahrenheit" } } },
    required = { "unit" }, additionalProperties = false } }
local INPUT, OUTPUT = "Which units?", '{"ok":true}'

-- The events of a Responses stream of one type, in order.
local function events_of(events, kind)
  local out = {}
  for _, e in ipairs(events) do
    if e.type == kind then out[#out + 1] = e end
  end
  return out
end

-- The concatenated field of a list of events.
local function joined(events, field)
  local parts = {}
  for i, e in ipairs(events) do parts[i] = e[field] end
  return table.concat(parts)
end

describe("gptoss serve under an agent's tool loop (a random-weight 7m server, the openai client)", function()
  if SH.why_not_client then return pending(SH.why_not_client) end
  local harmony = require "gptoss.harmony"
  local tok = require("gptoss").tokenizer()
  local s
  setup(function() s = SH.start { "7m", "--port", "0", "--slots", "2", "--ctx", "512" } end)
  teardown(function() SH.teardown_server(s) end)
  after_each(H.cleanup)

  -- The loop (agent_chat or agent_responses) against s, asserted to have had no error.
  local function loop(op, stream)
    local r = SH.client(s, "agent_" .. op, { model = "7m", input = INPUT, tool = TOOL, output = OUTPUT, stream = stream,
      sampling = { temperature = 0, max_reasoning_tokens = 8 }, limit = 4 })
    assert.is_nil(r.error, dkjson.encode(r.error))
    return r
  end
  local whole_chat -- the whole chat loop, run once: the answer every other form must give
  local function chat() whole_chat = whole_chat or loop("chat"); return whole_chat end

  -- The second turn's prompt length: the first turn's reasoning and call kept (the loop goes
  -- on) and the tool's output after them, as harmony renders the conversation.
  local function second_prompt(reasoning, arguments)
    return #harmony.render_ids({ harmony.system { reasoning = "medium" }, harmony.developer { tools = { TOOL } },
      harmony.user(INPUT), harmony.assistant(reasoning, { channel = "analysis" }),
      harmony.assistant(arguments, { channel = "commentary", recipient = "functions." .. TOOL.name,
        content_type = "<|constrain|>json" }),
      harmony.tool("functions." .. TOOL.name, OUTPUT, { channel = "commentary", recipient = "assistant" }) }, tok)
  end

  it("chat: answers the call as tool_calls, without content, its reasoning a string under both names", function()
    local c = chat().answer.choices[1]
    local m = c.message
    assert.are.same({ "tool_calls", "assistant", nil, 1 }, { c.finish_reason, m.role, m.content, #m.tool_calls })
    assert.is_true(type(m.reasoning) == "string" and #m.reasoning > 0, dkjson.encode(m))
    assert.are.equal(m.reasoning, m.reasoning_content)
    local call = m.tool_calls[1]
    assert.are.same({ "function", TOOL.name }, { call.type, call["function"].name })
    assert.truthy(call.id:find("^call_"), call.id)
    local why = G.why_no_ajv()
    if why then return pending(why) end
    assert.are.same({ true }, G.ajv { { schema = TOOL.parameters, outputs = { call["function"].arguments } } }[1])
  end)

  it("chat: takes the call back with its reasoning and no content, and the tool's answer by its id", function()
    local r = chat()
    local m = r.answer.choices[1].message
    assert.are.equal(second_prompt(m.reasoning, m.tool_calls[1]["function"].arguments), r.second.usage.prompt_tokens)
  end)

  it("chat streamed: a delta in every chunk, which put together as the SDK does are the whole answer", function()
    local whole, r = chat(), loop("chat", true)
    local m = whole.answer.choices[1].message
    local reasoning_chunks, ids, names = 0, 0, 0
    for _, chunk in ipairs(r.chunks) do
      local delta = chunk.choices[1] and chunk.choices[1].delta
      assert.is_table(delta, dkjson.encode(chunk)) -- no usage chunk was asked for
      if type(delta.reasoning) == "string" and #delta.reasoning > 0 then reasoning_chunks = reasoning_chunks + 1 end
      for _, d in ipairs(delta.tool_calls or {}) do
        ids = ids + (d.id and 1 or 0)
        names = names + (d["function"] and d["function"].name and 1 or 0)
      end
    end
    assert.is_true(reasoning_chunks > 0)
    assert.are.same({ 1, 1 }, { ids, names }) -- a client appends what each delta carries
    assert.are.equal("tool_calls", r.chunks[#r.chunks].choices[1].finish_reason)
    assert.are.same({ m.reasoning, m.tool_calls[1]["function"] }, { r.message.reasoning,
      r.message.tool_calls[1]["function"] })
    assert.are.equal(whole.second.usage.prompt_tokens, r.second.usage.prompt_tokens) -- the put-together id taken
  end)

  it("responses: a reasoning item of reasoning_text parts, then the function_call: chat's answer", function()
    local m, r = chat().answer.choices[1].message, loop("responses")
    local output = r.answer.output
    assert.are.same({ "completed", "reasoning", "function_call" }, { r.answer.status, output[1].type, output[2].type })
    assert.are.same({ { type = "reasoning_text", text = m.reasoning } }, output[1].content)
    local call = output[2]
    assert.are.same({ TOOL.name, m.tool_calls[1]["function"].arguments, "completed" },
      { call.name, call.arguments, call.status })
    assert.truthy(call.call_id:find("^call_"), call.call_id)
  end)

  it("responses: takes its output items back as they came and the call's output: the prompt chat's", function()
    local m, r = chat().answer.choices[1].message, loop("responses")
    assert.are.equal(second_prompt(m.reasoning, m.tool_calls[1]["function"].arguments), r.second.usage.input_tokens)
  end)

  it("responses streamed: reasoning_text deltas and done, the arguments' deltas, completed with the whole response",
    function()
      local m, r = chat().answer.choices[1].message, loop("responses", true)
      local deltas = events_of(r.events, "response.reasoning_text.delta")
      local done = events_of(r.events, "response.reasoning_text.done")
      assert.is_true(#deltas > 0)
      assert.are.same({ 1, m.reasoning, m.reasoning }, { #done, done[1] and done[1].text, joined(deltas, "delta") })
      local arguments = m.tool_calls[1]["function"].arguments
      assert.are.same({ arguments, arguments }, {
        joined(events_of(r.events, "response.function_call_arguments.delta"), "delta"),
        events_of(r.events, "response.function_call_arguments.done")[1].arguments })
      local output = r.answer.output -- response.completed's, which the SDK reads
      assert.are.same({ m.reasoning, arguments }, { output[1].content[1].text, output[2].arguments })
      assert.are.equal(second_prompt(m.reasoning, arguments), r.second.usage.input_tokens)
      -- every field the loop sent is one the server reads
      assert.is_nil(H.read_file(s.log):find("unknown field", 1, true))
    end)
end)
