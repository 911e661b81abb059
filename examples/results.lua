#!/usr/bin/env lua5.4
-- Draws examples/RESULTS.md (the latest figures of each benchmark and configuration), README.md's
-- figures (its table and, where gnuplot is, docs/figures/bench_gpu.png) from
-- examples/results.jsonl, where each benchmark's --record appends its JSON lines
-- (gptoss.results; docs/building.md#benchmarks). --check writes nothing and exits 1, naming
-- them, when those files are not what it would draw (the picture compared only where gnuplot
-- is).
--   gptoss results [--check] [--root DIR]
local argparse = require "argparse"
local files = require "gptoss.files"
local plot = require "gptoss.plot"
local results = require "gptoss.results"
local script = require "gptoss.script"

local parser = argparse(script.name, "Draw examples/RESULTS.md and README.md's figures from examples/results.jsonl.")
parser:flag("--check", "Write nothing; exit 1 when the files differ from what would be drawn.")
parser:option("--root", "The source tree (default: the one gptoss runs from).")
local a = script.parse(parser)

script.run(function()
  local root = a.root and a.root:gsub("/*$", "/") or results.tree()
  if not root then error("--root: gptoss does not run from a source tree: name one", 0) end
  if a.check then
    local differ, drew = results.differences(root)
    if not drew then io.stderr:write(("%s: no gnuplot: %s not compared\n"):format(script.name, results.FIGURE)) end
    if #differ > 0 then
      error(("not what `gptoss results` draws from %s: %s"):format(results.FILE, table.concat(differ, ", ")), 0)
    end
    print(("%s and README.md are drawn from %s"):format(results.TABLE, results.FILE))
    return
  end
  local texts, drawn, title = results.draw(root)
  for path, text in pairs(texts) do files.write("results", path, text) end
  if plot.available() then
    plot.write(drawn, root .. results.FIGURE, { title = title })
  else
    io.stderr:write(("%s: no gnuplot: %s not redrawn\n"):format(script.name, results.FIGURE))
  end
  print(("%s and README.md drawn from %s"):format(results.TABLE, results.FILE))
end)
