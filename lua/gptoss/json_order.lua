--- gptoss.json_order (internal, gptoss.serve's): the key order of a decoded JSON text's objects.
-- lua-cjson decodes a request body into Lua tables, which keep no key order, yet a JSON schema
-- in a body writes its properties in the order it lists them (docs/serve.md#structured-outputs).
-- So a decoded body's text is kept, and walked beside its value the first time an order is
-- asked for (most bodies carry no schema: they are never walked); each object's keys are
-- kept here by table, weakly: an order goes with its body.
local cjson = require "cjson"

local json_order = {}

local orders = setmetatable({}, { __mode = "k" }) -- an object -> its keys in order
local unwalked = setmetatable({}, { __mode = "k" }) -- a noted value -> its text
local key_decoder = cjson.new()

-- The position just past the string that opens at pos (text is valid JSON: it was decoded).
local function string_end(text, pos)
  local at = pos + 1
  while true do
    local q = text:find('["\\]', at)
    if text:byte(q) == 34 then return q + 1 end -- '"'; else a backslash and the byte it escapes
    at = q + 2
  end
end

local function skip_space(text, pos) return text:find("[^ \t\n\r]", pos) or #text + 1 end

-- Walks the value whose text opens at pos beside value, its decoded form, keeping the order
-- of each object in it and listing those objects in touched; returns the position just past
-- it. A key given twice keeps its last value, which each of its texts is walked against: the
-- orders an earlier text gave are dropped when the key comes again (an object its last text
-- does not reach then has none, rather than another text's).
local function walk(text, pos, value, touched)
  local open = text:byte(pos)
  if open == 34 then return string_end(text, pos) end
  if open ~= 123 and open ~= 91 then return text:find("[%s,%]}]", pos) or #text + 1 end -- a number or a word
  local is_object, table_value = open == 123, type(value) == "table" and value or nil
  local keys, walked, n = {}, {}, 0 -- walked: a key -> the first and last entries of touched its text added
  pos = skip_space(text, pos + 1)
  while pos <= #text and text:byte(pos) ~= 125 and text:byte(pos) ~= 93 do -- '}' or ']'
    local member, key
    if is_object then
      local after = string_end(text, pos)
      local raw = text:sub(pos + 1, after - 2)
      key = raw:find("\\", 1, true) and key_decoder.decode(text:sub(pos, after - 1)) or raw
      local before = walked[key]
      if before then
        for i = before[1], before[2] do orders[touched[i]] = nil end
      else
        keys[#keys + 1] = key
      end
      member = table_value and table_value[key]
      pos = skip_space(text, skip_space(text, after) + 1) -- past the ':'
    else
      n = n + 1
      member = table_value and table_value[n]
    end
    local first = #touched + 1
    pos = skip_space(text, walk(text, pos, member, touched))
    if key then walked[key] = { first, #touched } end
    if text:byte(pos) == 44 then pos = skip_space(text, pos + 1) end -- ','
  end
  if is_object and table_value then
    orders[table_value] = keys
    touched[#touched + 1] = table_value
  end
  return pos + 1
end

--- Notes value, text's decoded form (text is valid JSON), whose objects' key orders
-- json_order.keys then gives.
function json_order.note(text, value)
  if type(value) == "table" then unwalked[value] = text end
end

--- The keys of t, an object of a noted value, in the order its text gave them; nil for a
-- table of no noted text. The first call walks the texts noted since.
function json_order.keys(t)
  if orders[t] == nil then
    for value, text in pairs(unwalked) do
      unwalked[value] = nil
      walk(text, skip_space(text, 1), value, {})
    end
  end
  return orders[t]
end

return json_order
