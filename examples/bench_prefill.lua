#!/usr/bin/env lua5.4
-- Prefill as users measure it (llama-bench's pp512 convention): for each prompt length L,
-- one slot prefills L ids in chunks of --chunk rows a step (gptoss.generate.feed), then
-- the first token is read: the time to first token (TTFT) and prefill tokens/s (L / TTFT).
-- Each length runs once untimed (graph capture, first touches), then --repeat times from
-- an empty slot; the table gives the mean and standard deviation of those runs, and one
-- JSON line per length follows it. On a GPU the table adds the weights' floor: the steps
-- times the time the replica's weights take to read at a measured device-to-device copy's
-- rate, which a chunk too short to keep the GPU busy runs close to.
-- The header gives the replica's memory and the KV cache one slot of 131072 positions
-- would take with these options, planned without making it (model:replica_bytes).
-- Prompt ids: cmdline.bench_id(1, p, vocab) at position p, bench_gpu's first
-- slot's (the same ids for every length and run; no tokenizer needed).
--   gptoss bench_prefill [MODEL] [--lengths 512,2048,8192,32768] [--chunk K] [--repeat 3]
--                        [--weights F] [--device N|cpu] [--record]
-- MODEL (default 20b) and --device (default: the first GPU, else cpu)
-- as every command names them (gptoss.naming, gptoss.flags). The replica holds ctx = the longest
-- length + 1 positions. --chunk defaults to what getp and serve step: a GPU replica's
-- chunk (128 rows), 64 rows on the CPU. --record appends the JSON lines to
-- examples/results.jsonl (gptoss.results).
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local generate = require "gptoss.generate"
local naming = require "gptoss.naming"
local results = require "gptoss.results"
local script = require "gptoss.script"

-- The context whose KV cache the header plans: gpt-oss's trained context (the published
-- checkpoints' max_position_embeddings, initial_context_length 4096 times YaRN's 32).
local LONG_CTX = 131072

local parser = argparse(script.name, "Prefill: time to first token and prompt tokens/s of one slot.")
naming.add_model(parser, { default = "20b" })
parser:option("--lengths", "Comma-separated prompt lengths in tokens.", "512,2048,8192,32768")
  :convert(cmdline.integer_list("--lengths", 1, "prompt lengths", "512,2048"))
parser:option("--chunk", "Rows of the prompt a step carries (default: the replica's chunk on a GPU, 64 on the CPU).")
  :convert(cmdline.integer("--chunk", 1))
parser:option("--repeat", "Timed runs of each length, after an untimed one.", "3"):convert(cmdline.integer("--repeat", 1))
parser:option("--weights", "Weight format (default: the replica's choice).")
  :choices(gptoss.weight_format_names())
flags.add_device(parser)
results.add_option(parser)
local a = script.parse(parser)

-- The benchmark's prompt: slot 1's ids as bench_gpu and bench_golden prompt (cmdline.bench_id).
local function prompt_ids(n, vocab)
  local ids = {}
  for p = 0, n - 1 do ids[p + 1] = cmdline.bench_id(1, p, vocab) end
  return ids
end

-- The mean and the (sample) standard deviation of a list; 0 for one value.
local function mean_sd(list)
  local sum, squares = 0, 0
  for _, v in ipairs(list) do sum = sum + v end
  local mean = sum / #list
  for _, v in ipairs(list) do squares = squares + (v - mean) ^ 2 end
  return mean, #list > 1 and math.sqrt(squares / (#list - 1)) or 0
end

local function gib(bytes) return bytes / 2 ^ 30 end

script.run(function()
  local record = results.recorder(a.record)
  local device = flags.one_device(a.device)
  local longest = math.max(table.unpack(a.lengths))
  local model = naming.open(a.model, a.seed_weights)
  local opts = { device = device, slots = 1, ctx = longest + 1, weights = a.weights }
  if device ~= "cpu" and a.chunk then opts.rows, opts.chunk = a.chunk, a.chunk end
  local long_opts = { ctx = LONG_CTX }
  for k, v in pairs(opts) do long_opts[k] = long_opts[k] or v end
  local long_plan = model:replica_bytes(long_opts)
  local r <close> = model:replica(opts)
  local chunk = a.chunk or generate.chunk(r)
  local device_name = device == "cpu" and "cpu" or gptoss.device(device).name
  local copy_bw = device ~= "cpu" and gptoss.copy_bandwidth(device) or nil

  print(("%s: %s, weights %s, KV %s, %s, one slot of ctx %d, %d rows a step"):format(script.name,
    naming.describe(a.model), r.weights, r.kv, device == "cpu" and "cpu" or ("device %d (%s)"):format(device,
      device_name), r.ctx, chunk))
  print(cmdline.memory_line(tostring(device), r.memory))
  print(("KV cache of one slot of %d positions, planned: %.3f GiB (%d bytes)"):format(LONG_CTX, gib(long_plan.kv),
    long_plan.kv))
  print(("%8s %6s %10s %8s %10s %9s %9s"):format("prompt", "steps", "TTFT ms", "± ms", "tok/s", "± tok/s",
    "floor ms"))

  local ids = prompt_ids(longest, model.config.vocab_size)
  -- one prefill of the first n ids from an empty slot, and the first token read: seconds
  local function time_to_first_token(n)
    r:reset(1)
    local t0 = gptoss.clock()
    local h = generate.feed(r, 1, table.move(ids, 1, n, 1, {}), 0, { chunk = chunk })
    h:tokens()
    return gptoss.clock() - t0
  end

  local by_length = {}
  for _, n in ipairs(a.lengths) do
    time_to_first_token(n)
    local ttft_ms, tok_per_s = {}, {}
    for i = 1, a["repeat"] do
      local seconds = time_to_first_token(n)
      ttft_ms[i], tok_per_s[i] = 1000 * seconds, n / seconds
    end
    local steps = math.ceil(n / chunk)
    local res = {
      bench = "prefill", model = a.model, weights = r.weights, kv = r.kv, device = device_name, length = n,
      chunk = chunk, steps = steps, ctx = r.ctx, runs = a["repeat"], ttft_ms_runs = ttft_ms, memory = r.memory,
      long_ctx = LONG_CTX, long_ctx_kv_bytes = long_plan.kv,
    }
    res.ttft_ms, res.ttft_ms_sd = mean_sd(ttft_ms)
    res.tok_per_s, res.tok_per_s_sd = mean_sd(tok_per_s)
    if copy_bw then
      res.copy_gb_per_s, res.weights_floor_ms = copy_bw / 1e9, 1000 * steps * r.memory.weights / copy_bw
    end
    by_length[#by_length + 1] = res
    print(("%8d %6d %10.2f %8.2f %10.1f %9.1f %9s"):format(n, steps, res.ttft_ms, res.ttft_ms_sd, res.tok_per_s,
      res.tok_per_s_sd, res.weights_floor_ms and ("%.2f"):format(res.weights_floor_ms) or "-"))
  end
  for _, res in ipairs(by_length) do print(json.encode(res)) end
  record(by_length, { device })
end)
