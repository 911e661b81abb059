--- gptoss.serve_structured (internal, gptoss.serve's): a chat body's structured-output fields
-- read into a turn's plan (gptoss.constraint.for_turn, docs/structured.md#harmony-turns):
-- response_format, each tool's strict, tool_choice, reasoning_effort "none" and this server's
-- max_reasoning_tokens (docs/serve.md#structured-outputs). The plan gives the developer
-- message's "# Response Formats" section and the ids prefilled after "<|start|>assistant";
-- when it constrains anything, each choice's sequence carries a tracker of it (seq.turn,
-- gptoss.runner's), which holds the final channel to the format and a strict tool's arguments
-- to its parameters, and makes a required call.
local cjson = require "cjson"
local constraint = require "gptoss.constraint"
local dkjson = require "dkjson"
local json_order = require "gptoss.json_order"
local serve_openai = require "gptoss.serve_openai"
local util = require "gptoss.util"

local serve_structured = {}

local fail, is_null = serve_openai.fail, serve_openai.is_null

-- JSON schema keywords whose value is a list, and those whose value maps names to schemas.
local LIST_KEYWORDS = { required = true, enum = true, allOf = true, anyOf = true, oneOf = true, prefixItems = true,
  examples = true, type = true }
local MAP_KEYWORDS = { properties = true, patternProperties = true, ["$defs"] = true, definitions = true,
  dependentSchemas = true }
local OBJECT, ARRAY = { __jsontype = "object" }, { __jsontype = "array" }

--- A decoded JSON schema (cjson's) as dkjson writes it back: the decoder gives {} and []
-- alike as an empty table, so each table is marked by where it stands ("required": [] a
-- list, "properties": {} an object), an object keeps its keys in the body's order
-- (gptoss.json_order), cjson's null becomes dkjson's and a whole number an integer (10, not
-- 10.0: "maxLength" wants one). `role` (internal): "list" or "map" for a keyword's value,
-- nil for a schema.
function serve_structured.schema(v, role)
  if v == cjson.null then return dkjson.null end
  if math.type(v) == "float" then return math.tointeger(v) or v end -- cjson reads 10 as 10.0
  if type(v) ~= "table" then return v end
  local is_array = role == "list" or #v > 0
  local order = not is_array and json_order.keys(v)
  local out = setmetatable({}, is_array and ARRAY or order and { __jsontype = "object", __jsonorder = order } or OBJECT)
  for k, x in pairs(v) do
    out[k] = serve_structured.schema(x, role == nil and (LIST_KEYWORDS[k] and "list" or MAP_KEYWORDS[k] and "map")
      or nil)
  end
  return out
end

-- Every string key of the tables in v, into order (once each): sorted, the key order of a
-- schema's objects that came from no body (a caller's table), so that it gives one prompt
-- and one grammar.
local function sorted_keys(v, set, order)
  if type(v) ~= "table" then return order end
  for k, x in pairs(v) do
    if type(k) == "string" and not set[k] then set[k], order[#order + 1] = true, k end
    sorted_keys(x, set, order)
  end
  return order
end

-- A decoded schema's JSON text (param: the field it came from), or nil for none.
local function schema_text(v, param)
  if is_null(v) then return nil end
  local order = sorted_keys(v, {}, {})
  table.sort(order)
  local ok, text = pcall(dkjson.encode, serve_structured.schema(v), { keyorder = order })
  if not ok or type(text) ~= "string" then fail(("'%s' cannot be written back as JSON"):format(param), param) end
  return text
end

-- tool_choice as for_turn takes it: "auto", "none", "required" or {type = "function",
-- function = {name =}}; nil when absent.
local function tool_choice(v)
  if is_null(v) or v == "auto" or v == "none" or v == "required" then return not is_null(v) and v or nil end
  local f = type(v) == "table" and v.type == "function" and v["function"]
  if type(f) ~= "table" or type(f.name) ~= "string" then
    fail("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
      .. "{\"name\": ...}}", "tool_choice")
  end
  return { type = "function", ["function"] = { name = f.name } }
end

local FORMAT_TYPES = { text = true, json_object = true, json_schema = true }

-- response_format as for_turn takes it, its shape checked here so that the 400 names the
-- field; the schema itself is for_turn's to judge.
local function response_format(v)
  if is_null(v) then return nil end
  if type(v) ~= "table" or not FORMAT_TYPES[v.type] then
    fail(("'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
      .. "\"json_schema\", \"json_schema\": {...}} (got type %s)"):format(util.quoted(type(v) == "table" and v.type
      or v)), "response_format")
  end
  if v.type ~= "json_schema" then return { type = v.type } end
  local js = v.json_schema
  if type(js) ~= "table" or type(js.name) ~= "string" or not js.name:find("^[%w_%-]+$") or #js.name > 64 then
    fail("'response_format.json_schema' must be {\"name\": up to 64 letters, digits, _ or -, \"schema\": ...}",
      "response_format")
  end
  if not (is_null(js.description) or type(js.description) == "string") then
    fail("'response_format.json_schema.description' must be a string", "response_format")
  end
  if not (is_null(js.strict) or type(js.strict) == "boolean") then
    fail("'response_format.json_schema.strict' must be a boolean", "response_format")
  end
  local schema = js.schema
  if not (is_null(schema) or type(schema) == "table" and #schema == 0 or type(schema) == "boolean") then
    fail("'response_format.json_schema.schema' must be a JSON schema object", "response_format")
  end
  return { type = "json_schema", json_schema = { name = js.name, schema = schema_text(schema, "response_format"),
    description = not is_null(js.description) and js.description or nil } }
end

-- max_reasoning_tokens (this server's own field): the analysis ids after which the final
-- channel (or a required call) is forced; nil when absent.
local function reasoning_budget(v)
  if is_null(v) then return nil end
  local n = type(v) == "number" and math.tointeger(v)
  if not n or n < 0 then
    fail(("'max_reasoning_tokens' must be an integer >= 0 (got %s)"):format(util.quoted(v)), "max_reasoning_tokens")
  end
  return n
end

-- for_turn's refusal as the 400 naming the field: its "tools[i]" (1-based) as the API's
-- "tools[i - 1]".
local function refused(err)
  local what = util.bare(err):gsub("^constraint%.for_turn: ", "")
  what = what:gsub("^tools%[(%d+)%]", function(i) return ("tools[%d]"):format(tonumber(i) - 1) end)
  local param = what:match("^[%a_]+")
  fail(what, (param == "response_format" or param == "tools" or param == "tool_choice") and param or nil)
end

--- The plan of a chat body's turn (constraint.for_turn's) from its response_format,
-- tool_choice, reasoning_effort and max_reasoning_tokens, and tools, serve_openai's list
-- ({name =, schema =, strict =}, or nil); nil when the body asks for none of it (the
-- turn is then the model's own). Raises the 400 naming the field. plan.constrains says
-- whether each choice needs a tracker (plan:new()).
function serve_structured.plan(body, tools, tokenizer)
  local choice, format = tool_choice(body.tool_choice), response_format(body.response_format)
  local opts = { response_format = format, tool_choice = choice ~= "none" and choice or nil,
    reasoning_effort = body.reasoning_effort == "none" and "none" or nil,
    max_reasoning_tokens = reasoning_budget(body.max_reasoning_tokens) }
  local asked = opts.tool_choice and choice ~= "auto" or format and format.type ~= "text" or opts.reasoning_effort
    or opts.max_reasoning_tokens
  if tools and choice ~= "none" then
    opts.tools = {}
    for i, t in ipairs(tools) do
      opts.tools[i] = { type = "function", ["function"] = { name = t.name, strict = t.strict,
        parameters = t.strict and schema_text(t.schema, "tools") or nil } }
      asked = asked or t.strict
    end
  end
  if not asked then return nil end
  local ok, plan = pcall(constraint.for_turn, tokenizer, opts)
  if not ok then
    if type(plan) == "table" then error(plan, 0) end
    refused(plan)
  end
  return plan
end

return serve_structured
