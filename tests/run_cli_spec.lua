-- The course's command line, examples/run.lua: its parts in process (gptoss.cli's parsing
-- and the course's rules for -t -p -s -n, our options, the header
-- and table text, gptoss.progress with a fake writer and reports of chosen elapsed times,
-- gptoss.realtime_ms and gptoss.isatty), then the script itself as a child process on CPU
-- replicas of the synthetic 7m model: getp's output file equal to gptoss.getp.run's outputs
-- in process and the course's lines (docs/course.md#control-flow-and-timing) in their
-- formats, generate's text equal to the course's loop (run.cpp) written plainly here (and
-- cut by --max-tokens and --stop, sampled by the default-mode sampler under --top-k/--min-p),
-- --json, and every error one message on stderr with status 1: no traceback, no Lua
-- position, no prefix twice, usage errors followed by where the usage is.
local gptoss = require "gptoss"
local cli = require "gptoss.cli"
local cmdline = require "gptoss.cmdline"
local progress = require "gptoss.progress"
local getp = require "gptoss.getp"
local requests = require "gptoss.requests"
local json = require "dkjson"
local H = require "helpers"
local tmp, cleanup, write_file, read_file = H.tmp, H.cleanup, H.write_file, H.read_file

local f32 = function(x) return (string.unpack("<f", string.pack("<f", x))) end
local TOKENIZER = H.TOKENIZER

