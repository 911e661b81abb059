/* libFuzzer target: logits files as lua/gptoss/checker.lua reads them
 * (checker.read, text and f32), then what the values feed: checker.compare
 * of the values with themselves (a match unless one is NaN), and
 * checker.write in the same format read back as the same values. */
#include "fuzz_lua.h"

const char fuzz_lua_driver[] =
    "local checker = require 'gptoss.checker'\n"
    "return function(path, data)\n"
    "  for _, format in ipairs { 'text', 'f32' } do\n"
    "    local ok, values = fuzz.call('checker.read', checker.read, path, data, format)\n"
    "    if ok then\n"
    "      local nan = false\n"
    "      for i = 1, #values do\n"
    "        if math.type(values[i]) ~= 'float' then error(format .. ': value ' .. i .. ' is no float', 0) end\n"
    "        nan = nan or values[i] ~= values[i]\n"
    "      end\n"
    "      local r = checker.compare(values, values)\n"
    "      if r.ok == nan or r.count ~= #values then\n"
    "        error(format .. ': compared with themselves: ' .. r.summary, 0)\n"
    "      end\n"
    "      local copy = path .. '.out'\n"
    "      checker.write(copy, values, format)\n"
    "      local again = checker.read(copy, format)\n"
    "      os.remove(copy)\n"
    "      if #again ~= #values then error(format .. ': the count changed through write', 0) end\n"
    "      for i = 1, #values do\n"
    "        local a, b = values[i], again[i]\n"
    "        if a ~= b and (a == a or b == b) then error(format .. ': value ' .. i .. ' changed through write', 0) end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n";
