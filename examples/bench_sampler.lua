#!/usr/bin/env lua5.4
-- CPU sampler cost per draw on a full 201088-wide row, for each mode and
-- control, on two rows: a synthetic 7m model's logits (nearly flat, the worst
-- case for top-p, which must then rank almost every token) and the same row
-- scaled by --sharpen (peaked, like a trained model's). Prints a table and
-- one JSON line; --record appends it to examples/results.jsonl (gptoss.results).
--   ./gptoss bench_sampler [--draws 200] [--sharpen 40] [--record]
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local results = require "gptoss.results"
local script = require "gptoss.script"

local parser = argparse(script.name, "CPU sampler cost per draw.")
parser:option("--draws", "Draws per configuration.", "200"):convert(cmdline.integer("--draws", 1))
parser:option("--sharpen", "Factor applied to the logits for the peaked row.", "40")
  :convert(script.named("--sharpen", cmdline.non_negative))
results.add_option(parser)
local a = script.parse(parser)

script.run(function()
  local record = results.recorder(a.record)
  local flat = gptoss.synthetic("7m", { seed = 1 }):replica { slots = 1, ctx = 1 }
    :step { slots = { 1 }, positions = { 0 }, tokens = { 13225 } }:logits()[1]
  local peaked = gptoss.tensor.zeros({ flat.numel })
  for i = 1, flat.numel do peaked[i] = flat[i] * a.sharpen end

  local configs = {
    { name = "greedy", opts = { temperature = 0 } },
    { name = "temperature 1", opts = { temperature = 1 } },
    { name = "top_k 50", opts = { temperature = 1, top_k = 50 } },
    { name = "top_p 0.9", opts = { temperature = 1, top_p = 0.9 } },
    { name = "min_p 0.05", opts = { temperature = 1, min_p = 0.05 } },
    { name = "course top_p 0.9", opts = { mode = "course", temperature = 1, top_p = 0.9, seed = 1 } },
    { name = "logprobs 5", opts = { temperature = 1, logprobs = 5 } },
  }
  local result = { bench = "sampler", vocab = flat.numel, draws = a.draws, sharpen = a.sharpen, ms_per_draw = {} }
  print(("%-18s %14s %14s"):format("configuration", "flat ms/draw", "peaked ms/draw"))
  for _, c in ipairs(configs) do
    local times = {}
    for _, row in ipairs({ flat, peaked }) do
      c.opts.seed = c.opts.seed or 1
      local s = gptoss.sampler(c.opts)
      local t0 = gptoss.clock()
      for pos = 0, a.draws - 1 do s:sample(row, pos) end
      times[#times + 1] = (gptoss.clock() - t0) * 1e3 / a.draws
    end
    result.ms_per_draw[c.name] = { flat = times[1], peaked = times[2] }
    print(("%-18s %14.3f %14.3f"):format(c.name, times[1], times[2]))
  end
  print(json.encode(result))
  record({ result }, { "cpu" })
end)