describe("gptoss.cli", function()
  local function parse(...)
    return cli.parse({ ... }, "run.lua", 1234)
  end

  it("takes a course flag's next argument as its value, whatever it looks like", function()
    assert.are.same({ "m.bin", "--temperature=-1", "--input=-hello", "--input=", "--quiet", "-n" },
      cli.rewrite { "m.bin", "-t", "-1", "-i", "-hello", "-i", "", "--quiet", "-n" })
    local a = assert(parse("m.bin", "-t", "-1", "-i", "--x", "-n", "-5", "-m", "getp", "-o", "-t"))
    assert.are.equal("m.bin", a.model)
    assert.are.equal(0.0, a.temperature)
    assert.are.equal("--x", a.input)
    assert.are.equal(0, a.steps)
    assert.are.equal("getp", a.mode)
    assert.are.equal("-t", a.output)
    -- the checkpoint anywhere, the last of a repeated flag, an empty prompt
    a = assert(parse("-n", "5", "-n", "7", "m.bin", "-i", ""))
    assert.are.equal(7, a.steps)
    assert.are.equal("m.bin", a.model)
    assert.are.equal("", a.input)
    -- the course's defaults, and ours
    a = assert(parse("7m"))
    assert.are.same({ 0.0, f32(0.9), 1234, 1024, "generate", gptoss.DEFAULT_SEED, {} },
      { a.temperature, a.top_p, a.seed, a.steps, a.mode, a.seed_weights, a.stop })
    for _, unset in ipairs { "tokenizer", "device", "top_k", "min_p", "max_tokens", "threads" } do
      assert.is_nil(a[unset], unset)
    end
  end)

  it("applies the course's post-processing of -t -p -s -n (docs/course.md#the-command-line)", function()
    local function norm(t, p, s, n) return cli.normalize({ temperature = t, top_p = p, seed = s, steps = n }, 99) end
    assert.are.same({ temperature = 0.0, top_p = f32(0.9), seed = 99, steps = 0 }, norm(-0.5, 1.5, 0, -3))
    assert.are.same({ temperature = f32(0.7), top_p = 0.0, seed = -5, steps = 12 }, norm(0.7, 0, -5, 12))
    assert.are.same({ temperature = 0.0, top_p = 1.0, seed = 7, steps = 0 }, norm(1e-50, 1, 7, 0))
    assert.are.equal(f32(0.9), norm(0, -0.01, 1, 1).top_p)
    assert.are.equal(math.huge, norm(1e300, 0.5, 1, 1).temperature) -- the course's float is inf too
    assert.are.equal(2048, getp.clamp_steps(0, 2048))
    assert.are.equal(2048, getp.clamp_steps(2049, 2048))
    assert.are.equal(2048, getp.clamp_steps(2048, 2048))
    assert.are.equal(1, getp.clamp_steps(1, 2048))
  end)

  it("parses our long options and refuses bad values, naming the flag", function()
    local a = assert(parse("20b-2l", "--device", "2, 0", "--weights", "fp32", "--slots", "8",
      "--scheduler", "static", "--partition", "blocks", "--profile", "--quiet", "--json", "--seed-weights", "3"))
    assert.are.same({ "20b-2l", { 2, 0 }, "fp32", 8, "static", "blocks", true, true, true, 3 },
      { a.model, a.device, a.weights, a.slots, a.scheduler, a.partition, a.profile, a.quiet, a.json,
        a.seed_weights })
    assert.are.same({ "cpu" }, assert(parse("7m", "--device", "cpu")).device)
    for _, case in ipairs {
      { { "m.bin", "7m" }, "too many arguments" },
      { {}, "missing argument 'model'" },
      { { "--synthetic", "7m" }, "--synthetic 7m is now written 7m: a synthetic shape is named as the model" },
      { { "synthetic:7m" }, "'synthetic:7m' is now written 7m: a synthetic shape is named as the model" },
      { { "m.bin", "-m", "chats" }, "-m: unknown mode 'chats' (known: generate, getp; the course's chat is not supported)" },
      { { "m.bin", "-t", "hot" }, "-t: 'hot' is not a number" },
      { { "m.bin", "-p", "nan" }, "-p: 'nan' is not a number" },
      { { "m.bin", "-s", "1.5" }, "-s: '1.5' is not an integer" },
      { { "m.bin", "-n", "ten" }, "-n: 'ten' is not an integer" },
      { { "m.bin", "--slots", "0" }, "--slots: '0' is not an integer >= 1" },
      { { "m.bin", "--device=-1" }, "--device: '-1' is not \"cpu\" or distinct GPU numbers from 0" },
      { { "m.bin", "--device", "1,1" }, "--device: '1,1' is not" },
      { { "m.bin", "--device", "cpu,1" }, "--device: 'cpu,1' is not" },
      { { "m.bin", "--devices", "0" }, "--devices 0 is now written --device 0" },
      { { "m.bin", "--max-new", "5" }, "--max-new 5 is now written --max-tokens 5" },
      { { "m.bin", "--weights", "fp16" }, "argument for option '--weights' must be one of 'fp32', 'bf16'" },
      { { "m.bin", "-x", "1" }, "unknown option '-x'" },
      { { "m.bin", "-i" }, "option '-i' requires an argument" },
      { { "m.bin", "--top-k=-1" }, "--top-k: '-1' is not an integer >= 0" },
      { { "m.bin", "--top-k", "2.5" }, "--top-k: '2.5' is not an integer >= 0" },
      { { "m.bin", "--min-p", "1.5" }, "--min-p: '1.5' is not a number in [0, 1]" },
      { { "m.bin", "--min-p", "nan" }, "--min-p: 'nan' is not a number in [0, 1]" },
      { { "m.bin", "--presence-penalty", "2.5" }, "--presence-penalty: '2.5' is not a number in [-2, 2]" },
      { { "m.bin", "--frequency-penalty=-3" }, "--frequency-penalty: '-3' is not a number in [-2, 2]" },
      { { "m.bin", "--max-tokens", "x" }, "--max-tokens: 'x' is not an integer >= 0" },
      { { "m.bin", "--threads=-2" }, "--threads: '-2' is not an integer >= 0" },
      { { "m.bin", "--stop", "" }, "--stop: an empty stop string would stop before the first token" },
      { { "m.bin", "-m", "getp", "--max-tokens", "5" },
        "--max-tokens is for -m generate: getp's requests end at -n positions or a stop id, as the course's" },
      { { "m.bin", "-m", "getp", "--stop", "x" }, "--stop is for -m generate" },
    } do
      local a2, err = cli.parse(case[1], "run.lua", 0)
      assert.is_nil(a2, table.concat(case[1], " "))
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)

  it("parses the sampling filters, --max-tokens, the repeatable --stop and --threads", function()
    local a = assert(parse("m.bin", "--top-k", "40", "--min-p", "0.05", "--max-tokens", "0", "--stop", "\n\n",
      "--stop", "The end", "--threads", "3"))
    assert.are.same({ 40, 0.05, 0, { "\n\n", "The end" }, 3 }, { a.top_k, a.min_p, a.max_tokens, a.stop, a.threads })
    -- the sampler: none when greedy; the default mode's with a filter, the course's without
    assert.is_nil(cli.sampling(a))
    a = assert(parse("m.bin", "-t", "0.5", "-s", "9", "--top-k", "40"))
    local sampling, default_mode = cli.sampling(a)
    assert.are.same({ temperature = 0.5, top_p = f32(0.9), top_k = 40, seed = 9 }, sampling)
    assert.is_true(default_mode)
    sampling, default_mode = cli.sampling(assert(parse("m.bin", "-t", "0.5", "-s", "9", "--min-p", "0")))
    assert.are.same({ temperature = 0.5, top_p = f32(0.9), min_p = 0, seed = 9 }, sampling)
    assert.is_true(default_mode)
    sampling, default_mode = cli.sampling(assert(parse("m.bin", "-t", "0.5", "-s", "9")))
    assert.are.same({ temperature = 0.5, top_p = f32(0.9), seed = 9 }, sampling)
    assert.is_false(default_mode)
    -- getp takes the filters
    a = assert(parse("m.bin", "-m", "getp", "-t", "1", "--top-k", "3", "--min-p", "0.5"))
    assert.are.same({ 3, 0.5 }, { cli.sampling(a).top_k, cli.sampling(a).min_p })
    -- a penalty makes the default mode draw, greedy on the penalized logits with -t 0; 0 is none
    sampling, default_mode = cli.sampling(assert(parse("m.bin", "-s", "9", "--presence-penalty", "0.5",
      "--frequency-penalty=-1")))
    assert.are.same({ temperature = 0, top_p = f32(0.9), seed = 9, presence_penalty = 0.5, frequency_penalty = -1 },
      sampling)
    assert.is_true(default_mode)
    assert.is_nil(cli.sampling(assert(parse("m.bin", "--presence-penalty", "0", "--frequency-penalty", "0"))))
  end)

  it("finds the tokenizer as the course does, else falls back, and says why when there is none", function()
    local function never() return false end
    assert.are.equal("my.bin", cli.tokenizer_path("my.bin", never))
    assert.are.equal("tokenizer.bin", cli.tokenizer_path(nil, function(p) return p == "tokenizer.bin" end))
    assert.are.same({ gptoss.tokenizer_path() }, { cli.tokenizer_path(nil, never) })
    local lookup = gptoss.tokenizer_path -- none anywhere: nil and both reasons
    gptoss.tokenizer_path = function() return nil, "no tokenizer.bin found: $GPTOSS_TOKENIZER is not set" end
    local ok, none, reason = pcall(cli.tokenizer_path, nil, never)
    gptoss.tokenizer_path = lookup
    assert.is_true(ok, none)
    assert.is_nil(none)
    assert.are.equal("tokenizer.bin is not in the current directory and $GPTOSS_TOKENIZER is not set (-z PATH to "
      .. "choose)", reason)
  end)

  it("prints run.cpp's header lines and the course's TPS", function()
    assert.are.equal(table.concat({
      "vocab_size: 201088", "hidden_dim: 32", "n_experts: 32", "experts_per_token: 4", "intermediate_dim: 64",
      "n_layers: 2", "head_dim: 32", "n_attn_heads: 2", "n_kv_heads: 1", "max_seq_len: 2048",
      "init context len: 4096", "rope theta: 150000.000000", "rope_scaling_factor: 32.000000",
      "sliding window: 128", "swiglu_limit: 7.000000", "",
    }, "\n"), cli.header(H.CONFIG_7M))
    assert.are.equal(80 / 187 * 1000, cli.tps(80, 187))
    assert.are.equal(5000.0, cli.tps(5, 0)) -- under a millisecond counts as one
    assert.are.equal(0.0, cli.tps(0, 0))
    assert.are.equal("load: no such file", cmdline.message("lua/gptoss/init.lua:16: load: no such file"))
    assert.are.equal("plain: 1:2", cmdline.message("plain: 1:2"))
  end)

  it("formats the per-kernel table slowest first, and memory in MiB", function()
    local rows = { { label = "rmsnorm", seconds = 0.25, calls = 100 }, { label = "gemm_bf16", seconds = 1.5, calls = 300 },
      { label = "idle", seconds = 0, calls = 0 } }
    assert.are.same({
      "profile, replica 1 (gpu 1): 3 kernels, 2.000 s of inference",
      "  kernel           total s     calls     avg ms  % wall",
      "  gemm_bf16         1.5000       300     5.0000    75.0",
      "  rmsnorm           0.2500       100     2.5000    12.5",
      "  idle              0.0000         0     0.0000     0.0",
      "  (all kernels)     1.7500       400     4.3750    87.5",
    }, cmdline.profile_lines("replica 1 (gpu 1)", rows, 2))
    assert.are.equal("gemm_bf16", rows[2].label) -- the caller's rows keep their order
    assert.are.equal("memory, replica 1 (cpu): weights 50.5 MiB, kv 2.0 MiB, total 52.5 MiB",
      cmdline.memory_line("replica 1 (cpu)", { total = 52.5 * 2 ^ 20, kv = 2 ^ 21, weights = 50.5 * 2 ^ 20 }))
    assert.are.equal("memory, gpu: weights 3.0 MiB, weights_fp32 1.0 MiB, weights_bf16 2.0 MiB, kv 0.0 MiB, "
      .. "scratch 0.5 MiB, total 5.5 MiB, zz 1.0 MiB",
      cmdline.memory_line("gpu", { zz = 2 ^ 20, scratch = 2 ^ 19, total = 5.5 * 2 ^ 20, kv = 0,
        weights_bf16 = 2 ^ 21, weights_fp32 = 2 ^ 20, weights = 3 * 2 ^ 20 }))
  end)
end)

