#!/usr/bin/env lua5.4
-- CPU golden engine throughput: S slots prefill P tokens each in one step,
-- then D decode steps of S rows. Prints a table and one JSON line; --record appends it to
-- examples/results.jsonl (gptoss.results).
--   gptoss bench_golden [MODEL] [--slots 4] [--prompt 16] [--decode 8] [--threads 0] [--record]
-- MODEL (default 7m) as every command names it (gptoss.naming).
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local naming = require "gptoss.naming"
local results = require "gptoss.results"
local script = require "gptoss.script"

local parser = argparse(script.name, "CPU golden engine throughput.")
naming.add_model(parser, { default = "7m" })
parser:option("--slots", "Sequences.", "4"):convert(cmdline.integer("--slots", 1))
parser:option("--prompt", "Prompt tokens per sequence.", "16"):convert(cmdline.integer("--prompt", 1))
parser:option("--decode", "Decode steps.", "8"):convert(cmdline.integer("--decode", 0))
parser:option("--threads", "CPU threads (0: all).", "0"):convert(cmdline.integer("--threads", 0))
parser:option("--weights", "Weight format.", "fp32"):choices(gptoss.weight_format_names())
results.add_option(parser)
local a = script.parse(parser)

script.run(function()
  local record = results.recorder(a.record)
  local t0 = gptoss.clock()
  local model = naming.open(a.model, a.seed_weights)
  local r = model:replica { slots = a.slots, ctx = a.prompt + a.decode, threads = a.threads, weights = a.weights }
  local setup = gptoss.clock() - t0

  local slots, positions, tokens = {}, {}, {}
  for s = 1, a.slots do
    for p = 0, a.prompt - 1 do
      slots[#slots + 1], positions[#positions + 1], tokens[#tokens + 1] =
        s, p, cmdline.bench_id(s, p, model.config.vocab_size)
    end
  end
  t0 = gptoss.clock()
  local h = r:step { slots = slots, positions = positions, tokens = tokens }
  local prefill = gptoss.clock() - t0
  local last = {}
  local all = h:tokens()
  for s = 1, a.slots do last[s] = all[s * a.prompt] end

  local ds = {}
  for s = 1, a.slots do ds[s] = s end
  t0 = gptoss.clock()
  for step = 0, a.decode - 1 do
    local pos = {}
    for s = 1, a.slots do pos[s] = a.prompt + step end
    last = r:step { slots = ds, positions = pos, tokens = last }:tokens()
  end
  local decode = gptoss.clock() - t0

  local result = {
    bench = "golden", model = a.model, weights = a.weights, slots = a.slots, prompt = a.prompt, decode = a.decode,
    threads = r.threads, setup_s = setup, prefill_s = prefill, decode_s = decode,
    prefill_rows_per_s = a.slots * a.prompt / prefill,
    decode_rows_per_s = a.decode > 0 and a.slots * a.decode / decode or 0,
  }
  print(("%-10s %8s %6s %7s %12s %12s %14s %14s"):format("model", "weights", "slots", "threads", "prefill s",
    "decode s", "prefill rows/s", "decode rows/s"))
  print(("%-10s %8s %6d %7d %12.3f %12.3f %14.1f %14.1f"):format(a.model, a.weights, a.slots, r.threads, prefill,
    decode, result.prefill_rows_per_s, result.decode_rows_per_s))
  print(json.encode(result))
  record({ result }, { "cpu" })
end)
