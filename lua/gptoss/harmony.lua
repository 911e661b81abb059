--- gptoss.harmony: OpenAI's harmony chat format, the one gpt-oss is trained on
-- (docs/harmony.md): conversations rendered to text or token ids, and a streaming parser
-- of the ids a model samples. Pure Lua; the tokenizer is only needed for ids.
local util = require "gptoss.util"

local harmony = {}

--- The special ids of o200k_harmony that the format uses.
harmony.special = {
  startoftext = 199998, endoftext = 199999, ["return"] = 200002, constrain = 200003,
  channel = 200005, start = 200006, ["end"] = 200007, message = 200008, call = 200012,
}

--- The ids that end sampling: <|return|> (answer done), <|call|> (a tool call), <|endoftext|>.
harmony.stop_ids = { 200002, 200012, 199999 }

local ROLES = { "system", "developer", "user", "assistant", "tool" }
local MESSAGE_FIELDS = { "role", "content", "name", "channel", "recipient", "content_type" }
local SYSTEM_FIELDS = { "identity", "knowledge_cutoff", "date", "reasoning", "tools", "channels" }
local DEVELOPER_FIELDS = { "instructions", "tools" }
local REASONING = { "low", "medium", "high" }

-- System content defaults, as harmony's: a field set to false is left out.
local SYSTEM_DEFAULTS = {
  identity = "You are ChatGPT, a large language model trained by OpenAI.",
  knowledge_cutoff = "2024-06",
  reasoning = "medium",
  channels = { "analysis", "commentary", "final" },
}

local function quoted(v)
  return type(v) == "string" and ("'%s'"):format(v) or tostring(v)
end

---------------------------------------------------------------------------------------------
-- Message builders

--- A system message: harmony.system{identity=, knowledge_cutoff=, date=, reasoning=,
-- tools = {namespace, ...}, channels = {...}}; see docs/harmony.md#system-content.
function harmony.system(content)
  content = util.options("harmony.system", content, SYSTEM_FIELDS, 2)
  return { role = "system", content = content }
end

--- A developer message: harmony.developer{instructions=, tools = {function tool, ...}}.
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
-- JSON-schema-like tables to harmony's TypeScript-like declarations

