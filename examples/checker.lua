#!/usr/bin/env lua5.4
-- The logits checker's command line (docs/parity.md#examplescheckerlua): two subcommands.
--   checker.lua dump MODEL [--seed-weights N] --tokens 1,2,3 -o out.f32
--                    [--device cpu|N] [--weights fp32|bf16|mxfp4] [--kv fp32|bf16] [--format text|f32]
--     feeds the tokens at positions 0, 1, ... of one slot of a new replica and writes the
--     logits of the last one (gptoss.checker.dump; the format from the extension unless
--     --format says). MODEL and --device (default: the first GPU, else cpu) as every command
--     names them (gptoss.naming, gptoss.flags); -o is checked before the model is opened.
--   checker.lua compare got.txt expected.txt [--atol 1e-6] [--rtol 1e-5] [--format text|f32]
--     compares a logits file with a reference one, element by element, numpy allclose style
--     (|got - expected| <= atol + rtol * |expected|; lua/gptoss/checker.lua has the file
--     formats), and prints a summary line and, on failure, the first mismatch.
--   checker.lua got.txt expected.txt [...] is compare, as before the subcommands.
-- Exit status: 0 written / all values match, 1 a mismatch (or different lengths), 2 usage,
-- file or model errors.
local argparse = require "argparse"
local gptoss = require "gptoss"
local checker = require "gptoss.checker"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local script = require "gptoss.script"

local COMMANDS = { dump = true, compare = true }

-- "1,2,3": token ids, at least one
local function token_list(s)
  local ids = {}
  for item in (s .. ","):gmatch("([^,]*),") do
    local id = math.tointeger(tonumber(item:match("^%s*(.-)%s*$")))
    if id == nil or id < 0 then
      return nil, ("--tokens: '%s' is not a list of token ids (\"1,2,3\")"):format(s)
    end
    ids[#ids + 1] = id
  end
  return ids
end

local parser = argparse(script.name, "Dumps logits files and compares them, numpy allclose style.")
  :command_target("command")
  :epilog("Without a subcommand, the arguments are compare's: checker.lua got.txt expected.txt.")
local dump = parser:command("dump", "Writes the logits of the last of --tokens, fed at positions 0, 1, ... "
  .. "of a new replica's slot.")
naming.add_model(dump, { old_seed = true })
dump:option("--tokens", "Token ids, the last one's logits written."):argname("<ids>"):convert(token_list)
dump:option("-o --output", "The logits file to write."):argname("<path>")
flags.add_device(dump)
dump:option("--weights", "Weight format (default: the replica's).")
  :choices(gptoss.weight_format_names())
dump:option("--kv", "KV cache precision (default: the replica's).")
  :choices(gptoss.kv_formats())
dump:option("--format", "File format (default: from the extension, .f32/.bin raw fp32, else text).")
  :choices { "text", "f32" }
local compare = parser:command("compare", "Compares a logits file with a reference.")
compare:argument("got", "Logits to check.")
compare:argument("expected", "Reference logits.")
compare:option("--atol", "Absolute tolerance.", "1e-6"):convert(cmdline.non_negative)
compare:option("--rtol", "Relative tolerance (times |expected|).", "1e-5"):convert(cmdline.non_negative)
compare:option("--format", "File format of both files (default: from each extension, .f32/.bin raw fp32).")
  :choices { "text", "f32" }

local argv = table.move(arg, 1, #arg, 1, {})
if not COMMANDS[argv[1]] and argv[1] ~= "-h" and argv[1] ~= "--help" then table.insert(argv, 1, "compare") end
local name = script.name .. (COMMANDS[argv[1]] and " " .. argv[1] or "")

local ok, a = parser:pparse(argv)
if not ok then cmdline.usage_exit(name, a, 2) end
if a.dump then
  if a.tokens == nil then cmdline.usage_exit(name, "--tokens is required", 2) end
  if a.output == nil then cmdline.usage_exit(name, "-o is required: the logits file to write", 2) end
end

-- Feeds every token but the last as one prefill step, then dumps the last one's logits.
local function run_dump()
  cmdline.check_writable("-o", a.output)
  local model = naming.open(a.model, a.seed_weights)
  local tokens = a.tokens
  local r <close> = model:replica { device = flags.one_device(a.device), slots = 1, ctx = #tokens, weights = a.weights, kv = a.kv }
  local n = #tokens - 1
  if n > 0 then
    local slots, positions = {}, {}
    for i = 1, n do slots[i], positions[i] = 1, i - 1 end
    r:step { slots = slots, positions = positions, tokens = table.move(tokens, 1, n, 1, {}) }
  end
  local values = checker.dump(r, a.output, { token = tokens[n + 1], pos = n, format = a.format })
  print(("wrote %d logits of token %d at position %d to %s, from %s"):format(#values, tokens[n + 1], n, a.output,
    tostring(r)))
  return 0
end

local function run_compare()
  local got = checker.read(a.got, a.format)
  local expected = checker.read(a.expected, a.format)
  local result = checker.compare(got, expected, { atol = a.atol, rtol = a.rtol })
  print(result.summary)
  if result.first then print(result.message) end -- a length mismatch is all in the summary
  return result.ok and 0 or 1
end

-- the library raises Lua errors; here they become a message and status 2
local ran, status = pcall(a.dump and run_dump or run_compare)
if not ran then cmdline.exit_with(2, name .. ": " .. cmdline.message(status)) end
os.exit(status)
