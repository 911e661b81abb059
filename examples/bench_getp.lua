#!/usr/bin/env lua5.4
-- getp throughput, the course's way: N requests of about 14 tokens (questions built from
-- templates, like the course's evaluation file) through gptoss.getp on a synthetic model,
-- greedy, TPS = generated tokens / whole milliseconds of CLOCK_REALTIME around the
-- inference only (docs/course.md#control-flow-and-timing). Prints the replicas chosen, a table and
-- one JSON line. With --chat the requests are harmony user turns, whose shared system message
-- getp prefills once per replica and forks (docs/getp.md#shared-prefixes) unless
-- --no-share-prefix; the JSON line's prefill_saved counts the prompt rows that saved. Per
-- replica it prints the Lua work and the wait for the GPU per step (getp's host and waited);
-- --replicas-per-device puts several replicas on each device, so one GPU exercises the host
-- loop of several (docs/getp.md#one-host-thread-several-gpus). --plot draws the throughput and
-- each replica's host and waited time a step (gptoss.plot). --write-requests FILE writes the
-- requests as a course request file and runs nothing, for `gptoss run -m getp` on the same
-- ones (examples/bench_getp_mpi.sh).
--   gptoss bench_getp [MODEL] [--requests 1024] [--steps 1024] [--devices 1,2]
--                     [--replicas-per-device 1] [--chat [--no-share-prefix]] [--plot FILE.png]
--                     [--write-requests FILE]
-- MODEL (default 20b, weights of seed 1) and --devices as every command names them (gptoss.naming).
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cli = require "gptoss.cli"
local getp = require "gptoss.getp"
local naming = require "gptoss.naming"
local partition = require "gptoss.partition"
local plot = require "gptoss.plot"
local requests = require "gptoss.requests"
local scheduler = require "gptoss.scheduler"
local script = require "gptoss.script"

local parser = argparse(script.name, "getp throughput of a synthetic model.")
naming.add_model(parser, { default = "20b", seed = 1 })
parser:option("--requests", "Number of requests.", "1024"):convert(cli.integer("--requests", 1))
parser:option("--steps", "The course's -n: prompt + generated tokens.", "1024"):convert(cli.integer("--steps", 1))
naming.add_devices(parser)
parser:option("--replicas-per-device", "Replicas on each device.", "1")
  :convert(cli.integer("--replicas-per-device", 1))
parser:option("--slots", "Slots per replica (default: getp's, from memory).")
  :convert(cli.integer("--slots", 1))
parser:option("--weights", "Weight format (the KV cache: fp32 with fp32, else bf16).", "bf16")
  :choices(gptoss.weight_format_names())
parser:option("--scheduler", ("getp scheduler: %s."):format(table.concat(scheduler.names, ", ")), "continuous")
parser:option("--partition", ("getp partition: %s."):format(table.concat(partition.names, ", ")), "round_robin")
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
parser:flag("--chat", "The requests as harmony user turns after the default system message.")
parser:flag("--no-share-prefix", "Prefill every prompt whole (getp's share_prefix = false).")
parser:option("--plot", "Also draw the results as this PNG (needs gnuplot).")
parser:option("--write-requests", "Write the requests to this file (the course's request file) and run nothing.")
local a = script.parse(parser)

script.run(function()
  if a.plot then plot.check(a.plot, "--plot") end
  local SUBJECTS = { "sleep", "the ocean", "black holes", "ancient Rome", "machine learning", "coffee",
    "volcanoes", "friendship", "the stock market", "honey bees", "jazz", "the moon" }
  local ASKS = { "In a few sentences, what is the biggest misconception people have about %s?",
    "Could you explain %s to a curious ten year old, step by step?",
    "Please write a short poem of four lines about %s and its beauty.",
    "Give me three surprising facts about %s that most people do not know." }

  local tok = gptoss.tokenizer(a.tokenizer)
  local model = naming.open(a.model, a.seed_weights)
  local prompts, prompt_tokens = {}, 0
  for i = 1, a.requests do
    local ask, subject = ASKS[(i - 1) % #ASKS + 1], SUBJECTS[(i - 1) // #ASKS % #SUBJECTS + 1]
    prompts[i] = ask:format(subject)
  end
  if a.write_requests then return requests.write_requests(a.write_requests, prompts) end
  for i = 1, a.requests do
    prompt_tokens = prompt_tokens + #getp.prompt_ids(tok, prompts[i], a.chat, model.config.initial_context_length)
  end

  local devices = {}
  for _, d in ipairs(a.devices or gptoss.default_devices()) do
    for _ = 1, a.replicas_per_device do devices[#devices + 1] = d end
  end

  local t0 = gptoss.realtime_ms()
  local g <close> = getp.new { model = model, tokenizer = tok, steps = a.steps, requests = prompts,
    devices = devices, replica = { weights = a.weights, slots = a.slots },
    scheduler = a.scheduler, partition = a.partition, chat = a.chat, share_prefix = not a.no_share_prefix }
  local t1 = gptoss.realtime_ms()
  io.stderr:write(g:describe(), "\n")
  local result = g:run()
  local t2 = gptoss.realtime_ms()
  local ms = math.max(1, t2 - t1)
  local tps = result.tokens / ms * 1000

  local slots, host_ms, waited_ms = {}, {}, {}
  for k, r in ipairs(g.replicas) do slots[k] = r.slots end
  print(("%8s %10s %12s %8s %10s %12s"):format("requests", "tokens", "mean prompt", "steps", "seconds", "TPS (tok/s)"))
  print(("%8d %10d %12.1f %8d %10.3f %12.1f"):format(a.requests, result.tokens, prompt_tokens / a.requests,
    result.steps, ms / 1000, tps))
  print(("%8s %10s %8s %18s %18s"):format("replica", "device", "steps", "host ms a step", "waited ms a step"))
  for k, pr in ipairs(result.per_replica) do
    local per_step = math.max(1, pr.steps)
    host_ms[k], waited_ms[k] = pr.host * 1000 / per_step, pr.waited * 1000 / per_step
    print(("%8d %10s %8d %18.3f %18.3f"):format(k, tostring(devices[k]), pr.steps, host_ms[k], waited_ms[k]))
  end
  -- what the replicas ran on: the first device's name (getp's default is every GPU, else the CPU)
  local first = devices[1]
  local device_name = first == "cpu" and "cpu" or gptoss.devices()[first].name
  local res = {
    bench = "getp", model = a.model, weights = a.weights, requests = a.requests, steps_limit = a.steps,
    prompt_tokens = prompt_tokens, tokens = result.tokens, engine_steps = result.steps, seconds = ms / 1000,
    tok_per_s = tps, warm_up = (t1 - t0) / 1000, slots = slots, scheduler = a.scheduler,
    partition = a.partition, device = device_name, chat = a.chat, prefill_saved = result.prefill_saved,
    replicas_per_device = a.replicas_per_device, host_ms_per_step = host_ms, waited_ms_per_step = waited_ms,
  }
  print(json.encode(res))
  if a.plot then plot.write({ res }, a.plot) end
end)
