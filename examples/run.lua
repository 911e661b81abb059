#!/usr/bin/env lua5.4
-- The course's command line (docs/course.md#the-command-line), installed as gptoss-run by
-- the rockspec:
--   run.lua <model.bin> -m getp -i requests.txt -o output.txt [-n 1024] [-t 0 -p 0.9 -s 0] [-z tokenizer.bin]
--   run.lua <model.bin> [-m generate] -i "prompt" [-n steps]
--   <model.bin> may also be a checkpoint directory (docs/checkpoints.md) or a synthetic
--   shape: run.lua 7m ... (gptoss.naming)
-- plus our long options (--device, --weights, --kv, --slots, --threads, --scheduler,
-- --partition, --chat, --no-share-prefix, --top-k, --min-p, --presence-penalty,
-- --frequency-penalty, --max-tokens, --stop, --profile, --quiet, --json; lua/gptoss/cli.lua
-- has the parsing and the course's rules).
--
-- stdout carries what run.cpp prints: the 15 header lines at load, then
--   getp      "requests size = N B", "Num requests: N", "\nwarm up elapsed time(s): X\n"
--             (getp.new: building the replicas), "\nelapsed time(s): X, achieved throughput
--             TPS (tok/s): Y\n" (g:run only, CLOCK_REALTIME whole milliseconds, Y = tokens /
--             ms * 1000), then the output file is written (untimed) and "\nfinish elapsed
--             time(s): X\n" (closing the replicas)
--   generate  the prompt's first piece and every later one as the course's generate loop
--             feeds them, one position a step on one slot, then "\n"; on stderr
--             "achieved tok/s: X" timed from after the first step, as the course does
-- and after them --profile's tables and --json's line (which names the tokenizer file used).
-- stderr also carries notes (request-file warnings, the replicas chosen) and, on a
-- terminal, progress lines (a CPU replica's weights being materialised, getp's tokens);
-- --quiet drops the replicas' and the progress, not the request file's warnings.
--
-- Sampling: greedy unless -t > 0 or a penalty is given. generate then draws with the course's
-- sampler (one xorshift stream, docs/course.md#the-sampler), exactly as run.cpp, unless
-- --top-k, --min-p or a penalty is given, which the course's sampler does not have: then the
-- default-mode sampler draws (docs/api.md#default-mode, seeded with -s, as getp's request 1;
-- greedy on the penalized logits with -t 0). getp draws with gptoss.getp's seeded
-- per-request sampler (seed -s + request - 1), since the course's single stream depends on
-- the order in which requests are sampled, which batching changes.
-- Under mpirun or srun getp runs on every rank of the job (gptoss.getp_ranks,
-- docs/getp.md#ranks-under-mpi): rank 0 reads the request file, writes the output file and
-- prints the lines above, timed across all ranks, and a rank's failure ends the whole job
-- with one message naming the rank.
-- Exit status: 0 done, 1 anything wrong (usage, files, model, run), with one message on
-- stderr (a usage error adds where the usage is). The files named (-o, -z, -i) are all
-- checked before the header is printed, so that a mistyped one costs no inference.
local NAME = (arg and arg[0] or "run.lua"):match("[^/]*$")

local function fail(msg)
  io.stdout:flush()
  io.stderr:write(NAME, ": ", msg, "\n")
  os.exit(1)
end

-- a module that cannot be loaded (the library not built or not on the path) is one line
local function need(module)
  local ok, m = pcall(require, module)
  if not ok then
    local first_line = tostring(m):match("^[^\n]*"):gsub("^.-%.lua:%d+: ", ""):gsub(":$", "")
    fail(first_line .. " (docs/building.md: building, and running from the source tree)")
  end
  return m
end
local gptoss = need "gptoss"
local cli = need "gptoss.cli"
local cmdline = need "gptoss.cmdline"
local naming = need "gptoss.naming"
local getp = need "gptoss.getp"
local requests = need "gptoss.requests"
local progress = need "gptoss.progress"
local stops = need "gptoss.stops"
local mpi = need "gptoss.mpi"
local getp_ranks = need "gptoss.getp_ranks"

-- docs/course.md#generation-rule-and-token-count: the stop ids the course's loops test
local STOP = { [199999] = true, [200002] = true }
-- --json's fields, in the order they are written
local JSON_ORDER = { "mode", "model", "tokenizer", "devices", "weights", "kv", "slots", "scheduler", "partition",
  "requests", "prompt_tokens", "steps_limit", "tokens", "generated", "steps", "prefill_saved", "elapsed", "tok_per_s",
  "warm_up", "finish", "ranks" }

-- the rank mpirun or srun gave this process, nil when none did
local launched = mpi.launched()

-- Under a launcher, an error every rank meets alike (its arguments, a build without MPI) is
-- said by rank 0 alone. The others must not end first: mpirun would end rank 0 with them,
-- perhaps before it has said it. With MPI they meet rank 0 (and their exits then wait for
-- each other's); without it they end with status 0, leaving the job's status to rank 0.
local function leave_it_to_rank_0()
  if not launched then return end
  if mpi.available then pcall(mpi.barrier) end
  if launched ~= 0 then os.exit(mpi.available and 1 or 0) end
end

local function usage_error(msg)
  leave_it_to_rank_0()
  cmdline.usage_exit(NAME, msg, 1)
end

local a, why = cli.parse(arg, NAME, os.time())
if not a then usage_error(why) end
if a.mode == "chat" then
  usage_error("-m chat is not supported: the course's chat mode is leftover llama2 code ([INST] template, "
    .. "end-of-turn token 2); use -m generate or -m getp")
end
-- the course's getp exits silently when either is missing
if a.mode == "getp" and (a.input == nil or a.output == nil) then
  usage_error("-m getp needs -i <request file> and -o <output file>")
end
if a.mode == "generate" and a.input == nil then
  usage_error("-m generate needs a prompt: -i \"text\"")
end
local json = a.json and need "dkjson"

-- getp under mpirun or srun runs on every rank of the job (docs/getp.md#ranks-under-mpi)
local job
if a.mode == "getp" and launched then
  local started, ranks = pcall(getp_ranks.new, mpi)
  if not started then
    leave_it_to_rank_0()
    fail(cmdline.message(ranks))
  end
  job = ranks
else
  job = getp_ranks.one_process()
end

local function note(msg)
  if not a.quiet and job.prints then io.stderr:write(NAME, ": ", msg, "\n") end
end

local function stderr_write(s) io.stderr:write(s) end
-- (a rank's stderr is no terminal of its own: mpirun passes it on)
local show_progress = not a.quiet and gptoss.isatty(2) and not launched
local bars = {} -- the progress lines drawn, to end one left open when the run fails

local function new_bar(format)
  local bar = progress.new { write = stderr_write, format = format }
  bars[#bars + 1] = bar
  return bar
end

-- A CPU replica's on_progress on a terminal (nil otherwise): its weights being materialised.
local function weights_progress(device)
  if not show_progress or device ~= "cpu" then return nil end
  local bar, start = new_bar(progress.weights), nil
  return function(done, total)
    start = start or gptoss.clock()
    bar:update { done = done, total = total, elapsed = gptoss.clock() - start }
  end
end

-- something is there, of any kind (io.open would wait for a writer on a named pipe; the reader refuses one)
local function exists(path) return gptoss.regular_file(path) ~= nil end

local function seconds(ms) return ms / 1000 end

local device_name = getp.device_name

-- --profile's table (GPU) and memory line of each replica, read while they are open
local function profile_report(replicas, wall)
  local lines = {}
  for k, r in ipairs(replicas) do
    local name = ("replica %d (%s)"):format(k, device_name(r.device))
    local rows = cmdline.profile_lines(name, r.device ~= "cpu" and r:profile() or nil, wall)
    table.move(rows, 1, #rows, #lines + 1, lines)
    lines[#lines + 1] = cmdline.memory_line(name, r.memory)
  end
  return table.concat(lines, "\n") .. "\n"
end

local function start_profiling(replicas)
  for _, r in ipairs(replicas) do
    if r.device ~= "cpu" then r:profile(true) end
  end
end

-- getp on the job's processes (gptoss.getp_ranks: this one, or the ranks of an MPI job):
-- each builds and runs its share, the printer (rank 0) prints the course's lines, the
-- elapsed times being from a barrier to the agreement after on every rank.
local function run_getp(job, model, tok, steps, prompts, devices, weights, kv, figures)
  if job.prints then
    -- docs/course.md#request-buffers: its two request buffers, as it prints their size
    io.write(("requests size = %d B\n"):format(#prompts * tok.max_token_length * (steps + 1) * 2))
    io.write(("Num requests: %d\n"):format(#prompts))
    io.flush()
  end
  local share = job:share(prompts, { model = model, tokenizer = tok, steps = steps, chat = a.chat, seed = a.seed },
    devices, a.partition)
  a.seed = share.seed -- rank 0's: a seed taken from the clock differs from rank to rank

  local bar = show_progress and new_bar(progress.format) or nil
  local warm, g = job:timed(function()
    return getp.new {
      model = model, tokenizer = tok, devices = devices, steps = steps, sampling = (cli.sampling(a)),
      replica = { weights = weights, kv = kv, slots = a.slots, threads = a.threads,
        on_progress = weights_progress(devices[1]) },
      partition = share.partition, scheduler = a.scheduler, requests = share.prompts,
      request_numbers = share.numbers, chat = a.chat, share_prefix = not a.no_share_prefix,
      on_progress = bar and function(p) bar:update(p) end,
    }
  end)
  if job.prints then
    io.write(("\nwarm up elapsed time(s): %f\n"):format(seconds(warm)))
    io.flush()
  end
  for k, line in ipairs(job:gather(g:describe()) or {}) do note(job:named(k, line)) end
  local slots = {}
  for k, r in ipairs(g.replicas) do slots[k] = r.slots end
  local all_slots = job:gather(table.concat(slots, ","))
  figures.weights, figures.kv = g.replicas[1].weights, g.replicas[1].kv
  if a.profile then start_profiling(g.replicas) end

  local ms, own = job:timed(function() return g:run() end)
  local result = job:collect(own)
  local report = a.profile and profile_report(g.replicas, seconds(ms))
  local reports = report and job:gather(report)
  if job.prints then
    local tps = cli.tps(result.tokens, ms)
    io.write(("\nelapsed time(s): %f, achieved throughput TPS (tok/s): %f\n"):format(seconds(ms), tps))
    io.flush()
    figures.requests, figures.tokens, figures.steps = #prompts, result.tokens, result.steps
    figures.prefill_saved, figures.elapsed, figures.tok_per_s = result.prefill_saved, seconds(ms), tps
  end

  -- rank 0 writes it within an agreement: the others, waiting for it in the next barrier,
  -- hear of a write that fails
  job:agree(function() if job.prints then requests.write(a.output, result.outputs) end end)

  local finish = job:timed(function() g:close() end)
  if not job.prints then return end
  io.write(("\nfinish elapsed time(s): %f\n"):format(seconds(finish)))
  for k, text in ipairs(reports or {}) do io.write(job:named(k, text)) end
  io.flush()
  figures.slots = {}
  for _, list in ipairs(all_slots) do
    for n in list:gmatch("%d+") do figures.slots[#figures.slots + 1] = tonumber(n) end
  end
  figures.devices, figures.ranks = job.devices_all, job.size
  figures.warm_up, figures.finish = seconds(warm), seconds(finish)
  figures.scheduler, figures.partition = a.scheduler, g.partition_name
end

-- The course's generate (run.cpp, docs/course.md#the-command-line): one position a step,
-- the prompt forced until its last token, then sampled ids until a stop id or `steps`
-- positions; and ours: until --max-tokens ids or a --stop string. Text is printed through the
-- tokenizer's decoder, whole UTF-8 characters only.
local function run_generate(model, tok, steps, prompt, device, weights, kv, figures)
  local r <close> = model:replica { device = device, slots = 1, ctx = steps, weights = weights, kv = kv,
    threads = a.threads, on_progress = weights_progress(device) }
  note(tostring(r))
  figures.weights, figures.kv = r.weights, r.kv
  if a.profile then start_profiling { r } end
  local sampling, default_mode = cli.sampling(a)
  local course_sampler = sampling and not default_mode
      and gptoss.sampler { mode = "course", temperature = a.temperature, top_p = a.top_p, seed = a.seed }
  local filter = #a.stop > 0 and stops.text(a.stop)
  local decoder = tok:decoder()
  io.write(decoder:add(prompt[1]))
  io.flush()
  local t0 = gptoss.realtime_ms()
  local token, pos, start, generated, stopped = prompt[1], 0, nil, 0, false
  while pos < steps do
    local sampled = pos >= #prompt - 1 -- this step's id is generated, not the prompt's
    if sampled and a.max_tokens and generated >= a.max_tokens then break end
    -- the replica draws, keyed by (seed, position); set at the first generated id, so that the
    -- penalties count generated ids only, as getp's
    if default_mode and pos == #prompt - 1 then r:sampling(1, sampling) end
    local h = r:step { slots = { 1 }, positions = { pos }, tokens = { token } }
    local next_id
    if sampled then
      next_id = course_sampler and course_sampler:sample(h:logits()[1]) or h:tokens()[1]
      generated = generated + 1
    else
      next_id = prompt[pos + 2]
    end
    pos = pos + 1
    if STOP[next_id] then break end
    local text = decoder:add(next_id)
    if filter and sampled then text, stopped = filter:add(text) end
    io.write(text)
    io.flush()
    if stopped then break end
    token = next_id
    start = start or gptoss.realtime_ms() -- the first step can be slower, so the course skips it
  end
  if not stopped then -- what the decoder and the stop filter still hold
    local rest = decoder:flush()
    if filter then
      rest, stopped = filter:add(rest)
      if not stopped then rest = rest .. filter:flush() end
    end
    io.write(rest)
  end
  io.write("\n")
  io.flush()
  local stop = gptoss.realtime_ms()
  local tps = pos > 1 and cli.tps(pos - 1, stop - start)
  if tps then io.stderr:write(("achieved tok/s: %f\n"):format(tps)) end
  if a.profile then io.write(profile_report({ r }, seconds(stop - t0))) end
  figures.requests, figures.slots, figures.tokens, figures.steps = 1, { 1 }, pos - 1, pos
  figures.generated, figures.prompt_tokens = generated, #prompt
  figures.elapsed, figures.tok_per_s = start and seconds(stop - start) or 0, tps or 0
end

-- The model, the steps, the tokenizer and the inputs, opened and read before the header:
-- the course prints it first, but an error after it reads as a run that started. getp's
-- request file is the printer's to read (rank 0's), and its output file to write.
local function open_inputs()
  if a.mode == "getp" and job.prints then cmdline.check_writable("-o", a.output) end
  local model = naming.open(a.model, a.seed_weights)
  local steps = getp.clamp_steps(a.steps, model.config.seq_len)
  local path, missing = cli.tokenizer_path(a.tokenizer, exists)
  if not path then error(missing, 0) end
  local tok = gptoss.tokenizer(path, { vocab_size = model.config.vocab_size })
  local prompts, prompt
  if a.mode == "generate" then
    prompt = tok:encode(a.input, { max_tokens = model.config.initial_context_length })
    if #prompt == 0 then error("the prompt encodes to no tokens (the course's generate exits there)", 0) end
  elseif job.prints then
    local warnings
    prompts, warnings = requests.read(a.input, { max_token_length = tok.max_token_length, steps = steps })
    for _, w in ipairs(warnings) do io.stderr:write(NAME, ": warning: ", w, "\n") end
    -- getp stops at an empty prompt, as the course's does: say so before any work, not after the warm-up
    for i, p in ipairs(prompts) do
      if p == "" then
        error(("%s: request %d is empty: it encodes to no tokens, and getp would stop there, as the course's "
          .. "does (the warning above says why)"):format(a.input, i), 0)
      end
    end
  end
  return model, steps, tok, prompts, prompt, path
end

local function devices_of()
  local devices = job:devices(a.device)
  if a.threads and devices[1] ~= "cpu" then
    local msg = "--threads is for CPU replicas (--device cpu)"
    if not job.rank then usage_error(msg) end
    error(msg, 0) -- a rank's devices are its own: every rank hears of it (job:agree)
  end
  return devices
end

local function main()
  local devices = job:agree(devices_of)
  local model, steps, tok, prompts, prompt, tokenizer_path = job:agree(open_inputs)
  if job.prints then
    io.write(cli.header(model.config))
    io.flush()
  end

  -- without --weights / --kv each replica picks (the CPU fp32; GPUs mxfp4 where the experts
  -- are exactly MXFP4, else bf16; the KV cache fp32 with fp32 weights, else bf16)
  local weights, kv = a.weights, a.kv

  local figures = {
    mode = a.mode, model = naming.describe(a.model), tokenizer = tokenizer_path,
    devices = devices, weights = weights, kv = kv, steps_limit = steps,
  }
  if a.mode == "getp" then
    run_getp(job, model, tok, steps, prompts, devices, weights, kv, figures)
  else
    run_generate(model, tok, steps, prompt, devices[1], weights, kv, figures)
  end
  if json and job.prints then print(json.encode(figures, { keyorder = JSON_ORDER })) end
end

local ok, err = pcall(main)
if not ok then
  for _, bar in ipairs(bars) do bar:close() end
  if job.rank and not getp_ranks.is_failure(err) then
    -- this rank's alone: the others may be waiting for it in a collective
    mpi.abort(("%s: %s: %s"):format(NAME, job:label(job.rank), cmdline.message(err)))
  end
  if job.prints then fail(cmdline.message(err)) end
  os.exit(1)
end
