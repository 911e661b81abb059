--- gptoss.results_kinds: how a benchmark's own JSON line reads in examples/RESULTS.md, by its
-- "bench": the benchmark's name there, its configuration (what a later run must repeat to
-- replace the row: the same text) and its figure. A kind with a `sweep` (bench_gpu's batch
-- sizes) prints a line per value in one run; the run's lines make one row, in sweep order.
-- The texts follow the table's conventions (examples/RESULTS.md's header): the synthetic 20b
-- and each benchmark's defaults go unsaid.
local kinds = {}

local WORDS = { "one", "two", "three", "four", "five", "six", "seven", "eight" }

--- n in words up to eight ("two"), else in digits.
function kinds.number(n)
  return WORDS[n] or tostring(n)
end

--- "one GPU", "two GPUs", "12 GPUs".
function kinds.count(n, thing)
  return ("%s %s%s"):format(kinds.number(n), thing, n == 1 and "" or "s")
end

-- the parts that are there (not nil or false), joined by ", "
local function join(...)
  local kept = {}
  for i = 1, select("#", ...) do
    local part = select(i, ...)
    if part then kept[#kept + 1] = part end
  end
  return table.concat(kept, ", ")
end

-- a list of numbers in one format, " / " between them
local function each(list, format)
  local texts = {}
  for i, v in ipairs(list) do texts[i] = format:format(v) end
  return table.concat(texts, " / ")
end

kinds.gpu_decode = {
  benchmark = "bench_gpu",
  sweep = "batch",
  configuration = function(r)
    return join(r.model ~= "20b" and r.model, ("ctx %d"):format(r.ctx), r.weights,
      r.prompt and r.prompt ~= 16 and ("prompt %d"):format(r.prompt), r.feed == "host" and "feed host")
  end,
  figure = function(run)
    local parts = {}
    for i, r in ipairs(run) do
      local ms = r.step_ms and (i == 1 and " (%.3f ms a step)" or " (%.3f ms)"):format(r.step_ms) or ""
      parts[i] = ("B=%d %.1f%s%s"):format(r.batch, r.tok_per_s, i == 1 and " tok/s" or "", ms)
    end
    return table.concat(parts, ", ")
  end,
}

kinds.getp = {
  benchmark = "bench_getp",
  configuration = function(r)
    local per_device = r.replicas_per_device or 1
    return join(r.model ~= "20b" and r.model, ("%d requests"):format(r.requests),
      r.device == "cpu" and "CPU" or kinds.count(#r.slots // per_device, "GPU"), r.weights,
      r.steps_limit ~= 1024 and ("steps %d"):format(r.steps_limit),
      r.prompt_length and ("prompts of %d tokens"):format(r.prompt_length), r.chat and "chat",
      per_device > 1 and ("%d replicas a device"):format(per_device))
  end,
  figure = function(run)
    local r = run[1]
    return ("%.1f tok/s (%.3f s, %d engine steps); getp's Lua %s ms a step, waiting %s"):format(r.tok_per_s,
      r.seconds, r.engine_steps, each(r.host_ms_per_step, "%.3f"), each(r.waited_ms_per_step, "%.3f"))
  end,
}

kinds.prefill = {
  benchmark = "bench_prefill",
  sweep = "length",
  configuration = function(r)
    return join(r.model ~= "20b" and r.model, r.weights, ("one slot, chunks of %d"):format(r.chunk))
  end,
  figure = function(run)
    local parts = {}
    for i, r in ipairs(run) do
      parts[i] = ("%d tokens: TTFT %.1f ms (%.1f prompt tok/s)"):format(r.length, r.ttft_ms, r.tok_per_s)
    end
    return table.concat(parts, "; ")
  end,
}

kinds.golden = {
  benchmark = "bench_golden",
  configuration = function(r)
    return ("%s, %s, %d slot%s, %d threads, prompt %d, decode %d"):format(r.model, r.weights, r.slots,
      r.slots == 1 and "" or "s", r.threads, r.prompt, r.decode)
  end,
  figure = function(run)
    local r = run[1]
    return ("prefill %.3f s (%.1f rows/s), decode %.3f s (%.1f rows/s)"):format(r.prefill_s, r.prefill_rows_per_s,
      r.decode_s, r.decode_rows_per_s)
  end,
}

kinds.sampler = {
  benchmark = "bench_sampler",
  configuration = function(r)
    return ("%d draws a configuration on %d-wide rows: flat (a 7m logits row) / peaked (× %g), ms a draw")
      :format(r.draws, r.vocab, r.sharpen)
  end,
  figure = function(run)
    local ms, names = run[1].ms_per_draw, {}
    for name in pairs(ms) do names[#names + 1] = name end
    table.sort(names)
    for i, name in ipairs(names) do names[i] = ("%s %.3f / %.3f"):format(name, ms[name].flat, ms[name].peaked) end
    return table.concat(names, "; ")
  end,
}

kinds.tokenizer = {
  benchmark = "bench_tokenizer",
  configuration = function(r)
    return ("%s mode, %s repeated to %g MB"):format(r.mode, r.text:match("[^/]*$"), r.mb)
  end,
  figure = function(run)
    local r = run[1]
    return ("encode %.2f MB/s one call, %.2f one call a line; decode %.1f MB/s; %.2f bytes a token"):format(
      r.encode_mb_per_s, r.encode_lines_mb_per_s, r.decode_mb_per_s, r.bytes / r.tokens)
  end,
}

kinds.serve = {
  benchmark = "bench_serve",
  configuration = function(r)
    local pace = r.concurrency and ("concurrency %d"):format(r.concurrency)
      or r.rate == "inf" and "unbounded rate" or ("%g requests a second"):format(r.rate)
    local chat = (r.chat_fraction or 0) > 0 and (", %g%% of them chat%s"):format(r.chat_fraction * 100,
      r.json_schema and " with json_schema " .. r.json_schema or "") or ""
    return ("%d streamed completions%s, %s lengths, %s"):format(r.requests, chat, r.lengths, pace)
  end,
  figure = function(run)
    local r = run[1]
    local p = function(m) return ("%.2f / %.2f / %.2f"):format(r[m].p50, r[m].p90, r[m].p99) end
    return ("%.1f output tok/s (%.2f s); TTFT p50 / p90 / p99 %s ms, TPOT %s, ITL %s"):format(r.output_tok_per_s,
      r.elapsed, p("ttft_ms"), p("tpot_ms"), p("itl_ms"))
  end,
}

kinds.grammar = {
  benchmark = "bench_grammar",
  configuration = function(r)
    return ("a %d-property JSON schema (and with bounded strings), %d-token vocabulary, %d walks of up to %d tokens")
      :format(r.properties, r.vocab, r.walks, r.tokens)
  end,
  figure = function(run)
    local parts = {}
    for _, which in ipairs { "typical", "bounded" } do
      local s = run[1][which]
      parts[#parts + 1] = ("%s: compile %.2f ms, mask mean / p99 %.1f / %.0f µs replayed, %.1f / %.0f µs walked")
        :format(which, s.compile_ms.mean, s.mask_us.replay.mean, s.mask_us.replay.p99, s.mask_us.walks.mean,
          s.mask_us.walks.p99)
    end
    return table.concat(parts, "; ")
  end,
}

kinds.vendor_gemm = {
  benchmark = "tools/bench_vendor_gemm.py",
  sweep = "rows",
  configuration = function(r)
    return ("one decode step's products through torch %s / cuBLAS (experts through `%s`)"):format(r.torch,
      r.experts)
  end,
  figure = function(run)
    local parts = {}
    for i, r in ipairs(run) do
      parts[i] = ("%d rows %.3f ms (qkv + o + mlp1 + mlp2 + logits: %.3f + %.3f + %.3f + %.3f + %.3f; %.1f TFLOP/s)")
        :format(r.rows, r.step_ms, r.ms.qkv, r.ms.o, r.ms.mlp1, r.ms.mlp2, r.ms.logits, r.tflops)
    end
    return table.concat(parts, "; ")
  end,
}

return kinds
