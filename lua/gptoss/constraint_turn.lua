--- gptoss.constraint_turn (gptoss.constraint's): a turn's plan and the tracker of one
-- sequence's reply (docs/structured.md#harmony-turns). The tracker reads the reply's ids
-- through a lenient harmony parser and keeps the matcher the next id draws under: the final
-- channel's message under the response format (ended by <|return|> or <|end|>), a tool
-- call's arguments under its schema (ended by <|call|>), nothing elsewhere. It forces ids
-- where the plan says: the final channel's header once the reasoning budget is spent, and,
-- when a tool call is required, the call's header after the analysis.
local gptoss = require "gptoss"
local harmony = require "gptoss.harmony"

local constraint_turn = {}

local special = harmony.special
local FIRST_SPECIAL = special.startoftext -- the lowest special id: every id below it is text
local NO_IDS = {} -- observe's answer when nothing is forced (never written to)

-- The ids of harmony text whose specials are spelled "<|name|>".
local function ids_of(tokenizer, text)
  local ids, at = {}, 1
  while at <= #text do
    local s, e, name = text:find("<|(%w+)|>", at)
    local plain = text:sub(at, (s or #text + 1) - 1)
    local encoded = plain ~= "" and tokenizer:encode(plain, { mode = "o200k" }) or {}
    table.move(encoded, 1, #encoded, #ids + 1, ids)
    if not s then break end
    ids[#ids + 1] = assert(special[name], name)
    at = e + 1
  end
  return ids
end

-- a function call's header up to the tool's name, which a matcher of the names then draws
local CALL_HEADER = "<|channel|>commentary to=functions."

local Plan = {}
Plan.__index = Plan

--- A plan from spec {final = grammar or nil, tools = {name = grammar of its arguments},
-- required = names of which one must be called or nil, budget = reasoning ids or nil,
-- no_reasoning = true: the final channel (or the required call) at once,
-- developer_section = text or nil} (gptoss.constraint.for_turn checks the options).
function constraint_turn.plan(tokenizer, spec)
  local p = setmetatable({ tokenizer = tokenizer, final = spec.final, tools = spec.tools, required = spec.required,
    budget = spec.budget, developer_section = spec.developer_section }, Plan)
  -- whether a tracker has anything to do (else the prefill alone makes the turn)
  p.constrains = spec.final ~= nil or next(spec.tools) ~= nil or spec.required ~= nil or spec.budget ~= nil
  p.final_end_ids = { special["return"], special["end"] }
  local at_once = spec.no_reasoning or spec.budget == 0
  if p.required then
    local names = {}
    for i, name in ipairs(p.required) do names[i] = name:gsub("%-", "\\-") end
    p.names = gptoss.grammar.regex("(" .. table.concat(names, "|") .. ")")
    -- the analysis may not end the turn: it ends in <|end|>, and the call follows
    p.analysis = gptoss.grammar.regex("[\\s\\S]*")
    p.any_object = gptoss.grammar.json_schema { type = "object" } -- the arguments of a tool that is not strict
    p.prefill = ids_of(tokenizer, at_once and CALL_HEADER or "<|channel|>analysis<|message|>")
    p.forced_after_reasoning = ids_of(tokenizer, "<|end|><|start|>assistant" .. CALL_HEADER)
    p.forced_after_analysis = ids_of(tokenizer, "<|start|>assistant" .. CALL_HEADER)
  else
    p.prefill = at_once and ids_of(tokenizer, "<|channel|>final<|message|>") or {}
    p.forced_after_reasoning = ids_of(tokenizer, "<|end|><|start|>assistant<|channel|>final<|message|>")
  end
  p.json_message = ids_of(tokenizer, "json<|message|>")
  return p
end

local Tracker = {}
Tracker.__index = Tracker

--- A tracker of one sequence's reply, which starts after "<|start|>assistant" and the plan's
-- prefill (both fed already).
function Plan:new()
  local parser = harmony.parser(self.tokenizer, { role = "assistant", strict = false })
  local t = setmetatable({ plan = self, parser = parser, reasoning = 0, finished = false, in_message = false },
    Tracker)
  t:force(self.prefill)
  return t
end

--- The matcher the next id draws under, or nil (free).
function Tracker:matcher()
  return self.m
end

-- The next ids draw under grammar (what they are: kind), ended by one of end_ids.
function Tracker:open(kind, grammar, end_ids)
  self.kind, self.m, self.taken = kind, grammar:matcher(self.plan.tokenizer, { end_ids = end_ids }), 0
end

function Tracker:close()
  self.kind, self.m = nil, nil
end

-- What a message's start opens: the final channel's format, a tool's arguments, a required
-- call's analysis.
function Tracker:started(e)
  local p = self.plan
  local tool = e.recipient and e.recipient:match("^functions%.(.+)$")
  if e.channel == "final" and p.final then
    self.in_final = true
    self:open("final", p.final, p.final_end_ids)
  elseif e.channel == "final" then
    self.in_final = true
  elseif tool and p.tools[tool] then
    self:open("args", p.tools[tool], { special.call })
  elseif tool and p.required then
    self:open("args", p.any_object, { special.call })
  elseif e.channel == "analysis" and p.required then
    self:open("analysis", p.analysis, { special["end"] })
  end
end

-- The parser's events for id, acted on; returns ids to force after it. Inside a message a
-- text id makes only text events, which a tracker does not act on: the parser is not asked,
-- so that a structured id is not decoded twice (the choice's own parser decodes it).
function Tracker:observe(id)
  if self.in_message and id < FIRST_SPECIAL then return NO_IDS end
  local forced = NO_IDS
  for _, e in ipairs(self.parser:push(id)) do
    if e.type == "start" then
      self.in_message = true
      self:started(e)
    elseif e.type == "end" then
      local was = self.kind
      self.in_message = false
      self:close()
      if e.stop == "return" or e.stop == "call" or e.stop == "endoftext" or (was == "final" and e.stop == "end") then
        self.finished = true
      elseif was == "analysis" then
        forced = self.plan.forced_after_analysis
      end
    end
  end
  return forced
end

-- Feeds forced ids to the tracker as if drawn; a required call's header opens its names.
function Tracker:force(ids)
  for _, id in ipairs(ids) do self:observe(id) end
  if self.plan.required and ids[#ids] ~= special.message then
    self:open("name", self.plan.names, { special.constrain })
  end
  return ids
end

--- After each drawn id: the matcher takes it where the step did not (a scripted step),
-- refusing what it does not allow; returns the ids to feed after it (forced), possibly
-- none, which the tracker has taken too.
function Tracker:push(id)
  local m = self.m
  if m then
    self.taken = self.taken + 1
    if m.tokens < self.taken then
      local ok, why = m:accept(id)
      if not ok then error(("the reply's %s does not fit its constraint: %s"):format(self.kind, why), 0) end
    end
  end
  local forced = self:observe(id)
  if self.kind == "name" and m.ended then
    self:close()
    forced = self.plan.json_message
    for _, f in ipairs(forced) do self:observe(f) end
    return forced
  end
  if #forced > 0 then return self:force(forced) end
  local p = self.plan
  if p.budget and not self.in_final and not self.finished and (not self.m or self.kind == "analysis") then
    self.reasoning = self.reasoning + 1
    if self.reasoning >= p.budget then
      self:close()
      self.reasoning = -math.huge -- spent once
      return self:force(p.forced_after_reasoning)
    end
  end
  return {}
end

return constraint_turn
