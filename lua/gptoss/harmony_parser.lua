--- gptoss.harmony_parser (internal, gptoss.harmony's): the streaming parser of sampled ids,
-- harmony.parser (docs/harmony.md#parsing): each id moves it through a message's header
-- and content, and returns the events it completes; strict by default, else lenient with
-- what a model gets wrong (a missing <|message|> or <|end|>, text outside a message).
local harmony_special = require "gptoss.harmony_special"
local util = require "gptoss.util"

local harmony_parser = {}

local quoted = util.quoted
local special = harmony_special.special

-- ids that end a message, and what the end event reports as its stop
local ENDINGS = {
  [special["end"]] = "end", [special["return"]] = "return", [special.call] = "call", [special.endoftext] = "endoftext",
}
-- specials that a header spells as text, for parse_header to find
local IN_HEADER = { [special.channel] = "<|channel|>", [special.constrain] = "<|constrain|>" }
local FIRST_SPECIAL = special.startoftext -- the lowest special id: every id from it up is one
local HEADER_ROLES = { "system", "developer", "user", "assistant" }
-- Lenient: the most bytes a header holds, and what it never holds (a control character, a
-- byte past ASCII): past either, the model is not writing harmony (a random model never does)
local MAX_HEADER_BYTES = 128
local NOT_IN_HEADER = "[%c\128-\255]"
local REPLACEMENT = "\u{FFFD}"

-- buf cut into text to emit now (invalid bytes each replaced by U+FFFD) and the trailing
-- bytes of a character that the next token may complete.
local function utf8_split(buf)
  if utf8.len(buf) then return buf, "" end -- the usual case, at no cost
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

--- s with every invalid byte, an unfinished character's at its end included, as U+FFFD: what
-- a header (its words split across ids as content is) becomes before anything reads it, and
-- what gptoss serve sends of decoded text (JSON strings are UTF-8).
function harmony_parser.valid_utf8(s)
  local text, rest = utf8_split(s)
  if rest == "" then return text end
  return text .. REPLACEMENT:rep(#rest)
end
local valid_utf8 = harmony_parser.valid_utf8

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

--- harmony.parser(tokenizer [, {role=, strict=}]): a streaming parser of sampled ids;
-- tokenizer: a gptoss tokenizer or a function(id) -> bytes. p:push(id) and p:finish()
-- return the events that id completes; p.messages holds the finished messages
-- (docs/harmony.md#parsing).
function harmony_parser.new(tokenizer, opts)
  local decode, vocab
  if type(tokenizer) == "function" then
    decode = tokenizer
  elseif util.is_a(tokenizer, "gptoss.tokenizer") then
    decode, vocab = function(id) return tokenizer:decode({ id }) end, tokenizer.vocab_size
  else
    error(("harmony.parser: expected a gptoss tokenizer or a decode function (got %s)"):format(util.kind(tokenizer)), 2)
  end
  opts = util.options("harmony.parser", opts, { "role", "strict" }, 2)
  if opts.role ~= nil and not util.listed(HEADER_ROLES, opts.role) then
    error(("harmony.parser: role must be one of %s (got %s)"):format(table.concat(HEADER_ROLES, ", "),
      quoted(opts.role)), 2)
  end
  local p = setmetatable({ decode = decode, vocab = vocab, strict = opts.strict ~= false, messages = {}, events = {} },
    Parser)
  if opts.role then p:open_header(opts.role) else p.state = "start" end
  return p
end

function Parser:fail(fmt, ...)
  error("harmony.parser: " .. fmt:format(...), 0)
end

-- The bytes of id, or nil and why not: a decode function may raise or return no string.
function Parser:decoded(id)
  local ok, bytes = pcall(self.decode, id)
  if not ok then return nil, util.bare(bytes) end
  if type(bytes) ~= "string" then return nil, "the decode function returned " .. type(bytes) end
  return bytes
end

-- The bytes of a text id; what decoding it raised is the parser's error, naming the id.
function Parser:bytes(id)
  local bytes, why = self:decoded(id)
  if not bytes then self:fail("cannot decode id %d: %s", id, why) end
  return bytes
end

-- "<|end|> (200007)", "'hello' (24912)", or "id 200014" when it cannot be decoded: an
-- error naming a token is the parser's own error.
function Parser:describe(id)
  local bytes = self:decoded(id)
  return bytes and ("%s (%d)"):format(quoted(bytes), id) or ("id %d"):format(id)
end

-- The header's text so far, invalid bytes replaced.
function Parser:header_text()
  return valid_utf8(table.concat(self.header))
end

function Parser:emit(event) self.events[#self.events + 1] = event end

function Parser:open_header(role)
  self.state, self.role, self.header, self.header_bytes = "header", role, {}, 0
end

-- not_harmony: the message is text the model wrote outside the format (release_header)
function Parser:open_message(h, not_harmony)
  local m = { role = h.role, name = h.name, channel = h.channel, recipient = h.recipient,
    content_type = h.content_type }
  self:emit({ type = "start", role = m.role, name = m.name, channel = m.channel, recipient = m.recipient,
    content_type = m.content_type, not_harmony = not_harmony })
  self.state, self.message, self.text, self.pending = "content", m, {}, ""
end

function Parser:add_text(text)
  if text ~= "" then
    self.text[#self.text + 1] = text
    self:emit({ type = "text", text = text })
  end
end

-- Content bytes: whole characters now, a character's first bytes when the next id may end it.
function Parser:add_bytes(bytes)
  local text
  text, self.pending = utf8_split(self.pending .. bytes)
  self:add_text(text)
end

-- Lenient: what was held as a header is not one (MAX_HEADER_BYTES, NOT_IN_HEADER), so it is
-- the content of an assistant message, streamed from here on, marked not_harmony.
function Parser:release_header()
  local held = table.concat(self.header)
  self:open_message({ role = self.role or "assistant" }, true)
  self:add_bytes(held)
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
  local text = self:header_text()
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
  if id == special.message then
    local text = self:header_text()
    local h, rest = parse_header(text, self.role)
    if self.strict and (not h or rest) then
      self:fail("bad message header %s: %s", quoted(text),
        h and ("unexpected text " .. quoted(rest)) or rest)
    end
    -- lenient: words that fit no field are dropped, a header without a role is the assistant's
    self:open_message(h or { role = self.role or "assistant" })
  elseif IN_HEADER[id] then
    self.header[#self.header + 1] = IN_HEADER[id]
  elseif ENDINGS[id] or id == special.start then
    if self.strict then
      self:fail("%s inside the message header %s (no <|message|>)", self:describe(id), quoted(self:header_text()))
    end
    self:salvage_header(ENDINGS[id])
    if id == special.start then self:open_header(nil) end
  elseif id >= FIRST_SPECIAL then
    if self.strict then self:fail("unexpected %s in a message header", self:describe(id)) end
  else
    local bytes = self:bytes(id)
    self.header[#self.header + 1] = bytes
    self.header_bytes = self.header_bytes + #bytes
    if not self.strict and (self.header_bytes > MAX_HEADER_BYTES or bytes:find(NOT_IN_HEADER)) then
      self:release_header()
    end
  end
end

function Parser:content_token(id)
  if ENDINGS[id] then
    self:close_message(ENDINGS[id])
  elseif id >= FIRST_SPECIAL then
    if self.strict then self:fail("unexpected %s in message content", self:describe(id)) end
    if id == special.start then -- lenient: the <|end|> was left out
      self:close_message(nil)
      self:open_header(nil)
    end
  else
    self:add_bytes(self:bytes(id))
  end
end

function Parser:start_token(id)
  if id == special.start then
    self:open_header(nil)
  elseif id == special.endoftext then
    return -- nothing open: the stream is simply over
  elseif self.strict then
    self:fail("expected <|start|>, got %s", self:describe(id))
  elseif id == special.message then -- lenient: a headerless assistant message
    self:open_message({ role = "assistant" })
  elseif id < FIRST_SPECIAL then -- lenient: text outside any message opens an assistant header
    self:open_header("assistant")
    self:header_token(id)
  end
end

local HANDLERS = { start = Parser.start_token, header = Parser.header_token, content = Parser.content_token }

--- Feeds one id; returns the events it completes ({} when none). An id past a gptoss
-- tokenizer's vocabulary is refused here, strict or not, before the tokenizer sees it.
function Parser:push(id)
  if math.type(id) ~= "integer" or id < 0 then
    error(("harmony.parser: push expects a token id, a non-negative integer (got %s)"):format(quoted(id)), 2)
  end
  if self.vocab and id >= self.vocab then
    error(("harmony.parser: push expects an id of the tokenizer's vocabulary, 0..%d (got %d)")
      :format(self.vocab - 1, id), 2)
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
    if self.strict then
      self:fail("the stream ended inside the message header %s", quoted(self:header_text()))
    end
    self:salvage_header(nil)
  end
  self.state = "start"
  return self.events
end

return harmony_parser
