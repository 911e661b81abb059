#!/usr/bin/env lua5.4
-- Draws benchmark results as a PNG through gnuplot: the JSON lines bench_gpu and bench_getp
-- print, from files of them or saved runs' whole output, so a run measured where there is no
-- gnuplot (the GPU machine) is drawn here. The benchmarks' --plot draws the same way
-- (gptoss.plot; docs/building.md#benchmarks).
--   gptoss plot results.jsonl [more.log ...] -o FILE.png [--title TEXT]
local argparse = require "argparse"
local plot = require "gptoss.plot"
local script = require "gptoss.script"

local parser = argparse(script.name, "Draw bench_gpu's and bench_getp's JSON lines as a PNG (needs gnuplot).")
parser:argument("results", "Files of the benchmarks' JSON lines, or their whole output."):args("+")
parser:option("-o --output", "The PNG to write."):count(1)
parser:option("--title", "A title above the panels (what ran where and when, say).")
local a = script.parse(parser)

script.run(function()
  plot.check(a.output, "--output")
  local results = {}
  for _, path in ipairs(a.results) do
    for _, r in ipairs(plot.read(path)) do results[#results + 1] = r end
  end
  plot.write(results, a.output, { title = a.title })
  print(("%s: %d results drawn"):format(a.output, #results))
end)
