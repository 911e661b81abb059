--- gptoss.harmony: OpenAI's harmony chat format, the one gpt-oss is trained on
-- (docs/harmony.md): conversations rendered to text or token ids, and a streaming parser
-- of the ids a model samples. Pure Lua; the tokenizer is only needed for ids. This file
-- has the message builders and the rendering; its pieces are harmony_special.lua (the
-- special ids), harmony_tools.lua (the "# Tools" sections: parameter schemas as
-- TypeScript-like declarations) and harmony_parser.lua (the streaming parser).
local harmony_parser = require "gptoss.harmony_parser"
local harmony_special = require "gptoss.harmony_special"
local harmony_tools = require "gptoss.harmony_tools"
local util = require "gptoss.util"

local harmony = {}

--- The special ids of o200k_harmony that the format uses.
harmony.special = harmony_special.special

--- The ids that end sampling: <|return|> (answer done), <|call|> (a tool call), <|endoftext|>.
harmony.stop_ids = harmony_special.stop_ids

local ROLES = { "system", "developer", "user", "assistant", "tool" }
local MESSAGE_FIELDS = { "role", "content", "name", "channel", "recipient", "content_type" }
local SYSTEM_FIELDS = { "identity", "knowledge_cutoff", "date", "reasoning", "tools", "channels" }
local DEVELOPER_FIELDS = { "instructions", "tools", "response_formats" }
local REASONING = { "low", "medium", "high" }

-- System content defaults, as harmony's: a field set to false is left out.
local SYSTEM_DEFAULTS = {
  identity = "You are ChatGPT, a large language model trained by OpenAI.",
  knowledge_cutoff = "2024-06",
  reasoning = "medium",
  channels = { "analysis", "commentary", "final" },
}

local quoted = util.quoted

---------------------------------------------------------------------------------------------
-- Message builders

--- A system message: harmony.system{identity=, knowledge_cutoff=, date=, reasoning=,
-- tools = {namespace, ...}, channels = {...}}; see docs/harmony.md#system-content.
function harmony.system(content)
  content = util.options("harmony.system", content, SYSTEM_FIELDS, 2)
  return { role = "system", content = content }
end

