--- gptoss.chat_tools (internal, gptoss.chat's): function tools declared in Lua, and the
-- calls a reply ends in answered (docs/chat.md#function-tools).
local harmony = require "gptoss.harmony"
local util = require "gptoss.util"
local json = require "dkjson"

local chat_tools = {}

local TOOL_FIELDS = { "description", "parameters", "fn" }
-- How deep a tool call's arguments may nest: dkjson recurses once a level (Lua's stack
-- overflows some 66000 levels down), and a model writes "[[[[" as easily as anything.
local MAX_DEPTH = 100

--- Function tools {name = {description=, parameters=, fn=}} as harmony's developer tools
-- (sorted by name: Lua tables keep no order) and the name -> fn table; errors name chat.new
-- and blame its caller.
function chat_tools.declare(tools)
  if type(tools) ~= "table" then
    error(("chat.new: tools must be a table {name = {description=, parameters=, fn=}} (got %s)")
      :format(type(tools)), 3)
  end
  local names, fns = {}, {}
  for name, t in pairs(tools) do
    local where = ("chat.new: tools.%s"):format(tostring(name))
    if type(name) ~= "string" or not name:find("^[%w_]+$") then
      error(("chat.new: tools: a tool's name must be letters, digits and _ (got %s)"):format(tostring(name)), 3)
    end
    if type(t) ~= "table" then error(("%s must be a table (got %s)"):format(where, type(t)), 3) end
    util.check_known(where, t, TOOL_FIELDS, "field", 3)
    if type(t.fn) ~= "function" then error(("%s: fn must be a function (got %s)"):format(where, type(t.fn)), 3) end
    names[#names + 1], fns[name] = name, t.fn
  end
  table.sort(names)
  local declared = {}
  for i, name in ipairs(names) do
    declared[i] = { name = name, description = tools[name].description, parameters = tools[name].parameters }
  end
  return declared, fns
end

-- True when arrays and objects nest deeper than MAX_DEPTH in JSON text. Escapes go first,
-- so that no string holds a quote: strings then go whole, their brackets being no nesting.
local function too_deep(text)
  local depth = 0
  for c in text:gsub("\\.", ""):gsub('"[^"]*"', ""):gmatch("[%[{%]}]") do
    depth = depth + ((c == "[" or c == "{") and 1 or -1)
    if depth > MAX_DEPTH then return true end
  end
  return false
end

-- JSON's name for what dkjson decoded (it marks objects and arrays by their metatable).
local function json_type(v)
  if v == nil then return "null" end
  local mt = type(v) == "table" and getmetatable(v)
  return mt and mt.__jsontype or type(v)
end

-- A call's arguments: its content decoded as a JSON object ({} when empty); raises why not.
local function arguments(content)
  if not content:find("%S") then return {} end
  if too_deep(content) then error(("the arguments nest deeper than %d levels"):format(MAX_DEPTH), 0) end
  local args, pos, err = json.decode(content)
  local after = not err and content:find("%S", pos)
  local why = err or (json_type(args) ~= "object" and "got " .. json_type(args))
    or (after and ("text after it at character %d"):format(after))
  if why then error(("the arguments are not a JSON object (%s)"):format(why), 0) end
  return args
end

--- The tool message answering a call (fns: name -> fn, as declare returns them): the tool's result (a string as it is, anything else
-- as JSON) or "error: ..." for an unknown tool, arguments that are not a JSON object or a
-- tool that raised, so that the model reads what went wrong. The arguments are decoded
-- inside the same boundary as the tool runs: whatever the model wrote, the ask goes on.
function chat_tools.call(fns, m, on_tool)
  local name = m.recipient:match("^functions%.(.+)$")
  local fn = name and fns[name]
  local result
  if not fn then
    result = ("error: unknown tool '%s'"):format(m.recipient)
  else
    local ok, value = pcall(function() return fn(arguments(m.content)) end)
    if ok and type(value) ~= "string" then ok, value = pcall(json.encode, value) end
    result = ok and value or "error: " .. util.bare(value)
  end
  if on_tool then on_tool(m.recipient, m.content, result) end
  return harmony.tool(m.recipient, result, { channel = "commentary", recipient = "assistant" })
end

return chat_tools
