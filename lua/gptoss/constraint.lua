--- gptoss.constraint: structured output for a harmony turn (docs/structured.md#harmony-turns).
--
--   constraint.grammar(fn, format)        a grammar from a format: a grammar, a JSON schema
--                                         (a table, or its JSON text)
--   constraint.for_turn(tokenizer, opts)  what one assistant turn needs: the developer
--                                         message's "# Response Formats" section, the ids to
--                                         prefill after "<|start|>assistant", and plan:new(),
--                                         a tracker that starts matchers at the right places
--
-- The tracker (gptoss.constraint_turn) follows the ids of the reply: the analysis channel is
-- free, the final channel's message draws under the response format, a strict tool's
-- arguments under its parameters' schema; a reasoning budget forces the final channel.
local gptoss = require "gptoss"
local json = require "dkjson"
local util = require "gptoss.util"
local constraint_turn = require "gptoss.constraint_turn"

local constraint = {}

-- Grammars compiled from a schema's JSON text, by that text, the COMPILED_KEPT latest:
-- requests that send one schema (a server's clients, typically) share its compile and the
-- masks its matchers have cached (a grammar keeps them per tokenizer; nothing else in it
-- changes with use).
local COMPILED_KEPT = 32
local compiled, compiled_order = {}, {}

local function compile_text(text)
  local g = compiled[text]
  if g then return g end
  g = gptoss.grammar.json_schema(text)
  compiled[text], compiled_order[#compiled_order + 1] = g, text
  if #compiled_order > COMPILED_KEPT then compiled[table.remove(compiled_order, 1)] = nil end
  return g
end

--- A grammar from format: a gptoss grammar as it is, else a JSON schema (a table, a
-- boolean, or its JSON text) compiled (from text: the one compiled before for the same
-- text, among the latest few); raises "<fn>: format: ..." naming what is wrong.
function constraint.grammar(fn, format)
  if util.is_a(format, "gptoss.grammar") then return format end
  local t = type(format)
  if t ~= "table" and t ~= "string" and t ~= "boolean" then
    error(("%s: format must be a grammar or a JSON schema (a table or its JSON text) (got %s)")
      :format(fn, util.kind(format)), 0)
  end
  local ok, g = pcall(t == "string" and compile_text or gptoss.grammar.json_schema, format)
  if not ok then error(("%s: format: %s"):format(fn, util.bare(g):gsub("^json_schema: ", "")), 0) end
  return g
end

-- Every string key of the tables in v, into set.
local function keys_of(v, set)
  if type(v) ~= "table" then return set end
  for k, x in pairs(v) do
    if type(k) == "string" then set[k] = true end
    keys_of(x, set)
  end
  return set
end

-- The schema's JSON text as the developer message shows it: a string as given, a table with
-- its keys sorted (the same prompt for the same schema).
local function schema_text(schema)
  if type(schema) == "string" then return schema end
  local order = {}
  for k in pairs(keys_of(schema, {})) do order[#order + 1] = k end
  table.sort(order)
  return json.encode(schema, { keyorder = order })
end

--- The "# Response Formats" section of a developer message, for formats {{name =,
-- description =, schema =}, ...}, as the harmony format lays it out.
function constraint.response_formats_section(formats)
  local out = { "# Response Formats" }
  for _, f in ipairs(formats) do
    out[#out + 1] = "## " .. f.name
    out[#out + 1] = ("// %s\n%s"):format(f.description or "", schema_text(f.schema))
  end
  return table.concat(out, "\n\n")
end

-- The grammar and section of an OpenAI response_format: {type = "text"} (none), {type =
-- "json_object"} (any object), {type = "json_schema", json_schema = {name =, schema =,
-- description =, strict =}}.
local function response_format(fn, rf)
  if type(rf) ~= "table" then
    error(("%s: response_format must be a table {type = ...} (got %s)"):format(fn, util.kind(rf)), 0)
  end
  if rf.type == "text" then return nil end
  if rf.type == "json_object" then return constraint.grammar(fn, '{"type": "object"}') end
  if rf.type ~= "json_schema" then
    error(("%s: response_format.type must be text, json_object or json_schema (got %s)")
      :format(fn, util.quoted(rf.type)), 0)
  end
  local js = rf.json_schema
  if type(js) ~= "table" or type(js.name) ~= "string" or js.name == "" then
    error(("%s: response_format.json_schema must be {name = a non-empty string, schema = ...}"):format(fn), 0)
  end
  local schema = js.schema == nil and {} or js.schema
  local g = constraint.grammar(fn .. ": response_format.json_schema", schema)
  return g, constraint.response_formats_section { { name = js.name, description = js.description, schema = schema } }
end

-- The tools of an OpenAI request: {name = grammar of its arguments} of the strict ones,
-- and every tool's name in order.
local function tool_grammars(fn, tools)
  local grammars, names = {}, {}
  for i, t in ipairs(tools or {}) do
    local f = type(t) == "table" and t["function"]
    if type(f) ~= "table" or type(f.name) ~= "string" or not f.name:match("^[%w_%-]+$") then
      error(("%s: tools[%d] must be {type = \"function\", function = {name = letters, digits, _ or -, ...}}")
        :format(fn, i), 0)
    end
    local where = ("%s: tools[%d] (%s)"):format(fn, i, f.name)
    if f.strict then grammars[f.name] = constraint.grammar(where, f.parameters == nil and {} or f.parameters) end
    names[#names + 1] = f.name
  end
  return grammars, names
end

-- The tools tool_choice requires a call of, or nil: "auto" / "none" / nil (none required),
-- "required" (any of names), {type = "function", function = {name =}} (that one).
local function required_tools(fn, choice, names)
  if choice == nil or choice == "auto" or choice == "none" then return nil end
  if choice == "required" then
    if #names == 0 then error(fn .. ": tool_choice \"required\" needs tools", 0) end
    return names
  end
  local name = type(choice) == "table" and type(choice["function"]) == "table" and choice["function"].name
  if not util.listed(names, name) then
    error(("%s: tool_choice must be auto, none, required or {type = \"function\", function = {name = one of "
      .. "the tools}} (got %s)"):format(fn, type(choice) == "table" and util.quoted(name) or util.quoted(choice)), 0)
  end
  return { name }
end

local FOR_TURN = { "format", "response_format", "tools", "tool_choice", "reasoning_effort", "max_reasoning_tokens" }

--- What one assistant turn needs: constraint.for_turn(tokenizer, {format = a grammar or
-- schema (Lua), response_format = OpenAI's, tools = OpenAI's list (strict ones constrain
-- their arguments), tool_choice = "auto" | "none" | "required" | {type = "function",
-- function = {name =}}, reasoning_effort = "none" | ..., max_reasoning_tokens = n}).
-- Returns a plan: {developer_section = the "# Response Formats" text or nil, prefill = ids
-- to feed after "<|start|>assistant", final_end_ids, constrains = whether a tracker has
-- anything to do, new = function(plan) -> a tracker
-- (gptoss.constraint_turn) for one sequence}. Raises "constraint.for_turn: ..." on a bad
-- option.
function constraint.for_turn(tokenizer, opts)
  local fn = "constraint.for_turn"
  if not util.is_a(tokenizer, "gptoss.tokenizer") then
    error(("%s: tokenizer must be a gptoss tokenizer (got %s)"):format(fn, util.kind(tokenizer)), 2)
  end
  opts = util.options(fn, opts, FOR_TURN, 2)
  local ok, plan = pcall(function()
    local final, section
    if opts.format ~= nil and opts.response_format ~= nil then
      error(fn .. ": give format or response_format, not both", 0)
    elseif opts.format ~= nil then
      final = constraint.grammar(fn, opts.format)
    elseif opts.response_format ~= nil then
      final, section = response_format(fn, opts.response_format)
    end
    local tools, names = tool_grammars(fn, opts.tools)
    local budget = opts.max_reasoning_tokens
    if budget ~= nil and (math.type(budget) ~= "integer" or budget < 0) then
      error(("%s: max_reasoning_tokens must be an integer >= 0 (got %s)"):format(fn, tostring(budget)), 0)
    end
    if opts.reasoning_effort ~= nil and type(opts.reasoning_effort) ~= "string" then
      error(("%s: reasoning_effort must be a string (got %s)"):format(fn, util.kind(opts.reasoning_effort)), 0)
    end
    return constraint_turn.plan(tokenizer, { final = final, tools = tools,
      required = required_tools(fn, opts.tool_choice, names), budget = budget,
      no_reasoning = opts.reasoning_effort == "none", developer_section = section })
  end)
  if not ok then error(util.bare(plan), 2) end
  return plan
end

return constraint