--- A developer message: harmony.developer{instructions=, tools = {function tool, ...},
-- response_formats = the "# Response Formats" section's text (gptoss.constraint)}.
function harmony.developer(content)
  content = util.options("harmony.developer", content, DEVELOPER_FIELDS, 2)
  return { role = "developer", content = content }
end

-- A message of `role` with text and optional header fields.
local function text_message(fn, role, text, fields, name)
  if type(text) ~= "string" then
    error(("%s: text must be a string (got %s)"):format(fn, type(text)), 3)
  end
  fields = util.options(fn, fields, { "channel", "recipient", "content_type", "name" }, 3)
  local m = { role = role, content = text, name = name or fields.name }
  m.channel, m.recipient, m.content_type = fields.channel, fields.recipient, fields.content_type
  return m
end

--- harmony.user(text [, {name=}])
function harmony.user(text, fields) return text_message("harmony.user", "user", text, fields) end

--- harmony.assistant(text [, {channel=, recipient=, content_type=}]): a recipient makes it a
-- tool call, rendered ending in <|call|>.
function harmony.assistant(text, fields)
  return text_message("harmony.assistant", "assistant", text, fields)
end

--- harmony.tool(name, text [, {channel=, recipient=}]): a tool's answer, its author the
-- tool's name ("functions.get_weather").
function harmony.tool(name, text, fields)
  if type(name) ~= "string" or name == "" then
    error(("harmony.tool: name must be a non-empty string (got %s)"):format(quoted(name)), 2)
  end
  return text_message("harmony.tool", "tool", text, fields, name)
end

---------------------------------------------------------------------------------------------
-- Rendering

-- A rendered conversation is a list of pieces: text strings and these special markers.
local function marker(name) return { name = name, text = ("<|%s|>"):format(name) } end
local START, END, CALL, MESSAGE, CHANNEL, CONSTRAIN =
  marker("start"), marker("end"), marker("call"), marker("message"), marker("channel"), marker("constrain")

local function system_text(c, where, has_functions)
  local function field(k)
    if c[k] == nil then return SYSTEM_DEFAULTS[k] end
    return c[k] or nil
  end
  local sections, top = {}, {}
  top[#top + 1] = field("identity")
  if field("knowledge_cutoff") then top[#top + 1] = "Knowledge cutoff: " .. field("knowledge_cutoff") end
  if field("date") then top[#top + 1] = "Current date: " .. field("date") end
  if #top > 0 then sections[#sections + 1] = table.concat(top, "\n") end
  local reasoning = field("reasoning")
  if reasoning then
    if not util.listed(REASONING, reasoning) then
      error(("%s: reasoning must be low, medium or high (got %s)"):format(where, quoted(reasoning)), 0)
    end
    sections[#sections + 1] = "Reasoning: " .. reasoning
  end
  if c.tools and #c.tools > 0 then
    -- harmony keeps namespaces in a name-sorted map
    local namespaces = table.move(c.tools, 1, #c.tools, 1, {})
    for i, ns in ipairs(namespaces) do
      if type(ns) ~= "table" or type(ns.name) ~= "string" then
        error(("%s: tools[%d] must be a namespace {name=, description=, tools=}"):format(where, i), 0)
      end
    end
    table.sort(namespaces, function(a, b) return a.name < b.name end)
    sections[#sections + 1] = harmony_tools.section(namespaces, where)
  end
  local channels = field("channels")
  if channels and #channels > 0 then
    local header = ("# Valid channels: %s. Channel must be included for every message.")
      :format(table.concat(channels, ", "))
    if has_functions then
      header = header .. "\nCalls to these tools must go to the commentary channel: 'functions'."
    end
    sections[#sections + 1] = header
  end
  return table.concat(sections, "\n\n")
end

local function developer_text(c, where)
  local sections = {}
  if c.instructions then
    sections[#sections + 1] = "# Instructions"
    sections[#sections + 1] = c.instructions
  end
  if c.tools and #c.tools > 0 then
    sections[#sections + 1] = harmony_tools.section({ { name = "functions", tools = c.tools } }, where)
  end
  -- the "# Response Formats" section as gptoss.constraint writes it
  if c.response_formats then sections[#sections + 1] = c.response_formats end
  return table.concat(sections, "\n\n")
end

local function check_string(where, field, v)
  if v ~= nil and (type(v) ~= "string" or v == "") then
    error(("%s: %s must be a non-empty string (got %s)"):format(where, field, quoted(v)), 0)
  end
end

local function check_message(m, where)
  if type(m) ~= "table" then error(("%s: must be a table (got %s)"):format(where, type(m)), 0) end
  util.check_known(where, m, MESSAGE_FIELDS, "field", 0)
  if not util.listed(ROLES, m.role) then
    error(("%s: role must be one of %s (got %s)"):format(where, table.concat(ROLES, ", "), quoted(m.role)), 0)
  end
  for _, k in ipairs({ "name", "channel", "recipient", "content_type" }) do check_string(where, k, m[k]) end
  if m.role == "tool" and not m.name then error(where .. ": a tool message needs the tool's name", 0) end
  local c = m.content
  if type(c) == "table" then
    if m.role == "system" then
      util.check_known(where .. ": system content", c, SYSTEM_FIELDS, "field", 0)
    elseif m.role == "developer" then
      util.check_known(where .. ": developer content", c, DEVELOPER_FIELDS, "field", 0)
    else
      error(("%s: content of a %s message must be a string (got table)"):format(where, m.role), 0)
    end
  elseif type(c) ~= "string" then
    error(("%s: content must be a string%s (got %s)"):format(where,
      (m.role == "system" or m.role == "developer") and " or a table" or "", type(c)), 0)
  end
end

local function render_message(out, m, where, has_functions)
  out[#out + 1] = START
  out[#out + 1] = m.role == "tool" and m.name or (m.name and m.role .. ":" .. m.name or m.role)
  if m.recipient then out[#out + 1] = " to=" .. m.recipient end
  if m.channel then
    out[#out + 1] = CHANNEL
    out[#out + 1] = m.channel
  end
  if m.content_type then
    -- "<|constrain|>json" spells the special token, the rest is text
    local rest = m.content_type:match("^<|constrain|>(.*)$")
    if rest then
      out[#out + 1] = " "
      out[#out + 1] = CONSTRAIN
      out[#out + 1] = rest
    else
      out[#out + 1] = " " .. m.content_type
    end
  end
  out[#out + 1] = MESSAGE
  local c = m.content
  if type(c) == "string" then
    out[#out + 1] = c
  elseif m.role == "system" then
    out[#out + 1] = system_text(c, where, has_functions)
  else
    out[#out + 1] = developer_text(c, where)
  end
  out[#out + 1] = (m.role == "assistant" and m.recipient) and CALL or END
end

local RENDER_OPTIONS = { "completion", "drop_analysis" }

-- The pieces of a conversation (see marker); fn names the caller in errors.
local function pieces(fn, conversation, opts)
  if type(conversation) ~= "table" then
    error(("%s: conversation must be a list of messages (got %s)"):format(fn, type(conversation)), 3)
  end
  opts = util.options(fn, opts, RENDER_OPTIONS, 3)
  local has_functions, last_assistant, first_final = false, nil, nil
  for i, m in ipairs(conversation) do
    check_message(m, ("%s: message %d"):format(fn, i))
    if m.role == "developer" and type(m.content) == "table" and m.content.tools and #m.content.tools > 0 then
      has_functions = true
    end
    if m.role == "assistant" then last_assistant = m end
    if m.channel == "final" and not first_final then first_final = i end
  end
  -- As harmony does: once the last assistant message is a final answer, the analysis
  -- messages before the first final answer are dropped (the model never saw them again).
  local drop = opts.drop_analysis ~= false and last_assistant and last_assistant.channel == "final"
  local out = {}
  for i, m in ipairs(conversation) do
    if not (drop and i < first_final and m.channel == "analysis") then
      render_message(out, m, ("%s: message %d"):format(fn, i), has_functions)
    end
  end
  if opts.completion ~= false then
    out[#out + 1] = START
    out[#out + 1] = "assistant"
  end
  return out
end

--- The conversation as harmony text, specials spelled "<|start|>" etc.
-- opts: completion (default true: end with "<|start|>assistant"), drop_analysis (default true).
function harmony.render(conversation, opts)
  local out = pieces("harmony.render", conversation, opts)
  for i, p in ipairs(out) do
    if type(p) == "table" then out[i] = p.text end
  end
  return table.concat(out)
end

--- The conversation as token ids: text pieces through tokenizer:encode(text, {mode = "o200k"}),
-- specials by tokenizer.special. Same options as render.
function harmony.render_ids(conversation, tokenizer, opts)
  if not util.is_a(tokenizer, "gptoss.tokenizer") and type(tokenizer) ~= "table" then
    error(("harmony.render_ids: tokenizer must be a gptoss tokenizer (got %s)"):format(util.kind(tokenizer)), 2)
  end
  local ids = {}
  for _, p in ipairs(pieces("harmony.render_ids", conversation, opts)) do
    if type(p) == "table" then
      ids[#ids + 1] = tokenizer.special[p.name]
    elseif p ~= "" then
      local encoded = tokenizer:encode(p, { mode = "o200k" })
      table.move(encoded, 1, #encoded, #ids + 1, ids)
    end
  end
  return ids
end

--- A streaming parser of sampled ids: harmony.parser(tokenizer [, {role=, strict=}])
-- (gptoss.harmony_parser; docs/harmony.md#parsing).
harmony.parser = harmony_parser.new

return harmony
