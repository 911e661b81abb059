/* libFuzzer target: the course's request and output files as
 * lua/gptoss/requests.lua reads them (requests.read, with the default
 * buffer and a small one; requests.read_output), then what an output file
 * feeds: written back with requests.write and read again, the same ids.
 *
 * Cost cap: requests.read pads a count beyond the prompts with empty ones
 * (up to 2^20 of them), about a microsecond each here; a count line of
 * 2^14 + 1 .. 2^21 is not read, so that one input costs milliseconds (the
 * refusal of counts that need more padding is still reached). */
#include "fuzz_lua.h"

const char fuzz_lua_driver[] =
    "local requests = require 'gptoss.requests'\n"
    "return function(path, data)\n"
    "  local count = tonumber(data:match('^[ \\t\\f\\v]*%+?(%d+)') or '0')\n"
    "  local padding_cost = count > 1 << 14 and count <= 1 << 21\n"
    "  for _, opts in ipairs(padding_cost and {} or { {}, { max_token_length = 2, steps = 3 } }) do\n"
    "    local limit = (opts.max_token_length or 128) * ((opts.steps or 1024) + 1) - 1\n"
    "    local ok, prompts, warnings = fuzz.call('requests.read', requests.read, path, data, opts)\n"
    "    for i = 1, ok and #prompts or 0 do\n"
    "      if type(prompts[i]) ~= 'string' or #prompts[i] > limit then error('read: prompt ' .. i, 0) end\n"
    "    end\n"
    "    for _, w in ipairs(ok and warnings or {}) do\n"
    "      if type(w) ~= 'string' then error('read: a warning is a ' .. type(w), 0) end\n"
    "    end\n"
    "  end\n"
    "  local ok, outputs = fuzz.call('requests.read_output', requests.read_output, path, data)\n"
    "  if not ok then return end\n"
    "  local copy = path .. '.out'\n"
    "  requests.write(copy, outputs)\n"
    "  local again = requests.read_output(copy)\n"
    "  os.remove(copy)\n"
    "  if #again ~= #outputs then error('read_output: the line count changed through write', 0) end\n"
    "  for i = 1, #outputs do\n"
    "    local a, b = outputs[i], again[i]\n"
    "    if #a ~= #b then error('read_output: line ' .. i .. ' changed through write', 0) end\n"
    "    for j = 1, #a do\n"
    "      if math.type(a[j]) ~= 'integer' or a[j] ~= b[j] then\n"
    "        error('read_output: line ' .. i .. ' id ' .. j .. ' changed through write', 0)\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n";
