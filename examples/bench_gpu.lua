#!/usr/bin/env lua5.4
-- GPU decode throughput: for each batch size B, B sequences prefill a prompt of
-- --prompt tokens (in steps of at most generate.LONE_PROMPT_ROWS, so decode can be measured
-- near any position: --prompt 32700 --ctx 32768), then decode greedily until the
-- context reaches --ctx. Each step is
-- fed the tokens of the last on the device (tokens = h) and enqueued before
-- the host reads those (--feed host: the host reads them, then steps).
-- Prints a table (tok/s, mean step time, achieved GB/s against a measured
-- device-to-device copy, device memory) and one JSON line per batch size;
-- --profile-steps adds a per-kernel table of steps run after the decode and
-- attention's bandwidth on the cached keys and values it reads, at the first
-- positions (--profile-at start) or the last ones (end: the full context). --plot draws
-- throughput against batch size and the profiled step time by kernel (gptoss.plot); --record
-- appends the JSON lines to examples/results.jsonl (gptoss.results).
--   gptoss bench_gpu [MODEL] [--batches 1,8,32,64,128,256] [--ctx 1024] [--prompt 16] [--device N]
--                    [--plot FILE.png] [--record]
-- MODEL (default 20b) and --device (default: the first GPU) as every command names them
-- (gptoss.naming, gptoss.flags); the device must be a GPU.
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local generate = require "gptoss.generate"
local naming = require "gptoss.naming"
local plot = require "gptoss.plot"
local results = require "gptoss.results"
local script = require "gptoss.script"

local parser = argparse(script.name, "GPU decode throughput of a synthetic model.")
naming.add_model(parser, { default = "20b" })
parser:option("--batches", "Comma-separated batch sizes.", "1,8,32,64,128,256")
  :convert(cmdline.integer_list("--batches", 1, "batch sizes", "1,8,32"))
parser:option("--ctx", "Context reached by the last decode step.", "1024"):convert(cmdline.integer("--ctx", 1))
parser:option("--prompt", "Prompt tokens per sequence.", "16"):convert(cmdline.integer("--prompt", 1))
parser:option("--weights", "Weight format (the KV cache: fp32 with fp32, else bf16).", "bf16")
  :choices(gptoss.weight_format_names())
flags.add_device(parser)
parser:option("--feed", "device or host: where a step's tokens come from.", "device"):choices { "device", "host" }
parser:option("--profile-steps", "Steps timed per kernel after the run (0: none).", "8")
  :convert(cmdline.integer("--profile-steps", 0))
parser:option("--profile-at", "start or end: the profiled steps' positions, the first ones or the last.", "start")
  :choices { "start", "end" }
parser:option("--plot", "Also draw the results as this PNG (needs gnuplot).")
results.add_option(parser)
local a = script.parse(parser)
if a.device == "cpu" then script.usage_error(parser, "--device cpu: this benchmark measures a GPU") end
if a.prompt >= a.ctx then
  script.usage_error(parser, ("--prompt (%d) must be less than --ctx (%d): decoding starts after it"):format(a.prompt,
    a.ctx))
end

