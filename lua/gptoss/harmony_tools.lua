--- gptoss.harmony_tools (internal, gptoss.harmony's): the "# Tools" section of a system or
-- developer message: each namespace's tools, their JSON-schema-like parameter tables written
-- as harmony's TypeScript-like declarations (docs/harmony.md#function-tools).
local util = require "gptoss.util"

local harmony_tools = {}

local quoted = util.quoted

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
-- `path` (here and below) holds the schemas being declared, from the parameters down.
local function variant(v, indent, skip_description, where, path)
  local text = with_null(typescript(v, indent .. "   ", where, path), v)
  local comments = {}
  if type(v.description) == "string" and not skip_description then comments[#comments + 1] = v.description end
  if v.default ~= nil then comments[#comments + 1] = "default: " .. default_text(v, where) end
  if #comments > 0 then text = text .. " // " .. table.concat(comments, " ") end
  return text
end

local function object_type(schema, indent, where, path)
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
        out[#out + 1] = indent .. " | " .. variant(v, indent, i == 1 and above, at, path) .. "\n"
      end
      out[#out + 1] = indent .. ",\n"
    else
      local declared = with_null(typescript(p, indent .. "    ", at, path), p)
      out[#out + 1] = ("%s%s%s: %s,"):format(indent, name, mark, declared)
      if p.default ~= nil then out[#out + 1] = " // default: " .. default_text(p, at) end
      out[#out + 1] = "\n"
    end
  end
  out[#out + 1] = indent .. "}"
  return table.concat(out)
end

local SCALARS = { integer = "number", number = "number", boolean = "boolean", null = "null" }

-- The declaration of a schema that is not inside itself (see typescript).
local function declaration(schema, indent, where, path)
  if type(schema.oneOf) == "table" then
    local out = {}
    for _, v in ipairs(schema.oneOf) do
      out[#out + 1] = "\n" .. indent .. " | " .. variant(v, indent, false, where, path)
    end
    return table.concat(out)
  end
  local t = schema.type
  if type(t) == "table" and #t > 0 then
    local names = {}
    for i, name in ipairs(t) do names[i] = SCALARS[name] or name end
    return table.concat(names, " | ")
  elseif t == "object" then
    return object_type(schema, indent, where, path)
  elseif t == "string" then
    if not is_enum(schema) then return "string" end
    local members = {}
    for _, m in ipairs(schema.enum) do members[#members + 1] = ('"%s"'):format(m) end
    return table.concat(members, " | ")
  elseif t == "array" then
    return schema.items and typescript(schema.items, indent, where, path) .. "[]" or "Array<any>"
  end
  return SCALARS[t] or "any"
end

-- The declaration of a schema, as harmony's renderer writes it (docs/harmony.md#function-tools).
-- A schema inside itself (Lua tables can cycle, JSON cannot) is an error: declaring it
-- would recurse, its indentation growing, until memory runs out.
function typescript(schema, indent, where, path)
  if type(schema) ~= "table" then
    error(("%s: schema must be a table (got %s)"):format(where, type(schema)), 0)
  end
  if path[schema] then error(("%s: the schema contains itself"):format(where), 0) end
  path[schema] = true
  local text = declaration(schema, indent, where, path)
  path[schema] = nil
  return text
end

--- A copy of schema, a parameters table that does not contain itself, in which each object
-- this module declares lists its properties in property_order as keys(properties) gives them
-- (a key the table lacks left out; nil: the object as it is): how a caller whose schemas keep
-- their key order elsewhere (gptoss serve's decoded JSON, gptoss.json_order) has it rendered.
function harmony_tools.ordered(schema, keys)
  if type(schema) ~= "table" then return schema end
  local copy = {}
  for k, v in pairs(schema) do copy[k] = v end
  local properties = schema.properties
  if type(properties) == "table" then
    copy.properties = {}
    for name, p in pairs(properties) do copy.properties[name] = harmony_tools.ordered(p, keys) end
    local order = keys(properties)
    if order then
      copy.property_order = {}
      for _, name in ipairs(order) do
        if properties[name] ~= nil then copy.property_order[#copy.property_order + 1] = name end
      end
    end
  end
  copy.items = harmony_tools.ordered(schema.items, keys)
  if type(schema.oneOf) == "table" then
    copy.oneOf = {}
    for i, v in ipairs(schema.oneOf) do copy.oneOf[i] = harmony_tools.ordered(v, keys) end
  end
  return copy
end

--- "# Tools" and one "## name" section per namespace {name=, description=, tools={...}};
-- errors name `where`.
function harmony_tools.section(namespaces, where)
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
          local params = typescript(tool.parameters, "", ("%s: tool '%s': parameters"):format(at, tool.name), {})
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

return harmony_tools
