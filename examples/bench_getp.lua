#!/usr/bin/env lua5.4
-- getp throughput, the course's way: N requests through gptoss.getp on a synthetic model,
-- greedy, TPS = generated tokens / whole milliseconds of CLOCK_REALTIME around the inference
-- only (docs/course.md#control-flow-and-timing). By default the requests are questions of
-- about 14 tokens built from templates, like the course's evaluation file; --prompt-tokens N
-- makes every prompt exactly N tokens of the course's encode, windows of natural text (the
-- project's README.md, read on through as a ring: not random ids), each request a different
-- window. --steps is the course's -n, prompt + generated tokens (not --max-tokens), so TensorRT-LLM's "1k in /
-- 1k out" is --prompt-tokens 1024 --steps 2048 (docs/getp.md#throughput). The course's count
-- is the generated ids only (stop ids included, no prompt token): the table and the JSON
-- line give it as output tokens and output tok/s, beside the prompt tokens prefilled.
-- Prints the replicas chosen, a table, each replica's steps (prefill: feeding a prompt
-- token; decode: the others) and one JSON line. With --chat the requests are harmony user
-- turns, whose shared system message getp prefills once per replica and forks
-- (docs/getp.md#shared-prefixes) unless --no-share-prefix; the JSON line's prefill_saved
-- counts the prompt rows that saved. Per replica it prints the Lua work and the wait for the
-- GPU per step (getp's host and waited); --replicas-per-device puts several replicas on each
-- device, so one GPU exercises the host loop of several
-- (docs/getp.md#one-host-thread-several-gpus). --profile times every kernel of GPU replicas
-- and prints two tables a replica, prefill steps and decode steps (gptoss.step_profile; a CPU
-- replica has no per-kernel timing and says so). --plot draws the throughput and each
-- replica's host and waited time a step (gptoss.plot); --record appends the JSON line to
-- examples/results.jsonl (gptoss.results). --write-requests FILE writes the
-- requests as a course request file and runs nothing, for `gptoss run -m getp` on the same
-- ones (examples/bench_getp_mpi.sh).
--   gptoss bench_getp [MODEL] [--requests 1024] [--steps 1024] [--device 0,1]
--                     [--prompt-tokens N | --chat] [--no-share-prefix] [--replicas-per-device 1]
--                     [--slots N] [--rows N] [--chunk N]
--                     [--profile] [--plot FILE.png] [--record] [--write-requests FILE]
-- MODEL (default 20b) and --device (default: every GPU, else cpu) as every command names them
-- (gptoss.naming, gptoss.flags).
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local files = require "gptoss.files"
local flags = require "gptoss.flags"
local getp = require "gptoss.getp"
local naming = require "gptoss.naming"
local partition = require "gptoss.partition"
local plot = require "gptoss.plot"
local results = require "gptoss.results"
local requests = require "gptoss.requests"
local scheduler = require "gptoss.scheduler"
local script = require "gptoss.script"
local step_profile = require "gptoss.step_profile"

local parser = argparse(script.name, "getp throughput of a synthetic model.")
naming.add_model(parser, { default = "20b" })
parser:option("--requests", "Number of requests.", "1024"):convert(cmdline.integer("--requests", 1))
flags.add_course_steps(parser, 1024)
parser:option("--prompt-tokens",
  "Every prompt exactly this many tokens of natural text (README.md's, each request another window), "
  .. "not random ids; below --steps (1k in / 1k out: --prompt-tokens 1024 --steps 2048).")
  :convert(cmdline.integer("--prompt-tokens", 1))
flags.add_device(parser, true)
parser:option("--replicas-per-device", "Replicas on each device.", "1")
  :convert(cmdline.integer("--replicas-per-device", 1))
parser:option("--slots", "Slots per replica (default: getp's, from memory).")
  :convert(cmdline.integer("--slots", 1))
parser:option("--rows", "Rows a step of a GPU replica (default: getp's, from the slots).")
  :convert(cmdline.integer("--rows", 1))
parser:option("--chunk", "Prompt rows one slot feeds a step at most (GPU; default: the replica's).")
  :convert(cmdline.integer("--chunk", 1))
parser:option("--weights", "Weight format (the KV cache: fp32 with fp32, else bf16).", "bf16")
  :choices(gptoss.weight_format_names())
parser:option("--scheduler", ("getp scheduler: %s."):format(table.concat(scheduler.names, ", ")), "continuous")
parser:option("--partition", ("getp partition: %s."):format(table.concat(partition.names, ", ")), "round_robin")
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
parser:flag("--chat", "The requests as harmony user turns after the default system message.")
parser:flag("--no-share-prefix", "Prefill every prompt whole (getp's share_prefix = false).")
parser:flag("--profile", "Time every kernel of GPU replicas (each step then waits for the device) and print "
  .. "the prefill steps' and the decode steps' apart.")
parser:option("--plot", "Also draw the results as this PNG (needs gnuplot).")
results.add_option(parser)
parser:option("--write-requests", "Write the requests to this file (the course's request file) and run nothing.")
local a = script.parse(parser)

-- The course-like questions: templates, about 14 tokens each.
local function questions(count)
  local SUBJECTS = { "sleep", "the ocean", "black holes", "ancient Rome", "machine learning", "coffee",
    "volcanoes", "friendship", "the stock market", "honey bees", "jazz", "the moon" }
  local ASKS = { "In a few sentences, what is the biggest misconception people have about %s?",
    "Could you explain %s to a curious ten year old, step by step?",
    "Please write a short poem of four lines about %s and its beauty.",
    "Give me three surprising facts about %s that most people do not know." }
  local prompts = {}
  for i = 1, count do
    local ask, subject = ASKS[(i - 1) % #ASKS + 1], SUBJECTS[(i - 1) // #ASKS % #SUBJECTS + 1]
    prompts[i] = ask:format(subject)
  end
  return prompts
end

local function gcd(x, y)
  while y ~= 0 do x, y = y, x % y end
  return x
end

-- How many ids a window's length is adjusted, and then how many ids later it may start,
-- before long_prompts gives up (never seen: the first length almost always does).
local MAX_ADJUST, MAX_SHIFT = 8, 64

-- The text of ring's ids from index `first` (0-based, around the ring) that re-encodes to
-- exactly n ids, or nil. A window is cut at token boundaries, and its text encoded alone may
-- merge otherwise where it was cut (or where the ring closes): each id too few or too many
-- in the re-encoding makes the window an id longer or shorter.
local function window_text(tok, ring, first, n)
  local length = n
  for _ = 1, MAX_ADJUST do
    local window = {}
    for j = 1, length do window[j] = ring[(first + j - 1) % #ring + 1] end
    local text = tok:decode(window)
    local count = #tok:encode(text)
    if count == n then return text end
    length = length + n - count
    if length < 1 then return nil end
  end
  return nil
end

-- --prompt-tokens: count prompts of exactly n ids of the course's encode (getp's: n is at most
-- initial_context_length, where getp cuts), so that a request file written from them gives
-- getp n ids too. The text is README.md's, whitespace runs made one space (a request file's
-- prompt is one line), encoded once and read as a ring of L ids. Request i's window starts
-- stride * (i - 1) ids in, stride the first count >= n prime to L: consecutive requests read
-- on through the text, and the first L windows all start apart; window_text fits its length,
-- and a window that cannot fit starts an id later.
local function long_prompts(tok, n, count, initial_context_length)
  if n > initial_context_length then
    error(("--prompt-tokens %d is more than the model's initial_context_length %d, where getp cuts a prompt")
      :format(n, initial_context_length), 0)
  end
  local source = gptoss.project_file("README.md")
  if not source then error("--prompt-tokens reads README.md, which this copy of gptoss does not have", 0) end
  local ring = tok:encode((files.read("bench_getp", source):gsub("%s+", " ")))
  local stride = n
  while gcd(stride, #ring) ~= 1 do stride = stride + 1 end
  local prompts = {}
  for i = 1, count do
    for shift = 0, MAX_SHIFT do
      prompts[i] = window_text(tok, ring, stride * (i - 1) + shift, n)
      if prompts[i] then break end
    end
    if not prompts[i] then
      error(("--prompt-tokens %d: no window of README.md near request %d's re-encodes to %d tokens")
        :format(n, i, n), 0)
    end
  end
  return prompts
end

-- The prompts of the run: long_prompts' with --prompt-tokens, else the questions.
local function make_prompts(tok, model)
  if not a.prompt_tokens then return questions(a.requests) end
  if a.chat then
    error("--prompt-tokens and --chat: harmony's system message and turn would add their own tokens to the N", 0)
  end
  local steps = getp.clamp_steps(a.steps, model.config.seq_len)
  if a.prompt_tokens >= steps then
    error(("--prompt-tokens %d leaves nothing to generate: --steps %d%s counts prompt + generated tokens "
      .. "(1k in / 1k out: --prompt-tokens 1024 --steps 2048)"):format(a.prompt_tokens, steps,
        steps ~= a.steps and " (the model's seq_len)" or ""), 0)
  end
  return long_prompts(tok, a.prompt_tokens, a.requests, model.config.initial_context_length)
end

-- Each replica's steps of each kind (getp's per_replica counters): printed, and for the JSON line.
local function step_split(per_replica)
  print(("%8s %14s %12s %12s %14s %12s"):format("replica", "prefill steps", "their rows", "prompt rows",
    "decode steps", "their rows"))
  local split = {}
  for k, pr in ipairs(per_replica) do
    print(("%8d %14d %12d %12d %14d %12d"):format(k, pr.prefill_steps, pr.prefill_step_rows, pr.prefill_rows,
      pr.decode_steps, pr.decode_step_rows))
    split[k] = { prefill_steps = pr.prefill_steps, prefill_step_rows = pr.prefill_step_rows,
      prefill_rows = pr.prefill_rows, decode_steps = pr.decode_steps, decode_step_rows = pr.decode_step_rows }
  end
  return split
end

-- --profile's tables, two a GPU replica (its prefill steps' kernels, its decode steps'), the
-- note for a CPU one; returns the JSON line's profile: {prefill = rows, decode = rows} a
-- replica, both empty on the CPU.
local function profile_report(replicas, times, wall)
  local report = {}
  for k, r in ipairs(replicas) do
    local name = ("replica %d (%s)"):format(k, getp.device_name(r.device))
    local t = times[k]
    if t then
      for _, kind in ipairs { "prefill", "decode" } do
        print(table.concat(cmdline.profile_lines(("%s, %s steps"):format(name, kind), t[kind], wall), "\n"))
      end
    else
      print(table.concat(cmdline.profile_lines(name, nil, wall), "\n"))
    end
    local empty = setmetatable({}, { __jsontype = "array" })
    report[k] = { prefill = t and t.prefill or empty, decode = t and t.decode or empty }
  end
  return report
end

script.run(function()
  if a.plot then plot.check(a.plot, "--plot") end
  local record = results.recorder(a.record)
  local tok = gptoss.tokenizer(a.tokenizer)
  local model = naming.open(a.model, a.seed_weights)
  local prompts = make_prompts(tok, model)
  if a.write_requests then return requests.write_requests(a.write_requests, prompts) end
  local prompt_tokens = 0
  for i = 1, a.requests do
    prompt_tokens = prompt_tokens + #getp.prompt_ids(tok, prompts[i], a.chat, model.config.initial_context_length)
  end

  local devices = {}
  for _, d in ipairs(flags.devices(a.device)) do
    for _ = 1, a.replicas_per_device do devices[#devices + 1] = d end
  end

  local split = a.profile and step_profile.new() or nil
  local t0 = gptoss.realtime_ms()
  local g <close> = getp.new { model = model, tokenizer = tok, steps = a.steps, requests = prompts,
    devices = devices, replica = { weights = a.weights, slots = a.slots, rows = a.rows, chunk = a.chunk },
    scheduler = a.scheduler, partition = a.partition, chat = a.chat, share_prefix = not a.no_share_prefix,
    on_step = split and split.on_step }
  if split then
    for k, r in ipairs(g.replicas) do
      if r.device ~= "cpu" then split:watch(k, r) end
    end
  end
  local t1 = gptoss.realtime_ms()
  io.stderr:write(g:describe(), "\n")
  local result = g:run()
  local t2 = gptoss.realtime_ms()
  local ms = math.max(1, t2 - t1)
  -- the course's count is the generated ids, so its TPS is the output tok/s engines report
  local tps = result.tokens / ms * 1000

  local slots, host_ms, waited_ms, prefilled = {}, {}, {}, 0
  for k, r in ipairs(g.replicas) do slots[k] = r.slots end
  for _, pr in ipairs(result.per_replica) do prefilled = prefilled + pr.prefill_rows end
  print(("%8s %12s %10s %10s %8s %10s %14s"):format("requests", "mean prompt", "prefilled", "output", "steps",
    "seconds", "output tok/s"))
  print(("%8d %12.1f %10d %10d %8d %10.3f %14.1f"):format(a.requests, prompt_tokens / a.requests, prefilled,
    result.tokens, result.steps, ms / 1000, tps))
  print("  output: the generated ids, stop ids included, no prompt (the course's count: output tok/s is its TPS); "
    .. "prefilled: prompt tokens stepped")
  print(("%8s %10s %8s %18s %18s"):format("replica", "device", "steps", "host ms a step", "waited ms a step"))
  for k, pr in ipairs(result.per_replica) do
    local per_step = math.max(1, pr.steps)
    host_ms[k], waited_ms[k] = pr.host * 1000 / per_step, pr.waited * 1000 / per_step
    print(("%8d %10s %8d %18.3f %18.3f"):format(k, tostring(devices[k]), pr.steps, host_ms[k], waited_ms[k]))
  end
  local steps_of_each = step_split(result.per_replica)
  local profile = split and profile_report(g.replicas, split:finish(), ms / 1000)
  -- what the replicas ran on: the first device's name (getp's default is every GPU, else the CPU)
  local first = devices[1]
  local device_name = first == "cpu" and "cpu" or gptoss.device(first).name
  local res = {
    bench = "getp", model = a.model, weights = a.weights, requests = a.requests, steps_limit = a.steps,
    prompt_length = a.prompt_tokens, prompt_tokens = prompt_tokens, prompt_tokens_prefilled = prefilled,
    tokens = result.tokens, output_tokens = result.tokens, engine_steps = result.steps, seconds = ms / 1000,
    tok_per_s = tps, output_tok_per_s = tps, warm_up = (t1 - t0) / 1000, slots = slots, scheduler = a.scheduler,
    partition = a.partition, device = device_name, chat = a.chat, prefill_saved = result.prefill_saved,
    replicas_per_device = a.replicas_per_device, host_ms_per_step = host_ms, waited_ms_per_step = waited_ms,
    step_split = steps_of_each, profile = profile,
  }
  print(json.encode(res))
  record({ res }, devices)
  if a.plot then plot.write({ res }, a.plot) end
end)
