/* libFuzzer target: gptoss.json_order, which walks a request body's text
 * beside its decoded tables (gptoss serve's schemas keep their properties'
 * order). Every input that lua-cjson decodes is noted and each of its
 * objects asked for its keys: the walk must neither fail nor lose its
 * place, so every object's order lists exactly the keys its table has
 * (a key given twice once). */
#include "fuzz_lua.h"

const char fuzz_lua_driver[] =
    "local cjson = require 'cjson'\n"
    "local json_order = require 'gptoss.json_order'\n"
    "local function check(t, depth)\n"
    "  if type(t) ~= 'table' or depth > 400 then return end\n"
    "  local keys = json_order.keys(t)\n"
    "  if keys then\n"
    "    local listed = {}\n"
    "    for _, k in ipairs(keys) do\n"
    "      if listed[k] then error('json_order: key ' .. k .. ' listed twice', 0) end\n"
    "      listed[k] = true\n"
    "      if t[k] == nil then error('json_order: key ' .. k .. ' is not in its object', 0) end\n"
    "    end\n"
    "    for k in pairs(t) do\n"
    "      if not listed[k] then error('json_order: key ' .. tostring(k) .. ' missing from the order', 0) end\n"
    "    end\n"
    "  end\n"
    "  for _, v in pairs(t) do check(v, depth + 1) end\n"
    "end\n"
    "return function(path, data)\n"
    "  local ok, value = pcall(cjson.decode, data)\n"
    "  if not ok or type(value) ~= 'table' then return end\n"
    "  json_order.note(data, value)\n"
    "  check(value, 0)\n"
    "end\n";
