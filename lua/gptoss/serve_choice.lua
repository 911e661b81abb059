--- gptoss.serve_choice (internal, gptoss.serve's): one choice of a request, the ids its
-- sequence generates turned into what OpenAI's API returns. A chat choice parses the ids as
-- harmony (leniently: a model may slip out of the format): the analysis channel is
-- reasoning_content, a message to functions.NAME is a tool call whose content is its JSON
-- arguments, any other message's text is content. A completion choice is the decoded text,
-- an invalid byte as U+FFFD.
-- Stop strings cut content (not reasoning, not arguments); logprobs are kept for the ids
-- whose text is content.
--
-- c:add(id, logprob) and c:close(finish) return the deltas they complete, each one of
-- {content =}, {reasoning_content =} or {tool_call = {index =, id =, name =, arguments =}};
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

--- A choice of job (serve_openai's) over tokenizer.
function serve_choice.new(job, tokenizer)
  -- the texts are kept as their deltas, joined once at the end: appending to a string
  -- would copy all of it for every id
  local c = setmetatable({ kind = job.kind, tokenizer = tokenizer, content_parts = {}, reasoning_parts = {}, calls = {},
    logprobs = job.logprobs and {} or nil, filter = job.stop and stops.text(job.stop) or nil }, Choice)
  if job.kind == "chat" then
    c.parser = harmony.parser(tokenizer, { role = "assistant", strict = false })
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
    self.content_parts[#self.content_parts + 1] = text
    out[#out + 1] = { content = text }
  end
end

--- The content so far.
function Choice:text()
  return table.concat(self.content_parts)
end

-- The harmony parser's events as deltas; says whether id's text went to content.
function Choice:events(events, out)
  local to_content = false
  for _, e in ipairs(events) do
    if e.type == "start" then
      self.open = e
      local name = e.recipient and e.recipient:match("^functions%.(.+)$")
      if name then
        call_counter = call_counter + 1
        local call = { index = #self.calls, id = ("call_%d_%d"):format(os.time(), call_counter), name = name,
          arguments = "" }
        self.calls[#self.calls + 1] = call
        out[#out + 1] = { tool_call = { index = call.index, id = call.id, name = name, arguments = "" } }
      end
    elseif e.type == "text" then
      local open = self.open or {}
      local call = open.recipient and open.recipient:match("^functions%.") and self.calls[#self.calls]
      if call then
        call.arguments = call.arguments .. e.text
        out[#out + 1] = { tool_call = { index = call.index, arguments = e.text } }
      elseif open.channel == "analysis" then
        self.reasoning_parts[#self.reasoning_parts + 1] = e.text
        out[#out + 1] = { reasoning_content = e.text }
      else
        self:content(e.text, out)
        to_content = true
      end
    elseif e.type == "end" then
      self.last_stop = e.stop
    end
  end
  return to_content
end

-- One logprob entry, OpenAI's chat shape: {token, logprob, bytes, top_logprobs}.
function Choice:logprob_entry(lp)
  local function entry(id, logprob)
    local piece = self.tokenizer:piece(id)
    return { token = piece, logprob = logprob, bytes = { piece:byte(1, -1) } }
  end
  local e = entry(lp.id, lp.logprob)
  e.top_logprobs = {}
  for i, t in ipairs(lp.top) do e.top_logprobs[i] = entry(t.id, t.logprob) end
  return e
end

--- The deltas id completes (logprob: the step's entry for it, or nil).
function Choice:add(id, logprob)
  local out = {}
  if self.kind == "chat" then
    if self:events(self.parser:push(id), out) and self.logprobs and logprob then
      self.logprobs[#self.logprobs + 1] = self:logprob_entry(logprob)
    end
  elseif not STOP_IDS[id] then
    self:content(harmony_parser.valid_utf8(self.decoder:add(id)), out)
    if self.logprobs and logprob and not self.stopped then self.logprobs[#self.logprobs + 1] = logprob end
  end
  return out
end

--- The last deltas, once the sequence has ended (finish: the sequence's).
function Choice:close(finish)
  self.finish = finish
  local out = {}
  if self.kind == "chat" then
    self:events(self.parser:finish(), out)
  else
    self:content(harmony_parser.valid_utf8(self.decoder:flush()), out)
  end
  if self.filter and not self.stopped then
    local rest = self.filter:flush()
    if rest ~= "" then
      self.content_parts[#self.content_parts + 1] = rest
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

--- The assistant message of a chat choice: content (nil when none), reasoning_content,
-- tool_calls.
function Choice:message()
  local content, reasoning = self:text(), table.concat(self.reasoning_parts)
  local m = { role = "assistant", content = content ~= "" and content or nil,
    reasoning_content = reasoning ~= "" and reasoning or nil }
  if #self.calls > 0 then
    m.tool_calls = {}
    for i, call in ipairs(self.calls) do
      m.tool_calls[i] = { id = call.id, type = "function", ["function"] = { name = call.name, arguments = call.arguments } }
    end
  end
  return m
end

return serve_choice
