--- gptoss.serve_choice (internal, gptoss.serve's): one choice of a request, the ids its
-- sequence generates turned into what OpenAI's API returns. A chat choice parses the ids as
-- harmony (leniently: a model may slip out of the format): the analysis channel is
-- reasoning_content, a message to functions.NAME is a tool call whose content is its JSON
-- arguments, any other message's text is content. A completion choice is the decoded text,
-- an invalid byte as U+FFFD.
-- Stop strings cut content (not reasoning, not arguments). With logprobs asked, every id
-- generated has its entry (a chat's harmony tokens and reasoning included; a completion's
-- up to its stop), in c.logprobs; c:take_logprobs() hands over those not taken yet, for
-- the next streamed chunk to carry.
--
-- c:add(id, logprob) and c:close(finish) return the deltas they complete, each one of
-- {content =}, {reasoning_content =} or {tool_call = {index =, id =, name =, arguments =}}
-- (add's list is reused by the next add: the caller reads it at once);
-- c.stopped is set once a stop string was found (the sequence must then be cancelled).
-- c:finish_reason(), c:message() (chat), c:text() (completion), c.logprobs.
local harmony = require "gptoss.harmony"
local harmony_parser = require "gptoss.harmony_parser"
local stops = require "gptoss.stops"

local serve_choice = {}

local Choice = {}
Choice.__index = Choice

-- ids that end a completion: their text is not part of it
local STOP_IDS = {}
for _, id in ipairs(harmony.stop_ids) do STOP_IDS[id] = true end

local call_counter = 0

-- Decoded bytes as JSON may carry them: invalid bytes as U+FFFD. utf8.len (C) clears the
-- usual text at once; only the rest goes through valid_utf8.
local function shown_text(bytes)
  if utf8.len(bytes) then return bytes end
  return harmony_parser.valid_utf8(bytes)
end

--- A choice of job (serve_openai's) over tokenizer.
function serve_choice.new(job, tokenizer)
  -- a whole answer's texts are kept as their deltas, joined once at the end (appending to a
  -- string would copy all of it for every id); a stream's deltas are sent, not kept
  local c = setmetatable({ kind = job.kind, tokenizer = tokenizer, keep = not job.stream, content_parts = {},
    reasoning_parts = {}, calls = {}, deltas = {}, logprobs = job.logprobs and {} or nil, taken = 0, text_offset = 0,
    filter = job.stop and stops.text(job.stop) or nil }, Choice)
  if job.kind == "chat" then
    c.parser = harmony.parser(tokenizer, { role = "assistant", strict = false })
    for _, id in ipairs(job.prefill or {}) do c:events(c.parser:push(id), {}) end -- the reply's start, in the prompt
  else
    c.decoder = tokenizer:decoder()
  end
  return c
end

-- Content text through the stop filter; returns the delta to show, if any.
function Choice:content(text, out)
  if self.stopped then return end
  if self.filter then
    local shown, found = self.filter:add(text)
    text = shown
    if found then self.stopped = true end
  end
  if text ~= "" then
    if self.keep then self.content_parts[#self.content_parts + 1] = text end
    out[#out + 1] = { content = text }
  end
end

--- The content so far.
function Choice:text()
  return table.concat(self.content_parts)
end

-- The harmony parser's events as deltas.
function Choice:events(events, out)
  for k = 1, #events do
    local e = events[k]
    if e.type == "start" then
      self.open = e
      local name = e.recipient and e.recipient:match("^functions%.(.+)$")
      if name then
        call_counter = call_counter + 1
        local call = { index = #self.calls, id = ("call_%d_%d"):format(os.time(), call_counter), name = name,
          arguments = {} }
        self.calls[#self.calls + 1] = call
        out[#out + 1] = { tool_call = { index = call.index, id = call.id, name = name, arguments = "" } }
      end
    elseif e.type == "text" then
      local open = self.open or {}
      local call = open.recipient and open.recipient:match("^functions%.") and self.calls[#self.calls]
      if call then
        if self.keep then call.arguments[#call.arguments + 1] = e.text end
        out[#out + 1] = { tool_call = { index = call.index, arguments = e.text } }
      elseif open.channel == "analysis" then
        if self.keep then self.reasoning_parts[#self.reasoning_parts + 1] = e.text end
        out[#out + 1] = { reasoning_content = e.text }
      else
        self:content(e.text, out)
      end
    elseif e.type == "end" then
      self.last_stop = e.stop
    end
  end
end

-- A chat logprob entry, OpenAI's shape: {token, logprob, bytes, top_logprobs}.
function Choice:chat_entry(lp)
  local function entry(id, logprob)
    local piece = self.tokenizer:piece(id)
    return { token = piece, logprob = logprob, bytes = { piece:byte(1, -1) } }
  end
  local e = entry(lp.id, lp.logprob)
  e.top_logprobs = {}
  for i, t in ipairs(lp.top) do e.top_logprobs[i] = entry(t.id, t.logprob) end
  return e
end

-- A completion logprob entry: its piece, logprob, alternatives ({[piece] = logprob}, nil
-- when none) and offset in the text, which serve_api lays out in the legacy columns.
function Choice:completion_entry(lp)
  local piece = self.tokenizer:piece(lp.id)
  local top
  for _, t in ipairs(lp.top) do
    top = top or {}
    top[self.tokenizer:piece(t.id)] = t.logprob
  end
  local e = { token = piece, logprob = lp.logprob, top = top, offset = self.text_offset }
  self.text_offset = self.text_offset + #piece
  return e
end

--- The deltas id completes (logprob: the step's entry for it, or nil).
function Choice:add(id, logprob)
  local out = self.deltas
  for k = #out, 1, -1 do out[k] = nil end
  if self.kind == "chat" then
    self:events(self.parser:push(id), out)
    if self.logprobs and logprob then self.logprobs[#self.logprobs + 1] = self:chat_entry(logprob) end
  elseif not STOP_IDS[id] then
    local stopped = self.stopped
    self:content(shown_text(self.decoder:add(id)), out)
    if self.logprobs and logprob and not stopped then self.logprobs[#self.logprobs + 1] = self:completion_entry(logprob) end
  end
  return out
end

--- The logprob entries not taken before, in order (nil when there are none).
function Choice:take_logprobs()
  local lps = self.logprobs
  if not lps or #lps == self.taken then return nil end
  local entries = table.move(lps, self.taken + 1, #lps, 1, {})
  self.taken = #lps
  return entries
end

--- The last deltas, once the sequence has ended (finish: the sequence's).
function Choice:close(finish)
  self.finish = finish
  local out = {}
  if self.kind == "chat" then
    self:events(self.parser:finish(), out)
  else
    self:content(shown_text(self.decoder:flush()), out)
  end
  if self.filter and not self.stopped then
    local rest = self.filter:flush()
    if rest ~= "" then
      if self.keep then self.content_parts[#self.content_parts + 1] = rest end
      out[#out + 1] = { content = rest }
    end
  end
  return out
end

--- OpenAI's finish_reason: "tool_calls" after a call, "length" at the limit, else "stop".
function Choice:finish_reason()
  if self.kind == "chat" and self.last_stop == "call" and #self.calls > 0 then return "tool_calls" end
  if self.finish == "length" and not self.stopped then return "length" end
  return "stop"
end

--- The assistant message of a chat choice: content (nil when none), its reasoning as
-- reasoning_content and reasoning (vLLM's old and new names: clients read either), tool_calls.
function Choice:message()
  local content, reasoning = self:text(), table.concat(self.reasoning_parts)
  local m = { role = "assistant", content = content ~= "" and content or nil,
    reasoning_content = reasoning ~= "" and reasoning or nil, reasoning = reasoning ~= "" and reasoning or nil }
  if #self.calls > 0 then
    m.tool_calls = {}
    for i, call in ipairs(self.calls) do
      m.tool_calls[i] = { id = call.id, type = "function",
        ["function"] = { name = call.name, arguments = table.concat(call.arguments) } }
    end
  end
  return m
end

return serve_choice
