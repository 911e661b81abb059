--- gptoss.chat: a chat session in the harmony format over one slot of a replica
-- (docs/chat.md): each question is a user turn, the conversation is rendered with
-- gptoss.harmony and the reply decoded until a stop id, function tools are called in Lua
-- and their answers fed back. The slot keeps its KV between turns: only the ids past
-- what it already holds are fed.
local gptoss = require "gptoss"
local harmony = require "gptoss.harmony"
local util = require "gptoss.util"
local chat_tools = require "gptoss.chat_tools"
local constraint = require "gptoss.constraint"

local chat = {}

-- what shapes a reply (docs/structured.md#harmony-turns), per session or per ask
local REPLY_OPTIONS = { "format", "max_reasoning_tokens" }
local OPTIONS = { "replica", "tokenizer", "slot", "system", "developer", "sampling", "tools", "step", "max_tokens",
  "on_overflow", table.unpack(REPLY_OPTIONS) }
local CALLBACKS = { "on_text", "on_tool", "on_drop", "on_not_harmony", "cancel" }
local ASK_OPTIONS = { "max_tokens", "format", "max_reasoning_tokens", table.unpack(CALLBACKS) }
local OVERFLOWS = { "error", "drop_oldest" }
-- drop_oldest leaves the reply this share of the context at least (or max_tokens if less)
local REPLY_SHARE = 4
-- OpenAI's recommendation for gpt-oss
local DEFAULT_SAMPLING = { temperature = 1.0, top_p = 1.0 }
-- stop id -> how the reply ended: harmony.stop_ids, by their names in harmony.special
local STOPS = {}
for name, id in pairs(harmony.special) do
  if util.listed(harmony.stop_ids, id) then STOPS[id] = name end
end

local Session = {}
Session.__index = Session

-- The sessions answering now: ask refuses to start again on one of them. Kept here, not in
-- a field of the session, so that nothing a tool does to the session clears it.
local answering = setmetatable({}, { __mode = "k" })
-- replica -> {[slot] = the session whose conversation the slot holds}: a session made on
-- a slot takes it over from the one before, which feeds its conversation again (feed).
local holders = setmetatable({}, { __mode = "k" })

local function check_limit(fn, v, level)
  if v ~= nil and (math.type(v) ~= "integer" or v < 1) then
    error(("%s: max_tokens must be an integer >= 1 (got %s)"):format(fn, tostring(v)), level + 1)
  end
end

-- The replica's step on one slot as chat steps are: feed ids at positions pos, pos + 1, ...
-- (a position below the slot's length truncates it there) and return the id chosen after
-- the last, the one row drawn, under matcher when given. A GPU replica takes at most r.chunk
-- rows of one slot per step.
local function replica_step(r, slot)
  return function(ids, pos, matcher)
    local chunk, h = r.chunk or #ids, nil
    for first = 1, #ids, chunk do
      local slots, positions, tokens = {}, {}, {}
      local last = math.min(first + chunk - 1, #ids)
      for i = first, last do
        local n = i - first + 1
        slots[n], positions[n], tokens[n] = slot, pos + i - 1, ids[i]
      end
      local drawn = last == #ids
      h = r:step { slots = slots, positions = positions, tokens = tokens, draw = drawn and { #slots } or {},
        constraint = drawn and matcher and { [#slots] = matcher } or nil }
    end
    local chosen = h:tokens()
    return chosen[#chosen]
  end
end

-- A harmony message built from a chat.new option, its errors naming the option.
local function built(field, build, content)
  if type(content) ~= "table" then error(("%s must be a table (got %s)"):format(field, type(content)), 0) end
  local ok, m = pcall(build, content)
  if not ok then error(field .. ": " .. util.bare(m):gsub("^harmony%.%a+: ", ""), 0) end
  return m
end

-- The system and developer messages the conversation starts with, rendered once so that
-- bad contents (a reasoning effort, a tool's schema) fail in chat.new rather than later.
-- Reasoning "none" is rendered "low", the reply's final channel prefilled (reply_plan);
-- a format's schema is shown in the developer message's "# Response Formats".
local function preamble(opts, declared, tokenizer)
  local system = opts.system or {}
  if type(system) == "table" and system.reasoning == "none" then
    system = {}
    for k, v in pairs(opts.system) do system[k] = v end
    system.reasoning = "low"
  end
  local messages = { built("system", harmony.system, system) }
  local developer = opts.developer
  if developer ~= nil then
    developer = built("developer", harmony.developer, developer).content
    if developer.tools ~= nil then
      error("developer.tools: give function tools as tools = {name = {description=, parameters=, fn=}}", 0)
    end
  end
  local formats = opts.format ~= nil and not util.is_a(opts.format, "gptoss.grammar")
    and constraint.response_formats_section { { name = "response", schema = opts.format } } or nil
  if developer or #declared > 0 or formats then
    local content = { tools = #declared > 0 and declared or nil, response_formats = formats }
    for k, v in pairs(developer or {}) do content[k] = v end
    messages[2] = harmony.developer(content)
  end
  local ok, err = pcall(harmony.render_ids, messages, tokenizer)
  -- "harmony.render_ids: message 2: ..." names the option the message came from
  if not ok then error((util.bare(err):gsub("^harmony%.render_ids: message (%d)", { ["1"] = "system", ["2"] = "developer" })), 0) end
  return messages
end

-- The plan of the replies (gptoss.constraint.for_turn) that opts' format and
-- max_reasoning_tokens (else the session's) and a reasoning of "none" ask for; nil when none
-- does. Raises "<fn>: ..." on a bad format or budget.
local function reply_plan(fn, self, opts)
  local format = opts.format
  if format == nil then format = self.format end
  local budget = opts.max_reasoning_tokens or self.max_reasoning_tokens
  if format == nil and budget == nil and not self.no_reasoning then return nil end
  local ok, plan = pcall(constraint.for_turn, self.tokenizer, { format = format, max_reasoning_tokens = budget,
    reasoning_effort = self.no_reasoning and "none" or nil })
  if not ok then error((util.bare(plan):gsub("^constraint%.for_turn: ", fn .. ": ")), 0) end
  return plan
end

--- A chat session: chat.new{replica =, tokenizer =, slot = 1, system = {...}, developer =
-- {instructions =}, sampling = {temperature = 1, top_p = 1, seed =}, tools = {name =
-- {description =, parameters =, fn =}}, max_tokens = n} or, instead of replica and
-- sampling, step = function(ids, position) -> id (a scripted model). See docs/chat.md.
function chat.new(opts)
  if type(opts) ~= "table" then error(("chat.new: options must be a table (got %s)"):format(type(opts)), 2) end
  util.check_known("chat.new", opts, OPTIONS, "option", 2)
  if (opts.replica == nil) == (opts.step == nil) then
    error("chat.new: give replica (a gptoss replica) or step (a function), one of them", 2)
  end
  if not util.is_a(opts.tokenizer, "gptoss.tokenizer") then
    error(("chat.new: tokenizer must be a gptoss tokenizer (got %s)"):format(util.kind(opts.tokenizer)), 2)
  end
  check_limit("chat.new", opts.max_tokens, 2)
  if opts.on_overflow ~= nil and not util.listed(OVERFLOWS, opts.on_overflow) then
    error(("chat.new: on_overflow must be 'error' or 'drop_oldest' (got %s)"):format(util.quoted(opts.on_overflow)), 2)
  end
  local self = setmetatable({ tokenizer = opts.tokenizer, max_tokens = opts.max_tokens, held = {},
    ctx = math.huge, on_overflow = opts.on_overflow or "error" }, Session)
  local r = opts.replica
  if r then
    if not util.is_a(r, "gptoss.replica") then
      error(("chat.new: replica must be a gptoss replica (got %s)"):format(util.kind(r)), 2)
    end
    local slot = opts.slot or 1
    if math.type(slot) ~= "integer" or slot < 1 or slot > r.slots then
      error(("chat.new: slot must be an integer in 1..%d (got %s)"):format(r.slots, tostring(slot)), 2)
    end
    local sampling = opts.sampling or DEFAULT_SAMPLING
    if type(sampling) ~= "table" then
      error(("chat.new: sampling must be a table (got %s)"):format(type(sampling)), 2)
    end
    local ok, err = pcall(r.sampling, r, slot, sampling)
    if not ok then error("chat.new: sampling: " .. util.bare(err), 2) end
    -- the slot starts empty: what it held before is not this conversation
    r:reset(slot)
    self.replica, self.slot, self.sampling, self.ctx, self.step = r, slot, sampling, r.ctx, replica_step(r, slot)
    holders[r] = holders[r] or {}
    holders[r][slot] = self
  else
    if type(opts.step) ~= "function" then
      error(("chat.new: step must be a function (got %s)"):format(type(opts.step)), 2)
    end
    for _, k in ipairs { "slot", "sampling" } do
      if opts[k] ~= nil then error(("chat.new: %s is for a replica; a step chooses its own ids"):format(k), 2) end
    end
    self.step = opts.step
  end
  local declared
  declared, self.tools = chat_tools.declare(opts.tools or {})
  self.format, self.max_reasoning_tokens = opts.format, opts.max_reasoning_tokens
  self.no_reasoning = type(opts.system) == "table" and opts.system.reasoning == "none"
  local ok, plan = pcall(reply_plan, "chat.new", self, {})
  if not ok then error(plan, 2) end
  self.plan = plan
  local messages
  ok, messages = pcall(preamble, opts, declared, self.tokenizer)
  if not ok then error("chat.new: " .. messages, 2) end
  self.messages = messages
  return self
end

-- Feeds ids at position pos (truncating the slot there), keeps self.held in step with the
-- slot and returns the id the step chose. A replica's slot may no longer hold what the
-- session fed it: r:reset or r:step by a tool, a callback or between asks, or another
-- session made on the slot. A length other than #held or another holder tells; the
-- session's ids up to pos are then fed again from position 0, with its own sampling where
-- another session set its own (r:reset keeps a slot's). So are they where the slot cannot
-- go back to pos (a GPU slot whose windowed rings no longer hold the keys before it).
local function feed(self, ids, pos, stats, matcher)
  local r, slot = self.replica, self.slot
  if r and (holders[r][slot] ~= self or r:length(slot) ~= #self.held or pos < r:rewind_limit(slot)) then
    if holders[r][slot] ~= self then
      r:sampling(slot, self.sampling)
      holders[r][slot] = self
    end
    ids = table.move(ids, 1, #ids, pos + 1, table.move(self.held, 1, pos, 1, {}))
    stats.prefilled, pos = stats.prefilled + pos, 0
  end
  local id, vocab = self.step(ids, pos, matcher), self.tokenizer.vocab_size
  if math.type(id) ~= "integer" or id < 0 or id >= vocab then
    error(("session:ask: step returned %s, not a token id (0..%d)"):format(tostring(id), vocab - 1), 0)
  end
  local held = self.held
  for i = #held, pos + 1, -1 do held[i] = nil end
  table.move(ids, 1, #ids, pos + 1, held)
  return id
end

-- Removes the oldest turn, a user message and what follows it up to the next, from
-- messages[first] (the first after the system and developer messages); returns how many
-- messages went. It never reaches messages[current], the ask's own user message.
local function drop_turn(messages, first, current)
  local last = first
  while last + 1 < current and messages[last + 1].role ~= "user" do last = last + 1 end
  local n = last - first + 1
  table.move(messages, last + 1, #messages + n, first)
  return n
end

-- The conversation's ids for the next reply, `current` the index of the ask's user message.
-- On overflow "drop_oldest", the oldest turns go while the rendering leaves the reply less
-- than `room` ids and a turn before the ask's is left: on_drop(turns, ids) tells; whatever
-- on_overflow, a rendering that fills the context raises. Returns the ids and current.
local function fit(self, current, room, opts, stats)
  local messages = self.messages
  local ids = harmony.render_ids(messages, self.tokenizer)
  local first, dropped = 1, 0
  while messages[first].role == "system" or messages[first].role == "developer" do first = first + 1 end
  while self.on_overflow == "drop_oldest" and #ids + room > self.ctx and first < current do
    current = current - drop_turn(messages, first, current)
    dropped = dropped + 1
    ids = harmony.render_ids(messages, self.tokenizer)
  end
  if dropped > 0 then
    stats.dropped = stats.dropped + dropped
    if opts.on_drop then opts.on_drop(dropped, #ids) end
  end
  if #ids >= self.ctx then
    error(("session:ask: the conversation is %d tokens%s, the replica's context %d"):format(#ids,
      self.on_overflow == "drop_oldest" and " with no older turn left to drop" or "", self.ctx), 0)
  end
  return ids, current
end

-- One reply: the conversation fitted to the context, only what the slot does not hold fed,
-- then ids decoded until a stop id, `budget` ids, a full context or opts.cancel(), under
-- plan's constraints when given (gptoss.constraint). Returns how it ended ("return",
-- "call", "endoftext", "end": a format's final message ended so, "length", "context",
-- "cancelled"), the parsed messages and `current` after fit.
local function reply(self, current, budget, opts, stats, plan)
  local ids
  ids, current = fit(self, current, math.min(budget, self.ctx // REPLY_SHARE), opts, stats)
  local tracker, prefill = plan and plan:new(), plan and plan.prefill or {}
  table.move(prefill, 1, #prefill, #ids + 1, ids)
  -- the longest common prefix; at least one id is fed, to have the next one chosen
  local held, keep = self.held, 0
  while keep < #held and keep < #ids - 1 and held[keep + 1] == ids[keep + 1] do keep = keep + 1 end
  -- penalties count the ids of this reply: setting the slot's sampling again starts their count
  local r, sampling = self.replica, self.sampling
  if r and holders[r][self.slot] == self and (sampling.presence_penalty or sampling.frequency_penalty) then
    r:sampling(self.slot, sampling)
  end
  local next_id = feed(self, table.move(ids, keep + 1, #ids, 1, {}), keep, stats, tracker and tracker:matcher())
  stats.prefilled = stats.prefilled + #ids - keep

  -- lenient: a reply that slips out of the format is still shown and kept
  local parser = harmony.parser(self.tokenizer, { role = "assistant", strict = false })
  local on_text, cancel = opts.on_text, opts.cancel
  local open -- the start event of the message being decoded
  local function handle(events)
    for _, e in ipairs(events) do
      if e.type == "start" then
        open = e
        if e.not_harmony and opts.on_not_harmony then opts.on_not_harmony() end
      elseif e.type == "text" and on_text and not open.recipient then
        on_text(e.text, open.channel)
      end
    end
  end
  for _, id in ipairs(prefill) do handle(parser:push(id)) end
  local n, finish = 0, nil
  while true do
    n = n + 1
    handle(parser:push(next_id))
    local forced = tracker and tracker:push(next_id) or {}
    for _, id in ipairs(forced) do handle(parser:push(id)) end
    finish = STOPS[next_id] or (tracker and tracker.finished and "end") or (n == budget and "length")
      or (#self.held + 1 + #forced > self.ctx and "context") or (cancel and cancel() and "cancelled") or nil
    if finish then break end
    next_id = feed(self, { next_id, table.unpack(forced) }, #self.held, stats, tracker and tracker:matcher())
  end
  stats.tokens = stats.tokens + n
  handle(parser:finish())
  return finish, parser.messages, current
end

-- The turn itself, for ask: the user's text appended, then replies decoded and tools
-- called until the model answers; returns the answer and stats as ask does.
local function converse(self, text, opts, limit, plan)
  local messages = self.messages
  messages[#messages + 1] = harmony.user(text)
  local stats, started = { tokens = 0, prefilled = 0, dropped = 0 }, gptoss.clock()
  local current, finish, replied, calling = #messages, nil, nil, nil
  repeat
    finish, replied, current = reply(self, current, limit - stats.tokens, opts, stats, plan)
    table.move(replied, 1, #replied, #messages + 1, messages)
    -- a <|call|> ending a message without a recipient ends the ask: nothing to call
    calling = finish == "call" and #replied > 0 and replied[#replied].recipient ~= nil
    if calling then
      messages[#messages + 1] = chat_tools.call(self.tools, replied[#replied], opts.on_tool)
      if stats.tokens == limit then finish, calling = "length", false end
    end
  until not calling
  stats.finish, stats.seconds = finish, gptoss.clock() - started
  stats.tok_per_s = stats.seconds > 0 and stats.tokens / stats.seconds or 0
  local answer
  for _, m in ipairs(replied) do
    if m.channel == "final" then answer = m.content end
  end
  return answer, stats
end

--- Appends a user turn and decodes the reply, calling function tools until the model
-- answers. opts: on_text(delta, channel) for each text delta of the assistant's messages
-- (not tool calls; channel "final", "analysis", "commentary" or nil), on_tool(recipient,
-- arguments, result) after each tool call, on_drop(turns, ids) when on_overflow
-- "drop_oldest" dropped turns, on_not_harmony() when the reply is not in the format,
-- cancel() polled after each id (true ends the reply, finish "cancelled"), max_tokens (ids
-- decoded in this ask, default the session's, else until the context is full). Returns the
-- final answer (nil when the reply has no final message) and {tokens =, prefilled =,
-- dropped =, seconds =, tok_per_s =, finish =}. Refused while the session answers (from a
-- tool, a callback or the step); an ask that raises leaves session.messages as it found
-- them.
function Session:ask(text, opts)
  if getmetatable(self) ~= Session then
    error(("session:ask: expected a chat session, session:ask(text) (got %s)"):format(util.kind(self)), 2)
  end
  if answering[self] then
    error("session:ask: this session is already answering (called from a tool or callback?)", 2)
  end
  if type(text) ~= "string" then
    error(("session:ask: text must be a string (got %s)"):format(type(text)), 2)
  end
  opts = util.options("session:ask", opts, ASK_OPTIONS, 2)
  for _, k in ipairs(CALLBACKS) do
    if opts[k] ~= nil and type(opts[k]) ~= "function" then
      error(("session:ask: %s must be a function (got %s)"):format(k, type(opts[k])), 2)
    end
  end
  check_limit("session:ask", opts.max_tokens, 2)
  local plan = self.plan
  if opts.format ~= nil or opts.max_reasoning_tokens ~= nil then
    local ok, made = pcall(reply_plan, "session:ask", self, opts)
    if not ok then error(made, 2) end
    plan = made
  end
  local messages = self.messages
  local before = table.move(messages, 1, #messages, 1, {})
  answering[self] = true
  local ok, answer, stats = pcall(converse, self, text, opts, opts.max_tokens or self.max_tokens or math.huge, plan)
  answering[self] = nil
  if not ok then
    -- the history as it was, dropped turns included; held stays what the slot holds, the
    -- cut reply included
    for i = #messages, #before + 1, -1 do messages[i] = nil end
    table.move(before, 1, #before, 1, messages)
    error(answer, 0)
  end
  return answer, stats
end

--- Draws from here on with a new random seed, when the session's sampling gives none (a
-- conversation started over would otherwise draw the same replies at the same positions);
-- a session with a seed, or of a step function, keeps its draws.
function Session:fresh_draws()
  if self.replica and self.sampling.seed == nil and holders[self.replica][self.slot] == self then
    self.replica:sampling(self.slot, self.sampling)
  end
end

return chat
