--- gptoss.serve_openai (internal, gptoss.serve's): OpenAI's request bodies read into what
-- the engine runs. A body (decoded JSON) becomes a job: {kind = "chat" | "completion",
-- prompt = ids, limit = most ids a choice generates, n, sampling = r:sampling's options
-- (per choice: sampling_for), stop = strings or nil, stream, include_usage, logprobs = top
-- count or nil, tools = whether function tools were rendered, prefill = the prompt's last
-- ids, which open the reply, or nil, plan = the turn's plan (gptoss.serve_structured) when
-- it constrains the reply}. Anything wrong raises an
-- OpenAI error {status =, message =, type =, param =, code =} (serve_openai.fail) naming the
-- field; a field this server does not know is ignored (clients send their own: store,
-- metadata, ...) and named to the parser's on_unknown(name). docs/serve.md lists what is and
-- is not supported.
local cjson = require "cjson"
local harmony = require "gptoss.harmony"
local harmony_tools = require "gptoss.harmony_tools"
local json_order = require "gptoss.json_order"
local valid_utf8 = require("gptoss.harmony_parser").valid_utf8
local util = require "gptoss.util"

local serve_openai = {}

local MAX_N, MAX_STOPS, MAX_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS = 16, 64, 20, 5
-- OpenAI's reasoning efforts as harmony's: harmony has no "minimal" or "none", its least is
-- low ("none" also opens the final channel at once: gptoss.serve_structured), its most high
local EFFORTS = { none = "low", minimal = "low", low = "low", medium = "medium", high = "high", xhigh = "high" }

--- Raises an OpenAI error object; status 400 and type invalid_request_error by default.
-- What a request sent and the message quotes (a model name, a field's name) may be any
-- bytes: an answer is JSON, UTF-8, so an invalid byte is shown as U+FFFD.
function serve_openai.fail(message, param, status, type_, code)
  error({ status = status or 400, message = valid_utf8(message), param = param and valid_utf8(param),
    type = type_ or "invalid_request_error", code = code }, 0)
end
local fail = serve_openai.fail

local function is_null(v) return v == nil or v == cjson.null end

-- JSON's name for a decoded value's type, as messages say it.
local function json_type(v)
  if v == cjson.null then return "null" end
  if type(v) == "table" then return next(v) == nil and "array or object" or (#v > 0 and "array" or "object") end
  return type(v)
end

local function want(cond, param, what, v)
  if not cond then fail(("'%s' must be %s (got %s)"):format(param, what, json_type(v)), param) end
end

-- gptoss.serve_responses_input reads its fields with these too
serve_openai.want, serve_openai.is_null = want, is_null

local function boolean(body, param, default)
  local v = body[param]
  if is_null(v) then return default end
  want(type(v) == "boolean", param, "a boolean", v)
  return v
end

-- A number as JSON would spell it, NaN and the infinities as the JSON5 words a decoder
-- that takes them reads.
local function number_text(v)
  if v ~= v then return "NaN" end
  if v == math.huge or v == -math.huge then return v > 0 and "Infinity" or "-Infinity" end
  return tostring(v)
end

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

-- A number field in [lo, hi]; integer = true asks for an integer (JSON numbers decode as floats).
local function number(body, param, lo, hi, integer)
  local v = body[param]
  if is_null(v) then return nil end
  want(type(v) == "number", param, integer and "an integer" or "a number", v)
  if not finite(v) then fail(("'%s' must be a finite number (got %s)"):format(param, number_text(v)), param) end
  if integer then
    v = math.tointeger(v)
    if not v then fail(("'%s' must be an integer"):format(param), param) end
  end
  if v < lo or v > hi then
    fail(("'%s' must be in %s..%s (got %s)"):format(param, tostring(lo), tostring(hi), tostring(v)), param)
  end
  return v
end

-- Fields OpenAI's API has that this server cannot honour: ignoring them would answer
-- something else than was asked, so any value but null (or the default given) is a 400.
local UNSUPPORTED = {
  functions = { why = "the legacy function calling is not supported: send 'tools'" },
  function_call = { why = "the legacy function calling is not supported: send 'tool_choice'" },
  audio = { why = "audio output is not supported" },
  prediction = { why = "predicted outputs are not supported" },
  suffix = { why = "a suffix is not supported" },
  echo = { why = "echoing the prompt is not supported", default = false },
  best_of = { why = "best_of is not supported (n returns each choice)", default = 1 },
}

-- Each field of body (prefix: where it lies, "" at the top) that is neither known nor
-- refused above goes to on_unknown, and is otherwise ignored.
local function check_fields(body, known, on_unknown, prefix)
  for k, v in pairs(body) do
    local refused = UNSUPPORTED[k]
    if refused and prefix == "" and not is_null(v) and v ~= refused.default then
      fail(("'%s' is not supported by this server: %s"):format(k, refused.why), k)
    elseif not known[k] and not refused and on_unknown then
      on_unknown(prefix .. tostring(k))
    end
  end
end

local function set(list)
  local s = {}
  for _, k in ipairs(list) do s[k] = true end
  return s
end

local COMMON = { "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "logprobs",
  "logit_bias", "stream", "stream_options", "user", "frequency_penalty", "presence_penalty" }
local function fields(list)
  return set(table.move(list, 1, #list, #COMMON + 1, table.move(COMMON, 1, #COMMON, 1, {})))
end
local CHAT_FIELDS = fields { "messages", "reasoning_effort", "tools", "tool_choice", "max_completion_tokens",
  "top_logprobs", "parallel_tool_calls", "response_format", "max_reasoning_tokens" }
local COMPLETION_FIELDS = fields { "prompt" }

-- stop: a string or a list of at most MAX_STOPS non-empty strings; nil when absent.
local function stop_strings(body)
  local v = body.stop
  if is_null(v) then return nil end
  if type(v) == "string" then v = { v } end
  want(type(v) == "table" and #v > 0 and #v <= MAX_STOPS, "stop", ("a string or a list of 1..%d strings"):format(MAX_STOPS), v)
  for _, s in ipairs(v) do want(type(s) == "string" and s ~= "", "stop", "a list of non-empty strings", s) end
  return v
end

-- logit_bias: {"token id": bias in -100..100} as r:sampling's {[id] = bias}. A key is a
-- token id in decimal digits, as OpenAI's are (not "0x10", "1e2" or " 5 ", which Lua's
-- tonumber would read).
local function logit_bias(body, vocab)
  local v = body.logit_bias
  if is_null(v) then return nil end
  want(type(v) == "table", "logit_bias", "an object of token ids to biases", v)
  local bias, count = {}, 0
  for k, b in pairs(v) do
    local id = type(k) == "string" and k:find("^%d+$") and math.tointeger(tonumber(k))
    if not id or id >= vocab then
      fail(("'logit_bias' keys must be token ids 0..%d in decimal digits (got %s)"):format(vocab - 1, util.quoted(k)),
        "logit_bias")
    end
    if type(b) ~= "number" or not finite(b) or b < -100 or b > 100 then
      fail(("'logit_bias' values must be numbers in -100..100 (got %s for %s)"):format(
        type(b) == "number" and number_text(b) or json_type(b), k), "logit_bias")
    end
    bias[id], count = b, count + 1
  end
  return count > 0 and bias or nil
end

-- What chat and completions share: sampling (penalties too), n, stop, stream.
local function common(body, job, vocab, on_unknown)
  local stream = boolean(body, "stream", false)
  job.stream = stream
  local options = body.stream_options
  if not is_null(options) then
    want(type(options) == "table", "stream_options", "an object", options)
    if not stream then fail("'stream_options' is only allowed with 'stream': true", "stream_options") end
    check_fields(options, { include_usage = true }, on_unknown, "stream_options.")
    job.include_usage = boolean(options, "include_usage", false)
  end
  if not is_null(body.user) then want(type(body.user) == "string", "user", "a string", body.user) end
  job.n = number(body, "n", 1, MAX_N, true) or 1
  job.stop = stop_strings(body)
  local top_k = number(body, "top_k", -1, math.maxinteger, true) or 0
  job.sampling = {
    temperature = number(body, "temperature", 0, 2) or 1,
    top_p = number(body, "top_p", 0, 1) or 1,
    top_k = top_k > 0 and top_k or nil, -- 0 and vLLM's -1: no filter
    min_p = number(body, "min_p", 0, 1),
    logit_bias = logit_bias(body, vocab),
    presence_penalty = number(body, "presence_penalty", -2, 2),
    frequency_penalty = number(body, "frequency_penalty", -2, 2),
  }
  for _, name in ipairs { "min_p", "presence_penalty", "frequency_penalty" } do -- 0: none, as left out
    if job.sampling[name] == 0 then job.sampling[name] = nil end
  end
  if job.sampling.top_p == 0 then fail("'top_p' must be above 0", "top_p") end
  job.seed = number(body, "seed", math.mininteger, math.maxinteger, true)
end

--- Request i's sampling (1-based choice): the job's, seeded seed + i - 1 (a random seed
-- when the request gave none), with logprobs when asked.
function serve_openai.sampling_for(job, i)
  local s = {}
  for k, v in pairs(job.sampling) do s[k] = v end
  s.seed, s.logprobs = job.seed + i - 1, job.logprobs
  return s
end

-- A message's text: a string, or a list of {type = "text", text =} parts.
local function text_of(content, param)
  if type(content) == "string" then return content end
  want(type(content) == "table" and #content > 0, param, "a string or a list of text parts", content)
  local parts = {}
  for i, p in ipairs(content) do
    if type(p) ~= "table" or p.type ~= "text" or type(p.text) ~= "string" then
      fail(("'%s[%d]' must be a text part {\"type\": \"text\", \"text\": ...}: only text is supported"):format(param,
        i - 1), param)
    end
    parts[#parts + 1] = p.text
  end
  return table.concat(parts)
end

-- Function tools [{type = "function", function = {name, description, parameters, strict}}]
-- as harmony's developer tools: description a string and parameters a JSON schema object,
-- when given, its properties declared in the body's order (gptoss.json_order's), as OpenAI's
-- prompts show them; schema (the decoded parameters) and strict (a boolean) are for
-- gptoss.serve_structured.
local function function_tools(tools)
  want(type(tools) == "table" and #tools > 0, "tools", "a non-empty list of tools", tools)
  local out = {}
  for i, t in ipairs(tools) do
    local f = type(t) == "table" and t["function"]
    if type(t) ~= "table" or t.type ~= "function" or type(f) ~= "table" or type(f.name) ~= "string"
        or not f.name:find("^[%w_%-]+$") then
      fail(("'tools[%d]' must be {\"type\": \"function\", \"function\": {\"name\": letters, digits, _ or -, ...}}")
        :format(i - 1), "tools")
    end
    local description, parameters = f.description, f.parameters
    if not (is_null(description) or type(description) == "string") then
      fail(("'tools[%d].function.description' must be a string (got %s)"):format(i - 1, json_type(description)), "tools")
    end
    if not (is_null(parameters) or type(parameters) == "table" and #parameters == 0) then
      fail(("'tools[%d].function.parameters' must be a JSON schema object (got %s)"):format(i - 1,
        json_type(parameters)), "tools")
    end
    want(is_null(f.strict) or type(f.strict) == "boolean", ("tools[%d].function.strict"):format(i - 1), "a boolean",
      f.strict)
    parameters = not is_null(parameters) and parameters or nil
    out[i] = { name = f.name, description = not is_null(description) and description or nil,
      parameters = parameters and harmony_tools.ordered(parameters, json_order.keys), schema = parameters,
      strict = f.strict == true }
  end
  return out
end

-- The assistant message's harmony messages: its reasoning (analysis, unless dropped),
-- its text (final) and its tool calls (commentary to functions.NAME, JSON arguments);
-- `names` learns each call's id -> function name for the tool messages after it.
local function assistant_messages(m, param, out, names, drop_reasoning)
  local reasoning = m.reasoning_content -- vLLM's name; its newer one, reasoning, as well
  if is_null(reasoning) then reasoning = m.reasoning end
  want(is_null(reasoning) or type(reasoning) == "string", param .. ".reasoning_content", "a string", reasoning)
  if not drop_reasoning and not is_null(reasoning) and reasoning ~= "" then
    out[#out + 1] = harmony.assistant(reasoning, { channel = "analysis" })
  end
  if not is_null(m.content) and m.content ~= "" then
    out[#out + 1] = harmony.assistant(text_of(m.content, param .. ".content"), { channel = "final" })
  end
  if not is_null(m.tool_calls) then
    want(type(m.tool_calls) == "table", param .. ".tool_calls", "a list", m.tool_calls)
    for j, call in ipairs(m.tool_calls) do
      local f = type(call) == "table" and call["function"]
      if type(f) ~= "table" or type(f.name) ~= "string" or type(f.arguments) ~= "string" then
        fail(("'%s.tool_calls[%d]' must be {\"function\": {\"name\": ..., \"arguments\": ...}}"):format(param, j - 1),
          "messages")
      end
      if type(call.id) == "string" then names[call.id] = f.name end
      out[#out + 1] = harmony.assistant(f.arguments, { channel = "commentary", recipient = "functions." .. f.name,
        content_type = "<|constrain|>json" })
    end
  end
end

-- The conversation of a chat body: system (reasoning effort), developer (the system
-- messages' text, the tools and the response format's section), then the messages.
local function conversation(body, effort, tools, response_formats)
  local messages = body.messages
  want(type(messages) == "table" and #messages > 0, "messages", "a non-empty list of messages", messages)
  -- As harmony asks, the reasoning of the turns that ended in a final answer is left out;
  -- that of a turn still calling tools (no answer after it yet) is kept.
  local last_answer = 0
  for i, m in ipairs(messages) do
    if type(m) == "table" and m.role == "assistant" and not is_null(m.content) and m.content ~= "" then
      last_answer = i
    end
  end
  local instructions, turns, names = {}, {}, {}
  for i, m in ipairs(messages) do
    local param = ("messages[%d]"):format(i - 1)
    want(type(m) == "table", param, "an object", m)
    if m.role == "system" or m.role == "developer" then
      instructions[#instructions + 1] = text_of(m.content, param .. ".content")
    elseif m.role == "user" then
      turns[#turns + 1] = harmony.user(text_of(m.content, param .. ".content"))
    elseif m.role == "assistant" then
      assistant_messages(m, param, turns, names, i <= last_answer)
    elseif m.role == "tool" then
      local name = names[m.tool_call_id] or m.name
      if type(name) ~= "string" then
        fail(("'%s.tool_call_id' names no tool call of an earlier assistant message"):format(param), "messages")
      end
      turns[#turns + 1] = harmony.tool("functions." .. name, text_of(m.content, param .. ".content"),
        { channel = "commentary", recipient = "assistant" })
    else
      fail(("'%s.role' must be system, developer, user, assistant or tool (got %s)"):format(param,
        util.quoted(m.role)), "messages")
    end
  end
  local out = { harmony.system { reasoning = effort } }
  if #instructions > 0 or tools or response_formats then
    out[2] = harmony.developer { instructions = #instructions > 0 and table.concat(instructions, "\n\n") or nil,
      tools = tools, response_formats = response_formats }
  end
  return table.move(turns, 1, #turns, #out + 1, out)
end

-- Refuses a prompt of `bytes` bytes of text before it is tokenized when it cannot fit the
-- context with room to generate: a token stands for at most the vocabulary's longest entry
-- (max_token_length bytes), so such a prompt is more than ctx - 1 tokens. Tokenizing
-- megabytes only to refuse them would hold up every other request.
local function check_prompt_bytes(bytes, tokenizer, ctx, param)
  local most = (ctx - 1) * tokenizer.max_token_length
  if bytes > most then
    fail(("the prompt is %d bytes of text, more than the %d tokens this server's context of %d leaves for a prompt "
      .. "can hold (%d bytes at the most, %d a token)"):format(bytes, ctx - 1, ctx, most, tokenizer.max_token_length),
      param, 400, nil, "context_length_exceeded")
  end
end

-- The job's limit from the body's max tokens (param), checked against the context left
-- after the prompt.
local function limit_of(body, params, job, ctx)
  local room = ctx - #job.prompt
  if room < 1 then
    fail(("the prompt is %d tokens; this server's context is %d, which leaves no room to generate"):format(#job.prompt,
      ctx), params[1] == "max_tokens" and "prompt" or "messages", 400, nil, "context_length_exceeded")
  end
  for _, p in ipairs(params) do
    local v = number(body, p, 1, math.maxinteger, true)
    if v then
      if v > room then
        fail(("'%s' is %d, but the prompt's %d tokens leave %d of this server's context of %d"):format(p, v,
          #job.prompt, room, ctx), p, 400, nil, "context_length_exceeded")
      end
      return v
    end
  end
  return room
end

-- A job of kind from body, its fields checked against known and the common ones read.
local function new_job(kind, body, known, tokenizer, on_unknown)
  check_fields(body, known, on_unknown, "")
  local job = { kind = kind }
  common(body, job, tokenizer.vocab_size, on_unknown)
  return job
end

--- The job of a POST /v1/chat/completions body; on_unknown(name), when given, hears of
-- each field ignored as unknown.
function serve_openai.chat(body, tokenizer, ctx, on_unknown)
  local job = new_job("chat", body, CHAT_FIELDS, tokenizer, on_unknown)
  local effort = EFFORTS[is_null(body.reasoning_effort) and "medium" or body.reasoning_effort]
  if not effort then
    fail(("'reasoning_effort' must be none, minimal, low, medium, high or xhigh (got %s)"):format(
      util.quoted(body.reasoning_effort)), "reasoning_effort")
  end
  boolean(body, "parallel_tool_calls", true) -- gpt-oss calls one tool a turn whatever it says
  local tools = not is_null(body.tools) and function_tools(body.tools) or nil
  -- required here, not above: gptoss.serve_structured requires this module
  local plan = require("gptoss.serve_structured").plan(body, tools, tokenizer)
  if body.tool_choice == "none" then tools = nil end
  job.tools = tools ~= nil
  job.prefill, job.plan = plan and plan.prefill, plan and plan.constrains and plan or nil
  local ok, ids = pcall(function()
    local turns = conversation(body, effort, tools, plan and plan.developer_section)
    check_prompt_bytes(#harmony.render(turns), tokenizer, ctx, "messages")
    local rendered = harmony.render_ids(turns, tokenizer)
    local prefill = job.prefill or {}
    return table.move(prefill, 1, #prefill, #rendered + 1, rendered)
  end)
  if not ok then
    if type(ids) == "table" then error(ids, 0) end
    fail("the conversation cannot be rendered: " .. util.bare(ids), tools and "tools" or "messages")
  end
  job.prompt = ids
  if boolean(body, "logprobs", false) then
    job.logprobs = number(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, true) or 0
  elseif not is_null(body.top_logprobs) then
    fail("'top_logprobs' needs 'logprobs': true", "top_logprobs")
  end
  job.limit = limit_of(body, { "max_completion_tokens", "max_tokens" }, job, ctx)
  return job
end

--- The job of a POST /v1/completions body: prompt a string or a list of token ids;
-- on_unknown as chat's.
function serve_openai.completion(body, tokenizer, ctx, on_unknown)
  local job = new_job("completion", body, COMPLETION_FIELDS, tokenizer, on_unknown)
  local prompt = body.prompt
  if type(prompt) == "string" then
    check_prompt_bytes(#prompt, tokenizer, ctx, "prompt")
    job.prompt = tokenizer:encode(prompt)
  else
    want(type(prompt) == "table" and #prompt > 0, "prompt", "a string or a non-empty list of token ids", prompt)
    local ids, vocab, tointeger = {}, tokenizer.vocab_size, math.tointeger -- read once, not once an id
    for i, id in ipairs(prompt) do
      local v = type(id) == "number" and tointeger(id)
      if not v or v < 0 or v >= vocab then
        fail(("'prompt[%d]' must be a token id 0..%d"):format(i - 1, vocab - 1), "prompt")
      end
      ids[i] = v
    end
    job.prompt = ids
  end
  if #job.prompt == 0 then fail("'prompt' encodes to no tokens", "prompt") end
  job.logprobs = number(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS, true)
  job.limit = limit_of(body, { "max_tokens" }, job, ctx)
  if is_null(body.max_tokens) then job.limit = math.min(job.limit, 16) end -- OpenAI's default for completions
  return job
end

--- The model a body names: a string, the served model's name (404 otherwise).
function serve_openai.check_model(body, served)
  want(type(body) == "table" and #body == 0, "body", "a JSON object", body)
  local model = body.model
  if type(model) ~= "string" then fail(("'model' must be a string (got %s)"):format(json_type(model)), "model") end
  if model ~= served then
    fail(("The model '%s' does not exist; this server serves '%s'"):format(model, served), "model", 404, nil,
      "model_not_found")
  end
end

-- gptoss.serve_responses_input checks its own fields with these
serve_openai.want, serve_openai.is_null = want, is_null

return serve_openai