describe("gptoss.progress", function()
  -- getp's report after `tokens` of at most `max` tokens, `done` of `total` requests
  local function report(tokens, max, done, total, elapsed)
    return { tokens = tokens, max_tokens = max, done = done, total = total, steps = 0, elapsed = elapsed }
  end

  it("counts tokens of the most the run can generate, its ETA from the token rate", function()
    local out = {}
    local bar = progress.new { write = function(s) out[#out + 1] = s end }
    bar:update(report(0, 1000, 0, 4, 0))       -- before the first step: no rate yet
    bar:update(report(20, 1000, 0, 4, 0.2))    -- 0.2 s after the last: skipped
    bar:update(report(400, 1000, 0, 4, 2.0))   -- 200 tok/s, 600 tokens left
    bar:update(report(450, 900, 3, 4, 3.0))    -- a request stopped early: 100 fewer possible
    bar:update(report(500, 500, 4, 4, 3.125))  -- the last one is always drawn
    assert.are.same({
      "\r0/1000 tokens, 0/4 requests, 0.0 tok/s, ETA --",
      "\r400/1000 tokens, 0/4 requests, 200.0 tok/s, ETA 0:03",
      "\r450/900 tokens, 3/4 requests, 150.0 tok/s, ETA 0:03 ", -- padded over the longer line
      "\r500/500 tokens, 4/4 requests, 160.0 tok/s, ETA 0:00\n",
    }, out)
    bar:close() -- the line is ended already
    assert.are.equal(4, #out)

    out = {}
    bar = progress.new { write = function(s) out[#out + 1] = s end, interval = 0 }
    bar:update(report(123456, 1000000, 10, 100, 60))
    bar:update(report(9, 9000, 11, 100, 90))
    local first = "123456/1000000 tokens, 10/100 requests, 2057.6 tok/s, ETA 7:06"
    local second = "9/9000 tokens, 11/100 requests, 0.1 tok/s, ETA 24:58:30"
    assert.are.same({ "\r" .. first, "\r" .. second .. (" "):rep(#first - #second) }, out)
    bar:close() -- a run that stopped early: the line is ended
    assert.are.equal("\n", out[3])
    bar:close()
    assert.are.equal(3, #out)
  end)

  it("shows a replica's weights being materialised, with another format", function()
    local out = {}
    local bar = progress.new { write = function(s) out[#out + 1] = s end, format = progress.weights }
    local total = 2804643712
    bar:update { done = 0, total = total, elapsed = 0 }
    bar:update { done = total // 4, total = total, elapsed = 10 }
    bar:update { done = total // 4 + 1, total = total, elapsed = 10.1 } -- too soon
    bar:update { done = total, total = total, elapsed = 41 }
    local quarter, done = "materialising the weights: 25% of 2.80e+09 values, ETA 0:30",
        "materialised the weights: 2.80e+09 values in 0:41"
    assert.are.same({
      "\rmaterialising the weights: 0% of 2.80e+09 values, ETA --",
      "\r" .. quarter,
      "\r" .. done .. (" "):rep(#quarter - #done) .. "\n",
    }, out)
  end)

  it("formats durations and refuses bad options", function()
    assert.are.same({ "0:00", "0:59", "1:00", "59:59", "1:00:00", "26:02:05" },
      { progress.duration(0), progress.duration(59.4), progress.duration(59.6), progress.duration(3599),
        progress.duration(3600), progress.duration(93725) })
    assert.are.equal("0/0 tokens, 0/0 requests, 0.0 tok/s, ETA 0:00", progress.format(report(0, 0, 0, 0, 0)))
    H.expect_error(function() progress.new {} end, "progress.new: opts.write must be a function(text)")
    H.expect_error(function() progress.new { write = print, intervall = 1 } end,
      "progress.new: unknown option 'intervall' (known: write, interval, format)")
    H.expect_error(function() progress.new { write = print, interval = -1 } end,
      "progress.new: interval must be a non-negative number of seconds (got -1)")
    H.expect_error(function() progress.new { write = print, format = "%d" } end,
      "progress.new: format must be a function(report) -> text (got string)")
  end)
end)

describe("gptoss.realtime_ms and gptoss.isatty", function()
  it("gives CLOCK_REALTIME in whole milliseconds", function()
    local before = os.time()
    local ms = gptoss.realtime_ms()
    local after = os.time()
    assert.are.equal("integer", math.type(ms))
    assert.is_true(ms // 1000 >= before - 1 and ms // 1000 <= after + 1, tostring(ms))
    local later = gptoss.realtime_ms()
    assert.is_true(later >= ms)
  end)

  it("says whether a descriptor is a terminal", function()
    assert.is_false(gptoss.isatty(-1))
    assert.is_false(gptoss.isatty(1 << 40))
    assert.is_false(gptoss.isatty(1000)) -- not open
    H.expect_error(function() gptoss.isatty("two") end, "number expected, got string")
    local i = -1
    while arg[i - 1] ~= nil do i = i - 1 end
    local code = ("LUA_PATH='%s' LUA_CPATH='%s' %s -e 'io.write(tostring(require(\"gptoss\").isatty(1)))'")
      :format(package.path, package.cpath, arg[i])
    local p = assert(io.popen(code))
    assert.are.equal("false", p:read("a")) -- a pipe
    p:close()
    if os.execute("command -v script >/dev/null 2>&1") then -- util-linux: run it on a terminal
      p = assert(io.popen(("script -qec %q /dev/null </dev/null"):format(code)))
      assert.truthy(p:read("a"):find("true", 1, true))
      p:close()
    end
  end)
end)

describe("examples/run.lua", function()
  local model = gptoss.synthetic("7m", { seed = gptoss.DEFAULT_SEED }) -- --seed-weights' default
  local tok = gptoss.tokenizer(TOKENIZER)
  local STEPS = 24
  local PROMPTS = { "Hello", "Hello world", "Write a short haiku about the ocean.", "ฉันรักทะเล 🌊 naïve" }
  local HEADER = cli.header(model.config)
  local function runner() return H.runner("examples/run.lua", pending) end
  after_each(cleanup)

  -- no traceback, no Lua position and no prefix twice ("replica: replica:") in what a user reads
  local function clean(err)
    assert.is_nil(err:find("traceback", 1, true), err)
    assert.is_nil(err:find("%.lua:%d+:"), err)
    assert.is_nil(err:find("(%a[%w.:]*): %1: "), err)
  end

  local function request_file(lines)
    local path = tmp()
    write_file(path, table.concat(lines, "\n") .. "\n")
    return path
  end

  -- One getp run of the four prompts (and a line the course ignores) with --json and
  -- --profile, made by the first test that asks: {code, out, err, input, outputs (of the
  -- -o file), output (its text), expected (gptoss.getp.run's result)}.
  local getp_run
  local function run_getp()
    local run = runner()
    if not getp_run then
      local input, output = request_file { "4", PROMPTS[1], PROMPTS[2], PROMPTS[3], PROMPTS[4], "an extra line" }, tmp()
      local code, out, err = run { "7m", "-m", "getp", "-i", input, "-o", output, "-n", tostring(STEPS),
        "-z", TOKENIZER, "--device", "cpu", "--quiet", "--json", "--profile" }
      getp_run = { code = code, out = out, err = err, input = input, outputs = requests.read_output(output),
        output = read_file(output),
        expected = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, requests = PROMPTS } }
    end
    return getp_run
  end

  -- the parts of getp's stdout after the header: warm, elapsed, tps, finish (as printed),
  -- what comes between them and the JSON line (--profile's), and that line
  local function getp_lines(out)
    assert.are.equal(HEADER, out:sub(1, #HEADER))
    local rest = out:sub(#HEADER + 1)
    local parts = { rest:match(
      "^requests size = 25600 B\nNum requests: 4\n"
      .. "\nwarm up elapsed time%(s%): (%d+%.%d%d%d%d%d%d)\n"
      .. "\nelapsed time%(s%): (%d+%.%d%d%d%d%d%d), achieved throughput TPS %(tok/s%): (%d+%.%d%d%d%d%d%d)\n"
      .. "\nfinish elapsed time%(s%): (%d+%.%d%d%d%d%d%d)\n"
      .. "(.-)"
      .. "({[^\n]*})\n$") }
    assert.truthy(parts[1], rest)
    return table.unpack(parts)
  end

  it("runs getp, with only the request file's warning on stderr under --quiet", function()
    local r = run_getp()
    assert.are.equal(0, r.code, r.err)
    assert.are.equal(("run.lua: warning: %s: 1 line after the 4 prompts is ignored, as the course reads only "
      .. "the count\n"):format(r.input), r.err) -- warnings stay under --quiet
  end)

  it("writes getp's outputs as gptoss.getp.run's, byte for byte", function()
    local r = run_getp()
    assert.are.same(r.expected.outputs, r.outputs)
    local ref = tmp()
    requests.write(ref, r.expected.outputs)
    assert.are.equal(read_file(ref), r.output)
  end)

  it("prompts getp with harmony user turns under --chat, as gptoss.getp.run with chat", function()
    local run = runner()
    local input, output = request_file { "2", PROMPTS[1], PROMPTS[2] }, tmp()
    local code, _, err = run { "7m", "-m", "getp", "-i", input, "-o", output, "-n", "80",
      "-z", TOKENIZER, "--device", "cpu", "--quiet", "--chat" }
    assert.are.equal(0, code, err)
    local expected = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = 80, chat = true,
      requests = { PROMPTS[1], PROMPTS[2] } }
    assert.are.same(expected.outputs, requests.read_output(output))
  end)

  it("prints the course's getp lines, its TPS from whole milliseconds", function()
    local r = run_getp()
    local _, elapsed, tps, finish = getp_lines(r.out)
    -- whole milliseconds, and TPS from them exactly as the course computes it
    local ms = math.tointeger(math.floor(tonumber(elapsed) * 1000 + 0.5))
    assert.are.equal(elapsed, ("%f"):format(ms / 1000))
    assert.are.equal(("%f"):format(cli.tps(r.expected.tokens, ms)), tps)
    assert.are.equal(("%f"):format(tonumber(finish)), finish)
  end)

  it("prints --profile's lines after the course's", function()
    local r = run_getp()
    local report = select(5, getp_lines(r.out))
    assert.are.equal("profile, replica 1 (cpu): per-kernel timing is for GPU replicas\n"
      .. cmdline.memory_line("replica 1 (cpu)", model:replica { slots = 4, ctx = STEPS }.memory) .. "\n", report)
  end)

  it("ends getp's stdout with --json's figures", function()
    local r = run_getp()
    local warm, elapsed, _, _, _, line = getp_lines(r.out)
    local ms = math.tointeger(math.floor(tonumber(elapsed) * 1000 + 0.5))
    local expected = r.expected
    local figures = json.decode(line)
    assert.are.same({
      mode = "getp", model = "synthetic 7m", devices = { "cpu" }, weights = "fp32", kv = "fp32", slots = { 4 },
      scheduler = "continuous", partition = "round_robin", requests = 4, steps_limit = STEPS,
      tokens = expected.tokens, steps = expected.steps, prefill_saved = 0,
    }, {
      mode = figures.mode, model = figures.model, devices = figures.devices, weights = figures.weights,
      kv = figures.kv, slots = figures.slots, scheduler = figures.scheduler, partition = figures.partition,
      requests = figures.requests, steps_limit = figures.steps_limit, tokens = figures.tokens, steps = figures.steps,
      prefill_saved = figures.prefill_saved,
    })
    -- JSON numbers carry 14 significant digits (dkjson)
    local function near(x, y) return math.abs(x - y) <= 1e-12 * math.abs(y) end
    assert.is_true(near(figures.elapsed, ms / 1000))
    assert.is_true(near(figures.tok_per_s, cli.tps(expected.tokens, ms)))
    assert.is_true(near(figures.warm_up, tonumber(warm)))
  end)

  it("forks --chat's shared system message into each slot unless --no-share-prefix, the same outputs", function()
    local run = runner()
    local input, steps = request_file { "3", PROMPTS[1], PROMPTS[2], PROMPTS[3] }, 72
    local expected = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = steps, chat = true,
      requests = { PROMPTS[1], PROMPTS[2], PROMPTS[3] } }
    assert.is_true(expected.prefill_saved > 0)
    for _, case in ipairs { { {}, expected.prefill_saved }, { { "--no-share-prefix" }, 0 } } do
      local output = tmp()
      local args = { "7m", "-m", "getp", "--chat", "-i", input, "-o", output, "-n", tostring(steps),
        "-z", TOKENIZER, "--device", "cpu", "--quiet", "--json", table.unpack(case[1]) }
      local code, out, err = run(args)
      assert.are.equal(0, code, err)
      assert.are.same(expected.outputs, requests.read_output(output))
      assert.are.equal(case[2], json.decode(out:match("[^\n]+\n$")).prefill_saved)
    end
  end)

  it("clamps -n as the course, describes its replicas and notes the tokenizer it falls back to", function()
    local run = runner()
    local input = request_file { "0" }
    for _, case in ipairs { { "-5", 2048 }, { "0", 2048 }, { "5000", 2048 }, { "100", 100 } } do
      local code, out, err = run { "7m", "-m", "getp", "-i", input, "-o", tmp(), "-n", case[1],
        "--device", "cpu", "--weights", "bf16", "--slots", "3", "--scheduler", "static", "--json" }
      assert.are.equal(0, code, err)
      assert.truthy(out:find(("\nrequests size = 0 B\nNum requests: 0\n"), 1, true), out)
      local figures = json.decode(out:match("\n({[^\n]*})\n$"))
      assert.are.equal(case[2], figures.steps_limit, case[1])
      assert.are.same({ "bf16", "bf16", { 3 }, 0, 0 }, -- --kv follows --weights
        { figures.weights, figures.kv, figures.slots, figures.tokens, figures.requests })
      assert.truthy(err:find(("run.lua: getp: 1 replica: cpu (3 slots, ctx %d, weights bf16, kv bf16, "):format(case[2]),
        1, true), err)
      assert.truthy(err:find("; steps " .. case[2] .. "; greedy; partition round_robin; scheduler static\n", 1, true), err)
      -- the tokenizer found away from the current directory is named in --json, not on stderr
      assert.falsy(err:find("tokenizer", 1, true), err)
      if not io.open("tokenizer.bin") then assert.are.equal(TOKENIZER, figures.tokenizer) end
    end
  end)

  -- run.cpp's generate as written there (docs/course.md#the-command-line): one position a step,
  -- the prompt forced until its last token, then sampled (by sampler on the logits, or by the
  -- replica with the default-mode sampling given, set at the first sampled id: its penalties
  -- count the generated ids); returns every id it prints
  local function course_generate(text, steps, sampler, sampling)
    local prompt = tok:encode(text, { max_tokens = model.config.initial_context_length })
    local r <close> = model:replica { device = "cpu", slots = 1, ctx = steps }
    local printed, token, pos = { prompt[1] }, prompt[1], 0
    while pos < steps do
      if sampling and pos == #prompt - 1 then r:sampling(1, sampling) end
      local h = r:step { slots = { 1 }, positions = { pos }, tokens = { token } }
      local next_id
      if pos < #prompt - 1 then
        next_id = prompt[pos + 2]
      elseif sampler then
        next_id = sampler:sample(h:logits()[1])
      elseif sampling then
        next_id = h:tokens()[1]
      else
        next_id = h:logits()[1]:argmax() - 1
      end
      pos = pos + 1
      if next_id == 199999 or next_id == 200002 then break end
      printed[#printed + 1] = next_id
      token = next_id
    end
    return printed, pos
  end

  it("runs generate as the course's loop, greedy (-t below 0 too) or with the course's sampler", function()
    local run = runner()
    local ids, pos = course_generate("Hello world", 12)
    for _, t in ipairs { "0", "-1" } do
      local code, out, err = run { "7m", "-i", "Hello world", "-n", "12", "-t", t, "-z", TOKENIZER,
        "--device", "cpu", "--quiet", "--json" }
      assert.are.equal(0, code, err)
      assert.truthy(err:match("^achieved tok/s: %d+%.%d%d%d%d%d%d\n$"), err)
      local text, line = out:match("^(.*\n)({[^\n]*})\n$")
      assert.are.equal(HEADER .. tok:decode(ids) .. "\n", text)
      local figures = json.decode(line)
      assert.are.same({ "generate", 1, { 1 }, 2, pos - 1, pos, pos - 1 },
        { figures.mode, figures.requests, figures.slots, figures.prompt_tokens, figures.tokens, figures.steps,
          figures.generated })
    end

    local sampler = gptoss.sampler { mode = "course", temperature = f32(0.8), top_p = f32(0.9), seed = 5 }
    local sampled = course_generate("Hello world", 10, sampler)
    local code, out, err = run { "7m", "-i", "Hello world", "-n", "10", "-t", "0.8", "-p", "5",
      "-s", "5", "-z", TOKENIZER, "--device", "cpu" }
    assert.are.equal(0, code, err)
    assert.are.equal(HEADER .. tok:decode(sampled) .. "\n", out)
    assert.truthy(err:find("run.lua: gptoss.replica(cpu, 1 slots x 10 positions, weights fp32, kv fp32", 1, true), err)
    assert.truthy(err:find("\nachieved tok/s: %d+%.%d+\n$"), err)
  end)

  -- the generated part of a generate run's stdout (after the header and the prompt's text)
  local function generated_text(out, prompt_text)
    assert.are.equal(HEADER .. prompt_text, out:sub(1, #HEADER + #prompt_text))
    return out:sub(#HEADER + #prompt_text + 1)
  end

  it("stops generate after --max-tokens tokens, -n still bounding prompt + generated", function()
    local run = runner()
    local ids = course_generate("Hello world", 12)
    local L = #tok:encode("Hello world")
    for _, case in ipairs { { "3", 3 }, { "0", 0 }, { "100", #ids - L } } do
      local code, out, err = run { "7m", "-i", "Hello world", "-n", "12", "--max-tokens", case[1],
        "-z", TOKENIZER, "--device", "cpu", "--quiet", "--json" }
      assert.are.equal(0, code, err)
      local text, line = out:match("^(.*\n)({[^\n]*})\n$")
      assert.are.equal(HEADER .. tok:decode(table.move(ids, 1, L + case[2], 1, {})) .. "\n", text)
      assert.are.equal(case[2], json.decode(line).generated)
    end
  end)

  it("stops generate where the text reaches a --stop string, which is not printed", function()
    local run = runner()
    local prompt_text = "Hello world"
    local ids = course_generate(prompt_text, 12)
    local L = #tok:encode(prompt_text)
    local text = tok:decode(table.move(ids, L + 1, #ids, 1, {}))
    -- a stop string across the first two generated tokens: the end of one, the start of the next
    local first, second = tok:decode { ids[L + 1] }, tok:decode { ids[L + 2] }
    assert(utf8.len(first) and utf8.len(first) >= 2 and utf8.len(second) and utf8.len(second) >= 2,
      "the greedy 7m output changed: pick other tokens for the stop string")
    local stop = first:sub(utf8.offset(first, -2)) .. second:sub(1, utf8.offset(second, 3) - 1)
    local at = text:find(stop, 1, true)
    for _, stops in ipairs { { stop }, { "never seen \1", stop } } do
      local args = { "7m", "-i", prompt_text, "-n", "12", "-z", TOKENIZER, "--device", "cpu", "--quiet" }
      for _, st in ipairs(stops) do
        args[#args + 1], args[#args + 2] = "--stop", st
      end
      local code, out, err = run(args)
      assert.are.equal(0, code, err)
      assert.are.equal(text:sub(1, at - 1) .. "\n", generated_text(out, prompt_text))
    end
    -- a stop string never reached: everything is printed, held-back text included
    local code, out = run { "7m", "-i", prompt_text, "-n", "12", "-z", TOKENIZER, "--device", "cpu",
      "--quiet", "--stop", text:sub(-1) .. "\1" }
    assert.are.equal(0, code)
    assert.are.equal(text .. "\n", generated_text(out, prompt_text))
  end)

  it("prints characters split over two tokens whole (🌊 is two tokens)", function()
    local run = runner()
    local prompt_text = "sea 🌊 and 🌊🌊"
    local ids = course_generate(prompt_text, #tok:encode(prompt_text) + 2)
    local code, out, err = run { "7m", "-i", prompt_text, "-n", tostring(#tok:encode(prompt_text) + 2),
      "-z", TOKENIZER, "--device", "cpu", "--quiet" }
    assert.are.equal(0, code, err)
    assert.are.equal(HEADER .. tok:decode(ids) .. "\n", out)
    assert.is_nil(out:find("\xEF\xBF\xBD", 1, true)) -- no U+FFFD
  end)

  it("samples generate with the default-mode sampler under --top-k, --min-p or a penalty, as getp's request 1",
    function()
    local run = runner()
    local prompt_text, steps = "Hello world", 12
    local L = #tok:encode(prompt_text)
    for _, case in ipairs {
      { args = { "--top-k", "5" }, sampling = { top_k = 5 } },
      { args = { "--min-p", "0.5" }, sampling = { min_p = 0.5 } },
      { args = { "--top-k", "40", "--min-p", "0.1", "-p", "0.7" }, sampling = { top_k = 40, min_p = 0.1 }, top_p = 0.7 },
      { args = { "--presence-penalty", "0.5", "--frequency-penalty=-2" },
        sampling = { presence_penalty = 0.5, frequency_penalty = -2 } },
    } do
      local sampling = { temperature = f32(1.5), top_p = f32(case.top_p or 0.9), seed = 3,
        top_k = case.sampling.top_k, min_p = case.sampling.min_p, presence_penalty = case.sampling.presence_penalty,
        frequency_penalty = case.sampling.frequency_penalty }
      local ids = course_generate(prompt_text, steps, nil, sampling)
      local args = { "7m", "-i", prompt_text, "-n", tostring(steps), "-t", "1.5", "-s", "3",
        "-z", TOKENIZER, "--device", "cpu", "--quiet" }
      table.move(case.args, 1, #case.args, #args + 1, args)
      local code, out, err = run(args)
      assert.are.equal(0, code, err)
      assert.are.equal(HEADER .. tok:decode(ids) .. "\n", out, table.concat(case.args, " "))
      -- getp's request 1 draws the same ids (seed -s + 1 - 1), one fewer: its last position is steps - 2
      local expected = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = steps,
        sampling = sampling, requests = { prompt_text } }
      local generated = table.move(ids, L + 1, #ids, 1, {})
      local stopped = #generated < steps - L + 1
      assert.are.same(expected.outputs[1], table.move(generated, 1, #expected.outputs[1], 1, {}))
      assert.is_true(stopped or #expected.outputs[1] == steps - L)
    end
  end)

  it("samples getp with --top-k and --min-p, as gptoss.getp.run with them", function()
    local run = runner()
    local input, output = request_file { "2", PROMPTS[1], PROMPTS[2] }, tmp()
    local code, _, err = run { "7m", "-m", "getp", "-i", input, "-o", output, "-n", "16",
      "-t", "1.5", "-s", "11", "--top-k", "7", "--min-p", "0.01", "-z", TOKENIZER, "--device", "cpu", "--quiet" }
    assert.are.equal(0, code, err)
    local expected = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = 16,
      sampling = { temperature = f32(1.5), top_p = f32(0.9), top_k = 7, min_p = 0.01, seed = 11 },
      requests = { PROMPTS[1], PROMPTS[2] } }
    assert.are.same(expected.outputs, requests.read_output(output))
    local greedy = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = 16,
      requests = { PROMPTS[1], PROMPTS[2] } }
    assert.are_not.same(greedy.outputs, expected.outputs) -- the options did sample
  end)

  it("draws greedy from the penalized logits under a penalty with -t 0: generate and getp", function()
    local run = runner()
    local prompt_text, steps = "Hello world", 12
    local penalized = { temperature = 0, top_p = f32(0.9), seed = 3, presence_penalty = -2, frequency_penalty = -2 }
    local ids = course_generate(prompt_text, steps, nil, penalized)
    assert.are_not.same(course_generate(prompt_text, steps), ids) -- the penalties change the ids
    local flags = { "-t", "0", "-s", "3", "--presence-penalty=-2", "--frequency-penalty=-2", "-z", TOKENIZER,
      "--device", "cpu", "--quiet" }
    local code, out, err = run { "7m", "-i", prompt_text, "-n", tostring(steps), table.unpack(flags) }
    assert.are.equal(0, code, err)
    assert.are.equal(HEADER .. tok:decode(ids) .. "\n", out)
    local input, output = request_file { "2", PROMPTS[1], PROMPTS[2] }, tmp()
    code, _, err = run { "7m", "-m", "getp", "-i", input, "-o", output, "-n", "16", table.unpack(flags) }
    assert.are.equal(0, code, err)
    assert.are.same(getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = 16, sampling = penalized,
      requests = { PROMPTS[1], PROMPTS[2] } }.outputs, requests.read_output(output))
  end)

  it("runs CPU replicas on --threads threads", function()
    local run = runner()
    local code, out, err = run { "7m", "-i", "Hello", "-n", "4", "--threads", "1", "-z", TOKENIZER,
      "--device", "cpu" }
    assert.are.equal(0, code, err)
    assert.truthy(err:find("run.lua: gptoss.replica(cpu, 1 slots x 4 positions, weights fp32, kv fp32, 1 threads)\n",
      1, true), err)
    assert.are.equal(HEADER .. tok:decode(course_generate("Hello", 4)) .. "\n", out)
    local input, output = request_file { "1", "Hello" }, tmp()
    code, _, err = run { "7m", "-m", "getp", "-i", input, "-o", output, "-n", "6", "--threads", "1",
      "-z", TOKENIZER, "--device", "cpu", "--quiet" }
    assert.are.equal(0, code, err)
    assert.are.same(getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = 6,
      requests = { "Hello" } }.outputs, requests.read_output(output))
  end)

  -- Runs each case {args, pattern [, plain text]}: status 1, the pattern (and the text) on
  -- stderr without a traceback or a Lua position, nothing on stdout but the header of a
  -- run that started (none with before_header: what the files named hold is checked first).
  local function exits_1(run, cases, before_header)
    for _, case in ipairs(cases) do
      local code, out, err = run(case[1])
      local what = table.concat(case[1], " ")
      assert.are.equal(1, code, what)
      assert.truthy(err:find(case[2]), what .. "\n" .. err)
      if case[3] then assert.truthy(err:find(case[3], 1, true), what .. "\n" .. err) end
      clean(err)
      assert.truthy(out == "" or (not before_header and out:sub(1, #HEADER) == HEADER), what .. "\n" .. out)
    end
  end

  it("exits 1 on usage errors: the error naming the option first, then where the usage is", function()
    local run = runner()
    local input = request_file { "2", "Hello", "world" }
    local hint = "\nTry 'run%.lua %-%-help' for usage%.\n$"
    exits_1(run, {
      { { "7m", "-m", "getp", "-i", input }, "^run%.lua: %-m getp needs %-i <request file> and %-o <output file>"
        .. hint },
      { { "7m", "-m", "getp", "-o", tmp() }, "^run%.lua: %-m getp needs %-i" },
      { { "7m" }, "^run%.lua: %-m generate needs a prompt: %-i \"text\"" .. hint },
      { { "7m", "-m", "chat", "-i", "hi" }, "^run%.lua: %-m chat is not supported: the course's chat mode" },
      { { "7m", "-m", "bogus" }, "^run%.lua: %-m: unknown mode 'bogus' %(known: generate, getp;.*" .. hint },
      { { "7m", "-t", "abc" }, "^run%.lua: %-t: 'abc' is not a number" .. hint },
      { { "7m", "-t" }, "^run%.lua: option '%-t' requires an argument" .. hint },
      { { "7m", "-q", "1" }, "^run%.lua: unknown option '%-q'\n.*" .. hint },
      { { "7m", "--top-k", "many" }, "^run%.lua: %-%-top%-k: 'many' is not an integer >= 0" .. hint },
      { { "7m", "-m", "getp", "-i", input, "-o", tmp(), "--stop", "." },
        "^run%.lua: %-%-stop is for %-m generate: getp's requests end at %-n positions or a stop id, as the course's"
          .. hint },
      { { "7m", "-i", "hi", "--device", "0", "--threads", "2" },
        "^run%.lua: %-%-threads is for CPU replicas %(%-%-device cpu%)" .. hint },
    })
  end)

  it("exits 1 when the model, the tokenizer or the device cannot be had", function()
    local run = runner()
    local missing = tmp() .. ".bin"
    local cases = {
      { { missing, "-i", "hi" }, ("^run%%.lua: load: cannot open model file '%s': No such file or directory\n$")
        :format(missing:gsub("%p", "%%%0")) },
      { { "9m", "-i", "hi" },
        "^run%.lua: '9m' is neither a file, a directory nor a synthetic shape %(7m, 20b, 20b%-2l, 120b%)\n$" },
      { { "7m", "-i", "hi", "-z", missing }, "^run%.lua: cannot open tokenizer file '" },
      { { "7m", "-i", "hi", "-z", "README.md" },
        "^run%.lua: tokenizer file 'README%.md' is truncated: entry 0 at byte 4 has length %d+, %d+ bytes remain\n$" },
    }
    exits_1(run, cases, true)
    if #gptoss.devices() == 0 then
      exits_1(run, { { { "7m", "-i", "hi", "-z", TOKENIZER, "--device", "0" },
        "^run%.lua: %-%-device 0: this build sees no GPU here %(%-%-device cpu runs on the CPU%)" } })
    end
  end)

  it("exits 1 when the request file cannot be read or the output written", function()
    local run = runner()
    local input = request_file { "2", "Hello", "world" }
    local bad = request_file { "two", "Hello" }
    exits_1(run, {
      { { "7m", "-m", "getp", "-i", bad, "-o", tmp(), "-z", TOKENIZER },
        ("^run%%.lua: requests%%.read: %s: line 1: request count must be a non%%-negative integer %%(got \"two\"%%)\n$")
          :format(bad:gsub("%p", "%%%0")) },
      { { "7m", "-m", "getp", "-i", tmp() .. ".none", "-o", tmp(), "-z", TOKENIZER },
        "^run%.lua: requests%.read: cannot open '" },
      -- before the model: the shape named is not one
      { { "9m", "-m", "getp", "-i", input, "-o", "/nonexistent-gptoss-dir/out.txt", "-z", TOKENIZER,
        "-n", "3", "--device", "cpu", "--quiet" },
        "^run%.lua: %-o: cannot write '/nonexistent%-gptoss%-dir/out%.txt': No such file or directory\n$" },
      { { "7m", "-m", "getp", "-i", input, "-o", H.tmpdir(), "-z", TOKENIZER },
        "^run%.lua: %-o: cannot write '.*': Is a directory\n$" },
      { { "7m", "-m", "getp", "-i", input, "-o", tmp(), "-z", tmp() .. ".none" },
        "^run%.lua: cannot open tokenizer file '" },
    }, true)
  end)

  it("exits 1 when the replicas asked for cannot be made, or a step fails", function()
    local run = runner()
    local input = request_file { "1", "Hello" }
    local broken = tmp()
    H.nan_row_model(model, 5):save(broken)
    exits_1(run, {
      { { "7m", "-m", "getp", "-i", input, "-o", tmp(), "-z", TOKENIZER, "--device", "cpu",
        "--slots", "2000000" },
        "^run%.lua: getp: building the replica on cpu: replica: slots = 2000000 must be in 1%.%.1048576\n$" },
      -- 1 TiB of KV cache: more than the host has
      { { "7m", "-m", "getp", "-i", input, "-o", tmp(), "-z", TOKENIZER, "--device", "cpu",
        "--slots", "1048576", "-n", "2048" },
        "^run%.lua: getp: building the replica on cpu: replica: the KV cache for 1048576 slots of 2048 positions "
          .. "needs 1024%.00 GiB, [%d.]+ GiB available\n$" },
      { { broken, "-m", "getp", "-i", input, "-o", tmp(), "-z", TOKENIZER, "--device", "cpu", "-t", "1", "-n", "8", "--quiet" },
        "^run%.lua: getp: replica 1 %(cpu%): step:tokens: row 1: sampler: the logit of token 5 is NaN\n$" },
      { { broken, "-i", "Hello", "-z", TOKENIZER, "--device", "cpu", "-t", "1", "-n", "8", "--top-k", "5", "--quiet" },
        "^run%.lua: step:tokens: row 1: sampler: the logit of token 5 is NaN\n$" },
    })
  end)

  it("prints its help on -h and exits 0", function()
    local run = runner()
    local code, out, err = run { "-h" }
    assert.are.equal(0, code)
    assert.truthy(out:find("^Usage: run%.lua "), out)
    for _, flag in ipairs { "-t <float>", "-n <int>", "-z <path>", "<model>", "--seed-weights <int>",
      "--device <cpu|N,M,...>", "--profile", "--quiet", "--json", "--top-k <int>", "--min-p <float>", "--max-tokens <int>",
      "--stop <text>",
      "--threads <int>" } do
      assert.truthy(out:find(flag, 1, true), flag)
    end
    assert.are.equal("", err)
  end)
end)
