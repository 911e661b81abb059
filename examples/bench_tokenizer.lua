#!/usr/bin/env lua5.4
-- Tokenizer throughput on one core: encode of a text repeated to --mb
-- megabytes in one call, the same text line by line (one call per line, as
-- a prompt file is read), and decode of the ids. Prints a table and one
-- JSON line; --record appends it to examples/results.jsonl (gptoss.results).
--   gptoss bench_tokenizer [--text FILE] [--mb 8] [--mode course|o200k]
--     [--tokenizer PATH] [--ids FILE] [--record]
-- The text is by default the project's README.md (the source tree's, or the copy the rock
-- installs: gptoss.project_file), wherever the command runs. --ids writes the one-call
-- encode's ids, one a line, for bench_tokenizer_tiktoken.py to compare with tiktoken's; it is
-- checked before the benchmark runs.
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local files = require "gptoss.files"
local results = require "gptoss.results"
local script = require "gptoss.script"

local parser = argparse(script.name, "Tokenizer encode/decode throughput.")
parser:option("--text", "UTF-8 text file to repeat (default: the project's README.md).")
parser:option("--mb", "Megabytes of text.", "8"):convert(script.named("--mb", cmdline.non_negative))
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
parser:option("--mode", "How encode cuts the text: the course's way or tiktoken's o200k.", "course")
  :choices { "course", "o200k" }
parser:option("--ids", "Write the one-call encode's ids here, one a line.")
results.add_option(parser)
local a = script.parse(parser)

script.run(function()
  if a.ids then cmdline.check_writable("--ids", a.ids) end
  local record = results.recorder(a.record)
  a.text = a.text or gptoss.project_file("README.md")
  if not a.text then error("--text: this install has no README.md to default to: give a text file", 0) end
  local sample = files.read("--text", a.text)
  if #sample == 0 then error(("--text: '%s' is empty"):format(a.text), 0) end
  local text = sample:rep(math.ceil(a.mb * 1e6 / #sample))
  local tok = gptoss.tokenizer(a.tokenizer)

  local t0 = gptoss.clock()
  local opts = { mode = a.mode }
  local ids = tok:encode(text, opts)
  local encode_s = gptoss.clock() - t0

  t0 = gptoss.clock()
  local line_tokens = 0
  for line in text:gmatch("[^\n]+") do line_tokens = line_tokens + #tok:encode(line, opts) end
  local lines_s = gptoss.clock() - t0

  t0 = gptoss.clock()
  local back = tok:decode(ids)
  local decode_s = gptoss.clock() - t0
  assert(back == text, "decode(encode(text)) differs from the text")
  if a.ids then files.write("--ids", a.ids, table.concat(ids, "\n") .. "\n") end

  local mb = #text / 1e6
  local result = {
    bench = "tokenizer", mode = a.mode, text = a.text, mb = a.mb, bytes = #text, tokens = #ids,
    line_tokens = line_tokens,
    encode_mb_per_s = mb / encode_s, encode_lines_mb_per_s = mb / lines_s, decode_mb_per_s = mb / decode_s,
  }
  print(("%-24s %10s %10s %10s"):format("operation", "MB", "seconds", "MB/s"))
  print(("%-24s %10.2f %10.3f %10.2f"):format("encode (one call)", mb, encode_s, result.encode_mb_per_s))
  print(("%-24s %10.2f %10.3f %10.2f"):format("encode (one per line)", mb, lines_s, result.encode_lines_mb_per_s))
  print(("%-24s %10.2f %10.3f %10.2f"):format("decode", mb, decode_s, result.decode_mb_per_s))
  print(("%d tokens, %.2f bytes per token"):format(#ids, #text / #ids))
  print(json.encode(result))
  record({ result }, { "cpu" })
end)