-- Lines as Rust's str::lines splits them: a final "\n" does not start an empty line.
local function lines(s)
  local out = {}
  if s == "" then return out end
  if s:sub(-1) ~= "\n" then s = s .. "\n" end
  for line in s:gmatch("(.-)\n") do out[#out + 1] = line end
  return out
end

local function is_enum(schema)
  return type(schema.enum) == "table" and #schema.enum > 0
end

-- A default as the comments show it: a plain string quoted, an enum member bare, numbers
-- and booleans as JSON writes them.
local function default_text(schema, where)
  local d = schema.default
  if type(d) == "string" then return is_enum(schema) and d or ('"%s"'):format(d) end
  if math.type(d) == "integer" or type(d) == "boolean" then return tostring(d) end
  if math.type(d) == "float" and d == d and d ~= math.huge and d ~= -math.huge then
    return tostring(d)
  end
  error(("%s: default must be a string, a finite number or a boolean (got %s)"):format(where, quoted(d)), 0)
end

local function with_null(text, schema)
  if schema.nullable == true and not text:find("null", 1, true) then return text .. " | null" end
  return text
end

-- The property names of an object schema in rendering order: property_order when given
-- (Lua tables keep no key order, JSON objects do), else sorted.
local function property_names(schema, where)
  local names = {}
  for k in pairs(schema.properties) do
    if type(k) ~= "string" then
      error(("%s: properties must be keyed by name (got key %s)"):format(where, quoted(k)), 0)
    end
    names[#names + 1] = k
  end
  local order = schema.property_order
  if order == nil then
    table.sort(names)
    return names
  end
  if type(order) ~= "table" or #order ~= #names then
    error(("%s: property_order must list each of the %d properties once"):format(where, #names), 0)
  end
  local seen = {}
  for _, k in ipairs(order) do
    if schema.properties[k] == nil or seen[k] then
      error(("%s: property_order names %s, not a property or named twice"):format(where, quoted(k)), 0)
    end
    seen[k] = true
  end
  return order
end

local typescript

-- One oneOf alternative: its type, then its description and default as a trailing comment.
local function variant(v, indent, skip_description, where)
  local text = with_null(typescript(v, indent .. "   ", where), v)
  local comments = {}
  if type(v.description) == "string" and not skip_description then comments[#comments + 1] = v.description end
  if v.default ~= nil then comments[#comments + 1] = "default: " .. default_text(v, where) end
  if #comments > 0 then text = text .. " // " .. table.concat(comments, " ") end
  return text
end

local function object_type(schema, indent, where)
  local out = {}
  if type(schema.description) == "string" then out[#out + 1] = indent .. "// " .. schema.description .. "\n" end
  out[#out + 1] = "{\n"
  local required = {}
  for _, r in ipairs(schema.required or {}) do required[r] = true end
  if schema.properties ~= nil and type(schema.properties) ~= "table" then
    error(("%s: properties must be a table (got %s)"):format(where, type(schema.properties)), 0)
  end
  for _, name in ipairs(schema.properties and property_names(schema, where) or {}) do
    local p, at = schema.properties[name], ("%s: property '%s'"):format(where, name)
    if type(p) ~= "table" then error(("%s: schema must be a table (got %s)"):format(at, type(p)), 0) end
    local mark = required[name] and "" or "?"
    if type(p.title) == "string" then out[#out + 1] = ("%s// %s\n%s//\n"):format(indent, p.title, indent) end
    local description = type(p.description) == "string" and p.description or nil
    if description and not p.oneOf then out[#out + 1] = indent .. "// " .. description .. "\n" end
    if type(p.examples) == "table" and #p.examples > 0 then
      out[#out + 1] = indent .. "// Examples:\n"
      for _, e in ipairs(p.examples) do
        if type(e) == "string" then out[#out + 1] = ('%s// - "%s"\n'):format(indent, e) end
      end
    end
    if type(p.oneOf) == "table" then
      -- a description repeated by the first alternative is said once, after it
      local above = description ~= nil and not (p.oneOf[1] and p.oneOf[1].description == description)
      if above then out[#out + 1] = indent .. "// " .. description .. "\n" end
      if p.default ~= nil then out[#out + 1] = indent .. "// default: " .. default_text(p, at) .. "\n" end
      out[#out + 1] = indent .. name .. mark .. ":\n"
      for i, v in ipairs(p.oneOf) do
        out[#out + 1] = indent .. " | " .. variant(v, indent, i == 1 and above, at) .. "\n"
      end
      out[#out + 1] = indent .. ",\n"
    else
      out[#out + 1] = ("%s%s%s: %s,"):format(indent, name, mark, with_null(typescript(p, indent .. "    ", at), p))
      if p.default ~= nil then out[#out + 1] = " // default: " .. default_text(p, at) end
      out[#out + 1] = "\n"
    end
  end
  out[#out + 1] = indent .. "}"
  return table.concat(out)
end

local SCALARS = { integer = "number", number = "number", boolean = "boolean", null = "null" }

-- The declaration of a schema, as harmony's renderer writes it (docs/harmony.md#function-tools).
function typescript(schema, indent, where)
  if type(schema) ~= "table" then
    error(("%s: schema must be a table (got %s)"):format(where, type(schema)), 0)
  end
  if type(schema.oneOf) == "table" then
    local out = {}
    for _, v in ipairs(schema.oneOf) do out[#out + 1] = "\n" .. indent .. " | " .. variant(v, indent, false, where) end
    return table.concat(out)
  end
  local t = schema.type
  if type(t) == "table" and #t > 0 then
    local names = {}
    for i, name in ipairs(t) do names[i] = SCALARS[name] or name end
    return table.concat(names, " | ")
  elseif t == "object" then
    return object_type(schema, indent, where)
  elseif t == "string" then
    if not is_enum(schema) then return "string" end
    local members = {}
    for _, m in ipairs(schema.enum) do members[#members + 1] = ('"%s"'):format(m) end
    return table.concat(members, " | ")
  elseif t == "array" then
    return schema.items and typescript(schema.items, indent, where) .. "[]" or "Array<any>"
  end
  return SCALARS[t] or "any"
end

-- "# Tools" and one "## name" section per namespace {name=, description=, tools={...}}.
local function tools_section(namespaces, where)
  local sections = { "# Tools" }
  for _, ns in ipairs(namespaces) do
    local at = ("%s: namespace '%s'"):format(where, tostring(ns.name))
    local tools = ns.tools or {}
    local out = { ("## %s\n"):format(ns.name) }
    for _, line in ipairs(lines(ns.description or "")) do
      out[#out + 1] = #tools > 0 and "// " .. line or line
    end
    if #tools > 0 then
      out[#out + 1] = ("namespace %s {\n"):format(ns.name)
      for i, tool in ipairs(tools) do
        if type(tool) ~= "table" or type(tool.name) ~= "string" then
          error(("%s: tool %d must be a table with a string name"):format(at, i), 0)
        end
        for _, line in ipairs(lines(tool.description or "")) do out[#out + 1] = "// " .. line end
        if tool.parameters then
          local params = typescript(tool.parameters, "", ("%s: tool '%s': parameters"):format(at, tool.name))
          out[#out + 1] = ("type %s = (_: %s) => any;\n"):format(tool.name, params)
        else
          out[#out + 1] = ("type %s = () => any;\n"):format(tool.name)
        end
      end
      out[#out + 1] = ("} // namespace %s"):format(ns.name)
    end
    sections[#sections + 1] = table.concat(out, "\n")
  end
  return table.concat(sections, "\n\n")
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
    sections[#sections + 1] = tools_section(namespaces, where)
  end
  local channels = field("channels")
  if channels and #channels > 0 then
    local header = ("# Valid channels: %s. Channel must be included for every message."):format(table.concat(channels, ", "))
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
    sections[#sections + 1] = tools_section({ { name = "functions", tools = c.tools } }, where)
  end
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

---------------------------------------------------------------------------------------------
-- Parsing

-- ids that end a message, and what the end event reports as its stop
local ENDINGS = { [200007] = "end", [200002] = "return", [200012] = "call", [199999] = "endoftext" }
-- specials that a header spells as text, for parse_header to find
local IN_HEADER = { [200005] = "<|channel|>", [200003] = "<|constrain|>" }
local FIRST_SPECIAL = 199998
local HEADER_ROLES = { "system", "developer", "user", "assistant" }
local REPLACEMENT = "\u{FFFD}"

-- buf cut into text to emit now (invalid bytes each replaced by U+FFFD) and the trailing
-- bytes of a character that the next token may complete.
local function utf8_split(buf)
  local out = {}
  while true do
    local n, bad = utf8.len(buf)
    if n then
      out[#out + 1] = buf
      return table.concat(out), ""
    end
    out[#out + 1] = buf:sub(1, bad - 1)
    local lead, rest = buf:byte(bad), buf:sub(bad)
    local need = (lead >= 0xF0 and lead <= 0xF4) and 4 or (lead >= 0xE0 and lead <= 0xEF) and 3
      or (lead >= 0xC2 and lead <= 0xDF) and 2 or 0
    if #rest < need and not rest:find("[^\x80-\xBF]", 2) then return table.concat(out), rest end
    out[#out + 1] = REPLACEMENT
    buf = buf:sub(bad + 1)
  end
end

-- A header's text (specials spelled) as {role=, name=, channel=, recipient=, content_type=},
-- and the words it could not place (nil when none), or nil and why.
local function parse_header(text, role)
  local h = {}
  local s, e, channel = text:find("<|channel|>([^%s<]*)")
  if s then
    if channel == "" then return nil, "<|channel|> is not followed by a channel name" end
    h.channel, text = channel, text:sub(1, s - 1) .. " " .. text:sub(e + 1)
  end
  local words = {}
  for w in text:gsub("<|constrain|>", " <|constrain|>"):gmatch("%S+") do words[#words + 1] = w end
  local first = 1
  if role then
    h.role = role
    if words[1] == role then first = 2 end
  elseif not words[1] or words[1]:find("^to=") then
    return nil, "no role"
  else
    first = 2
    if util.listed(HEADER_ROLES, words[1]) then h.role = words[1] else h.role, h.name = "tool", words[1] end
  end
  local rest = {}
  for i = first, #words do
    local w = words[i]
    if w:find("^to=.") and not h.recipient then
      h.recipient = w:sub(4)
    elseif not w:find("^to=") and not h.content_type then
      h.content_type = w
    else
      rest[#rest + 1] = w
    end
  end
  return h, #rest > 0 and table.concat(rest, " ") or nil
end

local Parser = {}
Parser.__index = Parser

--- A streaming parser of sampled ids: harmony.parser(tokenizer [, {role=, strict=}]);
-- tokenizer: a gptoss tokenizer or a function(id) -> bytes. p:push(id) and p:finish() return
-- the events that id completes; p.messages holds the finished messages
-- (docs/harmony.md#parsing).
function harmony.parser(tokenizer, opts)
  local decode
  if type(tokenizer) == "function" then
    decode = tokenizer
  elseif util.is_a(tokenizer, "gptoss.tokenizer") then
    decode = function(id) return tokenizer:decode({ id }) end
  else
    error(("harmony.parser: expected a gptoss tokenizer or a decode function (got %s)"):format(util.kind(tokenizer)), 2)
  end
  opts = util.options("harmony.parser", opts, { "role", "strict" }, 2)
  if opts.role ~= nil and not util.listed(HEADER_ROLES, opts.role) then
    error(("harmony.parser: role must be one of %s (got %s)"):format(table.concat(HEADER_ROLES, ", "),
      quoted(opts.role)), 2)
  end
  local p = setmetatable({ decode = decode, strict = opts.strict ~= false, messages = {}, events = {} }, Parser)
  if opts.role then p:open_header(opts.role) else p.state = "start" end
  return p
end

function Parser:fail(fmt, ...)
  error("harmony.parser: " .. fmt:format(...), 0)
end

-- "<|end|> (200007)" or "'hello' (24912)"
function Parser:describe(id)
  return ("%s (%d)"):format(quoted(self.decode(id)), id)
end

function Parser:emit(event) self.events[#self.events + 1] = event end

function Parser:open_header(role)
  self.state, self.role, self.header = "header", role, {}
end

function Parser:open_message(h)
  local m = { role = h.role, name = h.name, channel = h.channel, recipient = h.recipient,
    content_type = h.content_type }
  self:emit({ type = "start", role = m.role, name = m.name, channel = m.channel, recipient = m.recipient,
    content_type = m.content_type })
  self.state, self.message, self.text, self.pending = "content", m, {}, ""
end

function Parser:add_text(text)
  if text ~= "" then
    self.text[#self.text + 1] = text
    self:emit({ type = "text", text = text })
  end
end

-- Ends the open message; stop: "end", "return", "call", "endoftext", or nil when cut short.
function Parser:close_message(stop)
  if self.pending ~= "" then self:add_text(REPLACEMENT:rep(#self.pending)) end
  local m = self.message
  m.content = table.concat(self.text)
  self.messages[#self.messages + 1] = m
  self:emit({ type = "end", stop = stop, message = m })
  self.state, self.message = "start", nil
end

-- Lenient: a header that ended without <|message|> was the message itself, as the model
-- forgot the separator: its channel is kept and its other words are the content.
function Parser:salvage_header(stop)
  local text = table.concat(self.header)
  if text:find("%S") then
    local s, e, channel = text:find("<|channel|>([^%s<]*)")
    if s then text = text:sub(1, s - 1) .. " " .. text:sub(e + 1) end
    local words = {}
    for w in text:gmatch("%S+") do words[#words + 1] = w end
    if words[1] == (self.role or "assistant") then table.remove(words, 1) end
    self:open_message({ role = self.role or "assistant", channel = channel ~= "" and channel or nil })
    self:add_text(table.concat(words, " "))
    self:close_message(stop)
  end
  self.state = "start"
end

function Parser:header_token(id)
  if id == harmony.special.message then
    local h, rest = parse_header(table.concat(self.header), self.role)
    if self.strict and (not h or rest) then
      self:fail("bad message header %s: %s", quoted(table.concat(self.header)),
        h and ("unexpected text " .. quoted(rest)) or rest)
    end
    -- lenient: words that fit no field are dropped, a header without a role is the assistant's
    self:open_message(h or { role = self.role or "assistant" })
  elseif IN_HEADER[id] then
    self.header[#self.header + 1] = IN_HEADER[id]
  elseif ENDINGS[id] or id == harmony.special.start then
    if self.strict then
      self:fail("%s inside the message header %s (no <|message|>)", self:describe(id), quoted(table.concat(self.header)))
    end
    self:salvage_header(ENDINGS[id])
    if id == harmony.special.start then self:open_header(nil) end
  elseif id >= FIRST_SPECIAL then
    if self.strict then self:fail("unexpected %s in a message header", self:describe(id)) end
  else
    self.header[#self.header + 1] = self.decode(id)
  end
end

function Parser:content_token(id)
  if ENDINGS[id] then
    self:close_message(ENDINGS[id])
  elseif id >= FIRST_SPECIAL then
    if self.strict then self:fail("unexpected %s in message content", self:describe(id)) end
    if id == harmony.special.start then -- lenient: the <|end|> was left out
      self:close_message(nil)
      self:open_header(nil)
    end
  else
    local text
    text, self.pending = utf8_split(self.pending .. self.decode(id))
    self:add_text(text)
  end
end

function Parser:start_token(id)
  if id == harmony.special.start then
    self:open_header(nil)
  elseif id == harmony.special.endoftext then
    return -- nothing open: the stream is simply over
  elseif self.strict then
    self:fail("expected <|start|>, got %s", self:describe(id))
  elseif id == harmony.special.message then -- lenient: a headerless assistant message
    self:open_message({ role = "assistant" })
  elseif id < FIRST_SPECIAL then -- lenient: text outside any message opens an assistant header
    self:open_header("assistant")
    self:header_token(id)
  end
end

local HANDLERS = { start = Parser.start_token, header = Parser.header_token, content = Parser.content_token }

--- Feeds one id; returns the events it completes ({} when none).
function Parser:push(id)
  if math.type(id) ~= "integer" or id < 0 then
    error(("harmony.parser: push expects a token id, a non-negative integer (got %s)"):format(quoted(id)), 2)
  end
  self.events = {}
  HANDLERS[self.state](self, id)
  return self.events
end

--- Ends the stream: a message still open ends with stop = nil (cut short), its unfinished
-- character as U+FFFD. Returns the events.
function Parser:finish()
  self.events = {}
  if self.state == "content" then
    self:close_message(nil)
  elseif self.state == "header" and #self.header > 0 then
    if self.strict then self:fail("the stream ended inside the message header %s", quoted(table.concat(self.header))) end
    self:salvage_header(nil)
  end
  self.state = "start"
  return self.events
end

return harmony
