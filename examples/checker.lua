#!/usr/bin/env lua5.4
-- Compares a logits file with a reference one, element by element, numpy allclose style
-- (|got - expected| <= atol + rtol * |expected|; see lua/gptoss/checker.lua for the file
-- formats). Prints a summary line and, on failure, the first mismatch.
--   lua5.4 examples/checker.lua got.txt expected.txt [--atol 1e-6] [--rtol 1e-5] [--format text|f32]
-- Exit status: 0 all values match, 1 a mismatch (or different lengths), 2 usage or file errors.
local argparse = require "argparse"
local checker = require "gptoss.checker"
local cli = require "gptoss.cli"

local non_negative = cli.non_negative
local function fail_usage(msg) cli.exit_with(2, msg) end

local parser = argparse("checker.lua", "Compares a logits file with a reference, numpy allclose style.")
parser:argument("got", "Logits to check.")
parser:argument("expected", "Reference logits.")
parser:option("--atol", "Absolute tolerance.", "1e-6"):convert(non_negative)
parser:option("--rtol", "Relative tolerance (times |expected|).", "1e-5"):convert(non_negative)
parser:option("--format", "File format of both files (default: from each extension, .f32/.bin raw fp32).")
  :choices { "text", "f32" }

local ok, a = parser:pparse()
if not ok then
  fail_usage(("%s\n\nError: %s"):format(parser:get_usage(), a))
end

-- the library raises Lua errors; here they become a message and status 2
local ok_read, result = pcall(function()
  local got = checker.read(a.got, a.format)
  local expected = checker.read(a.expected, a.format)
  return checker.compare(got, expected, { atol = a.atol, rtol = a.rtol })
end)
if not ok_read then
  fail_usage("checker.lua: " .. tostring(result))
end

print(result.summary)
if result.first then print(result.message) end -- a length mismatch is all in the summary
os.exit(result.ok and 0 or 1)
