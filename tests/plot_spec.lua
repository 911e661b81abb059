-- Pictures of the benchmarks (gptoss.plot through gnuplot), as child processes:
-- examples/plot.lua draws bench_gpu's and bench_getp's JSON lines, from a file of them or a
-- saved run's whole output, as a PNG (no GPU needed), bench_getp --plot draws a CPU run beside
-- its unchanged JSON line, and without gnuplot on PATH each script says so before any work.
-- The PNGs need gnuplot (Debian's gnuplot-nox): without it those tests are pending.
local json = require "dkjson"
local H = require "helpers"

local PNG_MAGIC = "\137PNG\r\n\26\n"

local function need_gnuplot()
  if not os.execute("command -v gnuplot >/dev/null 2>&1") then
    pending("needs gnuplot (Debian: apt-get install gnuplot-nox)")
  end
end

-- The PNG's width and height, from its header chunk (IHDR: width and height big-endian after
-- the magic, the chunk's length and its type), after checking the magic bytes and the size.
local function png_size(path)
  local data = H.read_file(path)
  assert.are.equal(PNG_MAGIC, data:sub(1, 8))
  assert.are.equal("IHDR", data:sub(13, 16))
  assert.is_true(#data > 10000, ("%s: %d bytes"):format(path, #data)) -- panels drawn, not a blank page
  local width, height = string.unpack(">I4I4", data, 17)
  return width, height
end

-- A bench_gpu JSON line as bench_gpu prints it; profile: its per-kernel rows over 4 steps.
local function gpu_line(weights, batch, tok_per_s, profile)
  local res = { bench = "gpu_decode", model = "20b", weights = weights, device = "NVIDIA H100 80GB HBM3",
    batch = batch, ctx = 1024, feed = "device", steps = 1008, seconds = batch * 1008 / tok_per_s,
    tok_per_s = tok_per_s, step_ms = 1000 * batch / tok_per_s, gb_per_s = 1500, copy_gb_per_s = 3013,
    memory = { total = 2 ^ 34 } }
  if profile then
    res.profile = {}
    for i, k in ipairs { "gemm_mlp1", "attention", "gemm_mlp2", "router", "embedding", "rmsnorm" } do
      res.profile[i] = { label = k, seconds = profile[i] / 1000 * 4, calls = k == "embedding" and 4 or 96 }
    end
  end
  return json.encode(res)
end

local GETP_LINE = json.encode { bench = "getp", model = "20b", weights = "mxfp4", requests = 2048,
  steps_limit = 1024, prompt_tokens = 31130, tokens = 2065924, engine_steps = 1033, seconds = 69.573,
  tok_per_s = 29694.3, warm_up = 9.1, slots = { 2048 }, scheduler = "continuous", partition = "round_robin",
  device = "NVIDIA H100 80GB HBM3", chat = false, prefill_saved = 0, replicas_per_device = 1,
  host_ms_per_step = { 3.61 }, waited_ms_per_step = { 63.708 } }

-- A directory for PATH that finds the interpreter running the specs and nothing else (no
-- gnuplot), or with gnuplot, a stand-in for it: a shell script of that text.
local function path_without_gnuplot(gnuplot)
  local i = -1
  while arg[i - 1] ~= nil do i = i - 1 end
  local p = assert(io.popen(("command -v '%s'"):format(arg[i])))
  local lua = p:read("l")
  p:close()
  local dir = H.tmpdir()
  assert(os.execute(("ln -s '%s' '%s/%s'"):format(lua, dir, lua:match("[^/]*$"))))
  if gnuplot then
    H.write_file(dir .. "/gnuplot", "#!/bin/sh\n" .. gnuplot)
    assert(os.execute(("chmod +x '%s/gnuplot'"):format(dir)))
  end
  return dir
end

describe("examples/plot.lua", function()
  after_each(H.cleanup)

  it("draws bench_gpu's and bench_getp's JSON lines, from a saved run's whole output too, as one PNG", function()
    need_gnuplot()
    local run = H.runner("examples/plot.lua", pending)
    local dir = H.tmpdir()
    local log, jsonl, png = dir .. "/run.log", dir .. "/getp.jsonl", dir .. "/out.png"
    -- a saved run: the table and per-kernel lines around the JSON lines, which are what is read
    H.write_file(log, table.concat({
      "     B      tok/s    step ms", "     1      267.5      3.739",
      gpu_line("bf16", 1, 267.5, { 1.1, 0.3, 0.9, 0.4, 0.02, 0.01 }),
      gpu_line("bf16", 1024, 27246.7, { 12.5, 12.8, 6.9, 1.6, 0.04, 0.02 }),
      gpu_line("mxfp4", 1024, 26992.3, { 13.3, 12.8, 6.7, 1.5, 0.04, 0.02 }), "" }, "\n"))
    H.write_file(jsonl, GETP_LINE .. "\n")
    local code, out, err = run { log, jsonl, "-o", png, "--title", "one H100, 2026-11-26" }
    assert.are.equal(0, code, err)
    assert.are.equal(png .. ": 4 results drawn\n", out)
    -- four panels: bench_gpu's throughput and kernels, bench_getp's throughput and steps
    assert.are.same({ 960, 4 * 440 }, { png_size(png) })

    -- without a profile, bench_gpu's lines draw the throughput panel alone
    H.write_file(jsonl, gpu_line("bf16", 1, 267.5) .. "\n" .. gpu_line("bf16", 64, 4111.0) .. "\n")
    code, out, err = run { jsonl, "-o", png }
    assert.are.equal(0, code, err)
    assert.are.same({ 960, 440 }, { png_size(png) })
  end)

  it("exits 1 with one line on a usage error, input it cannot draw and an output it cannot write", function()
    need_gnuplot()
    local run = H.runner("examples/plot.lua", pending)
    local dir = H.tmpdir()
    local text, bad, png = dir .. "/table.log", dir .. "/bad.jsonl", dir .. "/out.png"
    H.write_file(text, "     B      tok/s\n     1      267.5\n")
    H.write_file(bad, GETP_LINE .. "\n{\"bench\": \"getp\", \n")
    H.expect_exits(run, 1, {
      { { text }, "plot.lua: missing option '-o'" },
      { { text, "-o", png }, ("plot.lua: plot.read: '%s' holds no JSON line of bench_gpu or bench_getp"):format(text) },
      { { bad, "-o", png }, ("plot.lua: plot.read: %s:2: not a JSON line: "):format(bad) },
      { { "/missing/results.jsonl", "-o", png }, "plot.lua: plot.read: cannot open '/missing/results.jsonl'" },
      { { text, "-o", "/missing/dir/out.png" }, "plot.lua: --output: cannot write '/missing/dir/out.png': " },
    })
    -- the failed runs left no empty picture behind
    assert.are.same({ "bad.jsonl", "table.log" }, H.list_dir(dir))
  end)
end)

describe("gptoss.plot", function()
  after_each(H.cleanup)

  it("ends with gnuplot's own messages when it fails, and leaves no picture", function()
    local dir = H.tmpdir()
    local jsonl, png = dir .. "/getp.jsonl", dir .. "/out.png"
    H.write_file(jsonl, GETP_LINE .. "\n")
    -- a stand-in that starts the picture, then fails as gnuplot does on a bad script
    local env = { PATH = path_without_gnuplot(("printf '\\211PNG' > '%s'; echo 'line 7: unexpected thing' >&2; exit 1\n")
      :format(png)) }
    local code, out, err = H.runner("examples/plot.lua", pending)({ jsonl, "-o", png }, env)
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find(("plot.lua: plot: gnuplot failed (exit status 1) drawing '%s':\nline 7: unexpected thing\n")
      :format(png), 1, true), err)
    assert.are.same({ "getp.jsonl" }, H.list_dir(dir))
  end)
end)

describe("--plot in the benchmarks", function()
  after_each(H.cleanup)

  it("bench_getp draws its CPU run beside its JSON line", function()
    need_gnuplot()
    H.need_tokenizer(pending)
    local run = H.runner("examples/bench_getp.lua", pending)
    local png = H.tmpdir() .. "/getp.png"
    local code, out, err = run { "7m", "--device", "cpu", "--weights", "fp32", "--requests", "4",
      "--steps", "12", "--replicas-per-device", "2", "--plot", png }
    assert.are.equal(0, code, err)
    local figures = json.decode(out:match("\n({[^\n]*})\n$"))
    assert.are.same({ "getp", 2 }, { figures.bench, #figures.host_ms_per_step })
    assert.are.same({ 960, 2 * 440 }, { png_size(png) }) -- throughput, and each replica's step
  end)

  it("say that they need gnuplot before they run, and plot.lua too", function()
    local env = { PATH = path_without_gnuplot() }
    local png = H.tmpdir() .. "/out.png"
    for _, case in ipairs {
      -- bench_gpu would fail later on a build without a GPU, bench_getp on the missing tokenizer
      { "bench_gpu.lua", { "--plot", png }, "bench_gpu.lua: --plot needs gnuplot (Debian: gnuplot-nox)\n" },
      { "bench_getp.lua", { "--tokenizer", "/missing/tokenizer.bin", "--plot", png },
        "bench_getp.lua: --plot needs gnuplot (Debian: gnuplot-nox)\n" },
      { "plot.lua", { "/missing/results.jsonl", "-o", png }, "plot.lua: --output needs gnuplot (Debian: gnuplot-nox)\n" },
    } do
      local code, out, err = H.runner("examples/" .. case[1], pending)(case[2], env)
      assert.are.same({ 1, "", case[3] }, { code, out, err })
    end
    assert.is_nil(io.open(png))
  end)
end)
