--- gptoss.serve_responses_input (internal, gptoss.serve's): a POST /v1/responses body read
-- into a job (docs/serve.md#the-responses-api). The body's conversation (the items of the
-- previous responses, then its input) becomes a chat completions body, which
-- serve_openai.chat checks, renders as harmony and reads into the job, so that both APIs
-- render and sample one way: items map onto chat messages (reasoning onto an assistant's
-- reasoning_content, function_call onto its tool_calls, function_call_output onto a tool
-- message) and the chat errors name the Responses fields. What the Responses API has and chat
-- has not (store, previous_response_id, metadata, instructions) is read here.
local serve_http = require "gptoss.serve_http"
local serve_openai = require "gptoss.serve_openai"
local serve_structured = require "gptoss.serve_structured"
local util = require "gptoss.util"

local serve_responses_input = {}

local fail, want, is_null = serve_openai.fail, serve_openai.want, serve_openai.is_null

local MAX_METADATA, MAX_KEY, MAX_VALUE = 16, 64, 512

-- Fields read here or passed on to chat; any other is ignored (as chat ignores its unknown
-- ones) and named to on_unknown. Those of UNSUPPORTED are refused unless null or their default.
local KNOWN = {}
for _, k in ipairs { "model", "input", "instructions", "tools", "tool_choice", "reasoning", "max_output_tokens",
  "temperature", "top_p", "store", "previous_response_id", "metadata", "stream", "stream_options", "user",
  "parallel_tool_calls", "text", "include", "service_tier", "prompt_cache_key", "safety_identifier",
  "prompt_cache_retention", "max_reasoning_tokens" } do
  KNOWN[k] = true
end
local UNSUPPORTED = {
  background = { why = "background responses are not supported", default = false },
  conversation = { why = "conversations are not supported: chain responses with 'previous_response_id'" },
  prompt = { why = "prompt templates are not supported" },
  truncation = { why = "truncation is not supported: a conversation past the context is refused",
    default = "disabled" },
  top_logprobs = { why = "logprobs are not supported on this endpoint", default = 0 },
  max_tool_calls = { why = "a bound on tool calls is not supported (the model makes one call a response)" },
  context_management = { why = "context management is not supported" },
}

-- The chat field a Responses field is passed on as, for naming it in chat's errors.
local AS_CHAT = { max_output_tokens = "max_completion_tokens", ["reasoning.effort"] = "reasoning_effort",
  input = "messages", ["text.format"] = "response_format" }

-- The text of content (a string or a list of text parts of the given types), param naming it.
local function text_of(content, param, types)
  if type(content) == "string" then return content end
  want(type(content) == "table", param, "a string or a list of text parts", content)
  local parts = {}
  for i, p in ipairs(content) do
    if type(p) ~= "table" or not types[p.type] or type(p.text) ~= "string" then
      fail(("'%s[%d]' must be a text part (%s): only text is supported"):format(param, i - 1,
        table.concat(types.names, ", ")), param)
    end
    parts[#parts + 1] = p.text
  end
  return table.concat(parts)
end
local MESSAGE_PARTS = { input_text = true, output_text = true, names = { "input_text", "output_text" } }
local REASONING_PARTS = { reasoning_text = true, summary_text = true, names = { "reasoning_text", "summary_text" } }
local OUTPUT_PARTS = { input_text = true, names = { "input_text" } }

local function string_field(item, field, param)
  local v = item[field]
  want(type(v) == "string", param .. "." .. field, "a string", v)
  return v
end

-- The chat messages of a conversation's items (a list of Responses input items); calls
-- learns each function call's call_id. The model's side of a turn (reasoning, a message,
-- function calls, in that order) becomes one assistant message, as chat's would have been.
local function chat_messages(items, out, calls)
  local turn -- the assistant message being filled, and what it holds
  local function assistant(field)
    if not turn or (field ~= "tool_calls" and (turn.content or turn.tool_calls or field == "reasoning_content")) then
      turn = { role = "assistant" }
      out[#out + 1] = turn
    end
    return turn
  end
  for i, item in ipairs(items) do
    local param = ("input[%d]"):format(i - 1)
    want(type(item) == "table", param, "an item object", item)
    local kind = item.type
    if is_null(kind) and item.role ~= nil then kind = "message" end
    if kind == "message" then
      local role = item.role
      if role ~= "user" and role ~= "system" and role ~= "developer" and role ~= "assistant" then
        fail(("'%s.role' must be user, system, developer or assistant (got %s)"):format(param, util.quoted(role)),
          param .. ".role")
      end
      local text = text_of(item.content, param .. ".content", MESSAGE_PARTS)
      if role == "assistant" then
        assistant("content").content = text
      else
        turn = nil
        out[#out + 1] = { role = role == "user" and "user" or "system", content = text }
      end
    elseif kind == "reasoning" then
      local content = not is_null(item.content) and item.content or item.summary
      local text = is_null(content) and "" or text_of(content, param .. ".content", REASONING_PARTS)
      if text ~= "" then assistant("reasoning_content").reasoning_content = text end
    elseif kind == "function_call" then
      local call_id, name = string_field(item, "call_id", param), string_field(item, "name", param)
      local message = assistant("tool_calls")
      message.tool_calls = message.tool_calls or {}
      table.insert(message.tool_calls, { id = call_id, type = "function",
        ["function"] = { name = name, arguments = string_field(item, "arguments", param) } })
      calls[call_id] = name
    elseif kind == "function_call_output" then
      local call_id = string_field(item, "call_id", param)
      if not calls[call_id] then
        fail(("'%s.call_id' %s names no function_call before it"):format(param, util.quoted(call_id)),
          param .. ".call_id")
      end
      turn = nil
      out[#out + 1] = { role = "tool", tool_call_id = call_id,
        content = text_of(item.output, param .. ".output", OUTPUT_PARTS) }
    else
      fail(("'%s.type' must be message, reasoning, function_call or function_call_output (got %s)"):format(param,
        util.quoted(kind)), param .. ".type")
    end
  end
end

-- The body's items: input as a string (one user message) or a list.
local function input_items(body)
  local input = body.input
  if type(input) == "string" then return { { type = "message", role = "user", content = input } } end
  want(type(input) == "table", "input", "a string or a list of items", input)
  return input
end

-- Function tools in the Responses shape ({type, name, description, parameters, strict})
-- as chat's ({type, function = {...}}), and as the response echoes them.
local function function_tools(tools)
  want(type(tools) == "table", "tools", "a list of tools", tools)
  local chat, echoed = {}, {}
  for i, t in ipairs(tools) do
    local param = ("tools[%d]"):format(i - 1)
    if type(t) ~= "table" or t.type ~= "function" then
      fail(("'%s' must be a function tool {\"type\": \"function\", \"name\": ...}: only function tools are "
        .. "supported (got type %s)"):format(param, util.quoted(type(t) == "table" and t.type or t)), param)
    end
    local name = string_field(t, "name", param)
    if not name:find("^[%w_%-]+$") then
      fail(("'%s.name' must be letters, digits, _ or - (got %s)"):format(param, util.quoted(name)), param .. ".name")
    end
    local description = not is_null(t.description) and t.description or nil
    local parameters = not is_null(t.parameters) and t.parameters or nil
    chat[i] = { type = "function", ["function"] = { name = name, description = description, parameters = parameters,
      strict = t.strict } }
    echoed[i] = { type = "function", name = name, description = description or serve_http.null,
      parameters = parameters and serve_structured.schema(parameters) or serve_http.null, strict = t.strict == true }
  end
  return chat, echoed
end

-- tool_choice: "auto", "none", "required" or a named function {type = "function", name =},
-- as echoed, and in chat's shape.
local function tool_choice(v)
  if is_null(v) or v == "auto" or v == "none" or v == "required" then
    v = is_null(v) and "auto" or v
    return v, v
  end
  if type(v) ~= "table" or v.type ~= "function" or type(v.name) ~= "string" then
    fail("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}: only "
      .. "function tools are supported", "tool_choice")
  end
  return { type = "function", name = v.name }, { type = "function", ["function"] = { name = v.name } }
end

-- text.format: {type = "text"}, {type = "json_object"} or {type = "json_schema", name =,
-- schema =, description =, strict =}, as echoed, and as chat's response_format.
local function text_format(format)
  if is_null(format) then format = { type = "text" } end
  want(type(format) == "table", "text.format", "an object", format)
  if format.type ~= "json_schema" then return { type = format.type }, { type = format.type } end
  local echoed = { type = "json_schema", name = format.name, schema = serve_structured.schema(format.schema),
    description = format.description, strict = format.strict }
  return echoed, { type = "json_schema", json_schema = { name = format.name, schema = format.schema,
    description = format.description, strict = format.strict } }
end

-- metadata: at most 16 string keys (64 characters each) to strings (512 each).
local function metadata(v)
  if is_null(v) then return nil end
  want(type(v) == "table", "metadata", "an object of strings", v)
  local n = 0
  for k, s in pairs(v) do
    n = n + 1
    if type(k) ~= "string" or #k > MAX_KEY or type(s) ~= "string" or #s > MAX_VALUE or n > MAX_METADATA then
      fail(("'metadata' must have at most %d keys of at most %d characters, each a string of at most %d"):format(
        MAX_METADATA, MAX_KEY, MAX_VALUE), "metadata")
    end
  end
  return next(v) and v or nil -- none: the response's {}
end

-- The settings a response echoes that chat does not check: reasoning, text, the booleans.
local function settings(body, on_unknown)
  for k, v in pairs(body) do
    local refused = UNSUPPORTED[k]
    if refused and not is_null(v) and v ~= refused.default then
      fail(("'%s' is not supported by this server: %s"):format(k, refused.why), k)
    elseif not KNOWN[k] and not refused and on_unknown then
      on_unknown(tostring(k))
    end
  end
  local reasoning = body.reasoning
  if is_null(reasoning) then reasoning = {} end
  want(type(reasoning) == "table", "reasoning", "an object", reasoning)
  local text = body.text
  if is_null(text) then text = {} end
  want(type(text) == "table", "text", "an object", text)
  local format, response_format = text_format(text.format)
  for _, k in ipairs { "store", "parallel_tool_calls" } do
    if not is_null(body[k]) then want(type(body[k]) == "boolean", k, "a boolean", body[k]) end
  end
  local previous = body.previous_response_id
  if not is_null(previous) then want(type(previous) == "string", "previous_response_id", "a string", previous) end
  local instructions = body.instructions
  if not is_null(instructions) then want(type(instructions) == "string", "instructions", "a string", instructions) end
  local choice, chat_choice = tool_choice(body.tool_choice)
  return { store = body.store ~= false, parallel_tool_calls = body.parallel_tool_calls ~= false,
    previous_response_id = not is_null(previous) and previous or nil,
    instructions = not is_null(instructions) and instructions or nil, metadata = metadata(body.metadata),
    effort = not is_null(reasoning.effort) and reasoning.effort or "medium",
    summary = not is_null(reasoning.summary) and reasoning.summary or nil, tool_choice = choice,
    chat_tool_choice = chat_choice, format = format, response_format = response_format }
end

-- Chat's error, raised again naming the Responses fields.
local function as_responses_error(err)
  if type(err) ~= "table" then error(err, 0) end
  for responses, chat in pairs(AS_CHAT) do
    if err.param == chat then err.param = responses end
    err.message = err.message:gsub("'" .. chat .. "'", "'" .. responses .. "'")
  end
  err.message = err.message:gsub("'(tools%[%d+%])%.function%.", "'%1."):gsub("response_format%.json_schema",
    "text.format")
  error(err, 0)
end

--- The job of a POST /v1/responses body: serve_openai.chat's (kind "chat", one choice), with
-- job.settings (what the response echoes) and job.items (the body's input items).
-- previous(id) gives the items of a stored response's whole conversation, or raises the 404;
-- on_unknown(name) hears of each field ignored as unknown.
function serve_responses_input.job(body, tokenizer, ctx, previous, on_unknown)
  local s = settings(body, on_unknown)
  local earlier = s.previous_response_id and previous(s.previous_response_id) or {}
  local items = input_items(body)
  local messages, calls = {}, {}
  if s.instructions then messages[1] = { role = "system", content = s.instructions } end
  chat_messages(earlier, messages, calls)
  chat_messages(items, messages, calls)
  if #messages == 0 then fail("'input' must not be empty", "input") end
  local chat_tools, echoed_tools
  if not is_null(body.tools) then chat_tools, echoed_tools = function_tools(body.tools) end
  local ok, job = pcall(serve_openai.chat, { messages = messages, tools = chat_tools and #chat_tools > 0 and chat_tools
    or nil, tool_choice = s.chat_tool_choice, response_format = s.response_format, reasoning_effort = s.effort,
    max_reasoning_tokens = body.max_reasoning_tokens, max_completion_tokens = body.max_output_tokens,
    temperature = body.temperature, top_p = body.top_p, stream = body.stream, user = body.user }, tokenizer, ctx)
  if not ok then as_responses_error(job) end
  s.tools = echoed_tools or {}
  s.max_output_tokens = math.tointeger(body.max_output_tokens) -- chat checked it is an integer
  s.temperature, s.top_p, s.user = job.sampling.temperature, job.sampling.top_p, body.user
  job.settings, job.items = s, items
  return job
end

return serve_responses_input