script.run(function()
  if a.plot then plot.check(a.plot, "--plot") end
  local record = results.recorder(a.record)
  local model = naming.open(a.model, a.seed_weights)
  a.device = flags.one_device(a.device)
  if a.device == "cpu" then error("this build sees no GPU here, and this benchmark measures a GPU", 0) end
  local c = model.config
  local windowed = model.windowed
  local copy_bw = gptoss.copy_bandwidth(a.device)
  local format
  for _, f in ipairs(gptoss.weight_formats()) do
    if f.name == a.weights then format = f end
  end
  local kv_mode = format.bf16_arithmetic and "bf16" or "fp32" -- the replica's default too
  local elem = kv_mode == "bf16" and 2 or 4
  -- a block format's experts: its bits a weight (codes and scales)
  local expert_elem = format.block > 1 and format.bits / 8 or elem

  -- the cached keys and values attention reads in a step of B rows at position pos
  local function kv_bytes(B, pos)
    local kv = 0
    for l = 1, c.n_layers do
      local visible = windowed[l] and math.min(pos + 1, c.sliding_window) or pos + 1
      kv = kv + B * visible * c.n_kv_heads * c.head_dim * 2 * elem
    end
    return kv
  end

  -- Bytes a decode step must read at least: every dense weight, the experts the
  -- batch touches (expected count for uniform routing), and the cached keys and
  -- values of every row (bf16 cache unless the weights are fp32).
  local function step_bytes(B, pos)
    local H, D, Hq, Hkv, I, E, K = c.hidden_dim, c.head_dim, c.n_attn_heads, c.n_kv_heads,
      c.intermediate_dim, c.n_experts, c.experts_per_token
    local qkv = (Hq + 2 * Hkv) * D * H
    local dense = c.n_layers * (qkv + H * Hq * D + E * H) + c.vocab_size * H
    local touched = E * (1 - (1 - K / E) ^ B)
    local experts = c.n_layers * touched * (2 * I * H + H * I)
    return dense * elem + experts * expert_elem + kv_bytes(B, pos)
  end

  local rows = {}
  print(("%6s %10s %10s %10s %9s %10s %10s"):format("B", "tok/s", "step ms", "GB/s", "% copy", "mem GiB", "steps"))
  for _, B in ipairs(a.batches) do
    local chunk = math.min(a.prompt, generate.LONE_PROMPT_ROWS)
    local opts = { device = a.device, slots = B, ctx = a.ctx, weights = a.weights, kv = kv_mode,
      rows = math.max(B, chunk), chunk = chunk }
    -- a batch the device cannot hold is reported and skipped, so a list may reach past memory
    local plan, free = model:replica_bytes(opts), gptoss.device_memory(a.device)
    if plan.total + plan.headroom > free then
      print(("%6d does not fit: needs %.2f GiB with headroom, %.2f GiB free"):format(B,
        (plan.total + plan.headroom) / 2 ^ 30, free / 2 ^ 30))
      goto next_batch
    end
    local r = model:replica(opts)
    local last = {}
    for s = 1, B do
      local ids = {}
      for p = 0, a.prompt - 1 do ids[p + 1] = cmdline.bench_id(s, p, c.vocab_size) end
      local tokens = generate.feed(r, s, ids, 0):tokens()
      last[s] = tokens[#tokens]
    end
    local ds = {}
    for s = 1, B do ds[s] = s end
    local steps, bytes = 0, 0
    local t0 = gptoss.clock()
    local pending -- device feed: the step whose tokens the host has not read yet
    for pos = a.prompt, a.ctx - 1 do
      local positions = {}
      for s = 1, B do positions[s] = pos end
      if a.feed == "host" then
        last = r:step({ slots = ds, positions = positions, tokens = last }):tokens()
      else
        local h = r:step({ slots = ds, positions = positions, tokens = pending or last })
        if pending then last = pending:tokens() end
        pending = h
      end
      steps = steps + 1
      bytes = bytes + step_bytes(B, pos)
    end
    if pending then last = pending:tokens() end
    local secs = gptoss.clock() - t0
    local res = {
      bench = "gpu_decode", model = a.model, weights = a.weights, device = gptoss.device(a.device).name,
      batch = B, ctx = a.ctx, prompt = a.prompt, feed = a.feed, steps = steps, seconds = secs,
      tok_per_s = B * steps / secs,
      step_ms = 1000 * secs / steps, gb_per_s = bytes / secs / 1e9, copy_gb_per_s = copy_bw / 1e9,
      memory = r.memory,
    }
    rows[#rows + 1] = res
    print(("%6d %10.1f %10.3f %10.1f %9.1f %10.2f %10d"):format(B, res.tok_per_s, res.step_ms, res.gb_per_s,
      100 * bytes / secs / copy_bw, r.memory.total / 2 ^ 30, steps))
    if a.profile_steps > 0 then
      -- start: the slots emptied, positions from 0; end: the run's last positions again
      local first = a.profile_at == "end" and math.max(0, a.ctx - a.profile_steps) or 0
      if first == 0 then
        for s = 1, B do r:reset(s) end
      end
      local slots, positions, tokens = {}, {}, {}
      for s = 1, B do slots[s], tokens[s] = s, last[s] end
      local kv = 0
      r:profile(true)
      for pos = first, first + a.profile_steps - 1 do
        for s = 1, B do positions[s] = pos end
        tokens = r:step({ slots = slots, positions = positions, tokens = tokens }):tokens()
        kv = kv + kv_bytes(B, pos)
      end
      local prof = r:profile()
      r:profile(false)
      local total = 0
      for _, p in ipairs(prof) do total = total + p.seconds end
      table.sort(prof, function(x, y) return x.seconds > y.seconds end)
      res.profile = prof
      print(("  per kernel, %d steps at B=%d, positions %d..%d:"):format(a.profile_steps, B, first,
        first + a.profile_steps - 1))
      for _, p in ipairs(prof) do
        print(("    %-14s %9.3f ms/step %6d calls %6.1f%%"):format(p.label, 1000 * p.seconds / a.profile_steps,
          p.calls, 100 * p.seconds / total))
        if p.label == "attention" then
          res.attention = { kv_bytes = kv / a.profile_steps, gb_per_s = kv / p.seconds / 1e9,
            copy_fraction = kv / p.seconds / copy_bw }
        end
      end
      if res.attention then
        print(("  attention reads %.1f MiB of keys and values a step: %.1f GB/s, %.1f%% of copy"):format(
          res.attention.kv_bytes / 2 ^ 20, res.attention.gb_per_s, 100 * res.attention.copy_fraction))
      end
    end
    r:close()
    ::next_batch::
  end
  for _, res in ipairs(rows) do print(json.encode(res)) end
  record(rows, { a.device })
  if a.plot then plot.write(rows, a.plot) end
end)
