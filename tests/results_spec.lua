-- The benchmarks' results (gptoss.results, examples/results.lua): examples/RESULTS.md and
-- README.md's figures are what `gptoss results` draws from examples/results.jsonl; how rows are
-- chosen and worded, on small fixtures; the fixture tree's files redrawn and checked; and the
-- benchmarks' --record, which appends to the file $GPTOSS_RESULTS names (never the tree's here).
local json = require "dkjson"
local plot = require "gptoss.plot"
local results = require "gptoss.results"
local results_command = require "gptoss.results_command"
local results_table = require "gptoss.results_table"
local H = require "helpers"

local function tree_root()
  if not H.TREE.root then pending("gptoss was not loaded from a source tree") end
  return H.TREE.root
end

-- A bench_gpu line as its --record writes it: run = {date, commit}, the figures as given.
local function gpu_line(run, weights, batch, tok_per_s, step_ms, gpu)
  gpu = gpu or "NVIDIA H200"
  return { bench = "gpu_decode", machine = "one " .. gpu, gpu = gpu, command = "gptoss bench_gpu 20b",
    commit = run[2], date = run[1], model = "20b", weights = weights, device = gpu, batch = batch,
    ctx = 1024, prompt = 16, feed = "device", tok_per_s = tok_per_s, step_ms = step_ms }
end

-- A line of a row's texts.
local function text_line(benchmark, configuration, figure, date, commit)
  return { benchmark = benchmark, configuration = configuration, figure = figure, machine = "one NVIDIA H100 80GB HBM3",
    command = "`build/engine_gemm 1024` | 2048", commit = commit, date = date }
end

describe("examples/RESULTS.md and README.md", function()
  after_each(H.cleanup)

  it("are what gptoss results draws from examples/results.jsonl", function()
    local root = tree_root()
    local differ = results.differences(root)
    local figure = root .. results.FIGURE
    for i = #differ, 1, -1 do
      if differ[i] == figure then table.remove(differ, i) end
    end
    assert.are.same({}, differ, "run ./gptoss results and commit what it draws")
    local code, out, err = H.gptoss(pending, H.tmpdir(), { "results", "--check" })
    assert.are.same({ 0, "examples/RESULTS.md and README.md are drawn from examples/results.jsonl\n" }, { code, out },
      err)
  end)

  it("show the picture gptoss results draws (needs gnuplot)", function()
    local root = tree_root()
    if not plot.available() then pending("needs gnuplot (Debian: apt-get install gnuplot-nox)") end
    local differ, drew = results.differences(root)
    assert.is_true(drew)
    for _, path in ipairs(differ) do
      assert.are_not.equal(root .. results.FIGURE, path, "run ./gptoss results and commit the picture it draws")
    end
  end)
end)

describe("gptoss.results", function()
  after_each(H.cleanup)

  it("keeps the latest figure of each batch size, a row for each run that measured some", function()
    local old, new, later_same_day = { "2026-01-01", "aaa1111" }, { "2026-01-02", "bbb2222" }, { "2026-01-02", "ccc3333" }
    local rows = results.rows {
      gpu_line(old, "bf16", 64, 4000.0, 16.0), gpu_line(old, "bf16", 1, 260.0, 3.8),
      gpu_line(new, "bf16", 64, 4113.7, 15.558),
      gpu_line(old, "mxfp4", 1, 357.5, 2.797),
      text_line("engine_gemm probe", "dense", "2048 rows: logits 4.561", "2026-01-02", "ddd4444"),
      text_line("engine_gemm probe", "dense", "1024 rows: unembedding 2.285 ms", "2026-01-01", "eee5555"),
      text_line("engine_gemm probe", "dense", "1024 rows: unembedding 2.416 ms", "2026-01-02", "ddd4444"),
      gpu_line(later_same_day, "bf16", 256, 11852.1, 21.6),
    }
    local seen = {}
    for i, row in ipairs(rows) do
      seen[i] = { row.benchmark, row.configuration, row.figure, row.command, row.commit, row.date }
    end
    assert.are.same({
      -- B=1 of the old run stands beside the later runs' B=64 and (the same day, later in the file) B=256
      { "bench_gpu", "ctx 1024, bf16", "B=1 260.0 tok/s (3.800 ms a step)", "gptoss bench_gpu 20b", "aaa1111",
        "2026-01-01" },
      { "bench_gpu", "ctx 1024, bf16", "B=64 4113.7 tok/s (15.558 ms a step)", "gptoss bench_gpu 20b", "bbb2222",
        "2026-01-02" },
      { "bench_gpu", "ctx 1024, bf16", "B=256 11852.1 tok/s (21.600 ms a step)", "gptoss bench_gpu 20b", "ccc3333",
        "2026-01-02" },
      { "bench_gpu", "ctx 1024, mxfp4", "B=1 357.5 tok/s (2.797 ms a step)", "gptoss bench_gpu 20b", "aaa1111",
        "2026-01-01" },
      -- a row's texts: the latest run's lines in file order, the command's cell as written
      { "engine_gemm probe", "dense", "2048 rows: logits 4.561; 1024 rows: unembedding 2.416 ms",
        "`build/engine_gemm 1024` | 2048", "ddd4444", "2026-01-02" },
    }, seen)
    -- one run's batch sizes in one row, sorted
    rows = results.rows { gpu_line(new, "bf16", 64, 4113.7, 15.558), gpu_line(new, "bf16", 1, 269.6, 3.709) }
    assert.are.equal("B=1 269.6 tok/s (3.709 ms a step), B=64 4113.7 (15.558 ms)", rows[1].figure)
  end)

  it("folds a legacy row into a later row of its configuration on any GPU, a recorded row on its GPU only", function()
    local function legacy(configuration, date, gpu)
      local line = text_line("bench_gpu", configuration, "B=64 5281.9 tok/s", date, "ddd4444")
      line.machine = "one NVIDIA " .. gpu
      return line
    end
    local function kept(lines)
      local seen = {}
      for i, row in ipairs(results.rows(lines)) do
        seen[i] = ("%s %s %s"):format(row.configuration, row.gpu, row.date)
      end
      return seen
    end
    -- a legacy H200 row gives way to a later run of its configuration on an H100; older, it does not
    assert.are.same({ "ctx 1024, bf16 H100 2026-01-02", "ctx 64, bf16 H200 2026-01-01" }, kept {
      legacy("ctx 1024, bf16", "2026-01-01", "H200"), legacy("ctx 64, bf16", "2026-01-01", "H200"),
      gpu_line({ "2026-01-02", "bbb2222" }, "bf16", 1, 269.6, 3.709, "NVIDIA H100 80GB HBM3"),
    })
    assert.are.same({ "ctx 1024, bf16 H100 2026-01-01", "ctx 1024, bf16 H200 2026-01-02" }, kept {
      gpu_line({ "2026-01-01", "bbb2222" }, "bf16", 1, 269.6, 3.709, "NVIDIA H100 80GB HBM3"),
      legacy("ctx 1024, bf16", "2026-01-02", "H200"),
    })
    -- the same day, the later line; recorded rows of two GPU models both stay
    assert.are.same({ "ctx 1024, bf16 H200 2026-01-01" }, kept {
      legacy("ctx 1024, bf16", "2026-01-01", "H100 80GB HBM3"), legacy("ctx 1024, bf16", "2026-01-01", "H200"),
    })
    assert.are.same({ "ctx 1024, bf16 H100 2026-01-01", "ctx 1024, bf16 H200 2026-01-02" }, kept {
      gpu_line({ "2026-01-01", "aaa1111" }, "bf16", 1, 269.6, 3.709, "NVIDIA H100 80GB HBM3"),
      gpu_line({ "2026-01-02", "bbb2222" }, "bf16", 1, 390.5, 2.561),
    })
  end)

  it("shows a legacy row until its benchmark has a row on its GPU model two days newer, or while README.md shows it",
    function()
      local function legacy(benchmark, configuration, date, gpu)
        local line = text_line(benchmark, configuration, "1.0 tok/s", date, "ddd4444")
        line.machine = "one NVIDIA " .. (gpu or "H100 80GB HBM3")
        return line
      end
      local function shown(lines)
        local configurations = {}
        for row in results.table_text(lines):gmatch("\n| [^|]*| ([^|]*) |") do
          if row ~= "configuration" then configurations[#configurations + 1] = row end
        end
        return configurations
      end
      assert.are.same({ "1024 requests, one GPU, bf16", "4096 requests", "512 requests", "8 requests", "ctx 1024, bf16",
        "ctx 64, bf16" }, shown {
          -- README.md shows the first; the second is two days older than the H100's newest
          legacy("bench_getp", "1024 requests, one GPU, bf16", "2026-01-01"),
          legacy("bench_getp", "2048 requests, one GPU, bf16", "2026-01-01"),
          legacy("bench_getp", "4096 requests", "2026-01-02"), legacy("bench_getp", "8 requests", "2026-01-03"),
          legacy("bench_getp", "512 requests", "2026-01-01", "H200"), -- of another GPU model
          -- a recorded row stays however old
          gpu_line({ "2026-01-01", "aaa1111" }, "bf16", 1, 269.6, 3.709, "NVIDIA H100 80GB HBM3"),
          legacy("bench_gpu", "ctx 64, bf16", "2026-01-09"),
        })
    end)

  it("draws a row's cells short: GPU models, the short commit, a legacy row's long texts cut", function()
    local line = gpu_line({ "2026-01-01", "abc1234def" }, "bf16", 1, 269.6, 3.709)
    line.command, line.uncommitted = "gptoss bench_gpu --batches 1 | tee log", true
    local cells = results_table.cells(results.rows({ line })[1])
    assert.are.same({ "`bench_gpu --batches 1 \\| tee log`", "abc1234+", "H200" },
      { cells.command, cells.commit, cells.machine })
    local long = ("a clause (with; its aside), "):rep(8)
    local legacy = text_line("engine_gemm probe", "dense", "no figure; 1 clause; " .. long .. "; 2",
      "2026-01-02 (x: 2026-01-01)", "recorded in ddd4444")
    legacy.machine = "two NVIDIA H100 80GB HBM3, one host (32 cores)"
    legacy.command = "`examples/bench_gpu.lua 20b` (then more)"
    local model_default = function() return { options = {}, positionals = { "20b" } } end
    cells = results_table.cells(results.rows({ legacy })[1], model_default)
    assert.are.same({ "no figure; 1 clause …", "two H100", "`bench_gpu` (then more)", "ddd4444 …",
      "2026-01-02 …" },
      { cells.figure, cells.machine, cells.command, cells.commit, cells.date })
    assert.are.same({ "CPU, 2 cores", "a machine" }, { results_table.machine("development machine (AMD EPYC, 2 cores)"),
      results_table.machine("a machine") })
    assert.are.equal("a (b; 1). d …", results_table.cut("a (b; 1). d; e f g h", 12))
    assert.are.equal("`a; 1` …", results_table.cut("`a; 1` and c d e f", 8))
    assert.are.equal("none fits here", results_table.cut("none fits here", 5))
    -- a benchmark named where its rows begin
    local sparse = text_line("engine_gemm probe", "sparse", "1", "2026-01-02", "x")
    local text = results_table.text(results.rows { legacy, sparse })
    assert.truthy(text:find("\n| engine_gemm probe | dense | no figure; 1 clause … |", 1, true), text)
    assert.truthy(text:find("\n|  | sparse | 1 | ", 1, true), text)
  end)

  it("shortens a command to its name and the arguments that differ from the defaults its help gives", function()
    local defaults = results_command.defaults_from_help([[
Usage: gptoss bench_gpu [-h] [--ctx <ctx>] [<model>]

Arguments:
   model                 A synthetic shape. (default: 20b)

Options:
   -h, --help            Show this help message and exit.
   --ctx <ctx>           Context reached by the last decode step. (default: 1024)
   --weights {fp32,bf16,mxfp4}
                         Weight format. (default: bf16)
   --name <name>         A name. (default: a b)
   --plot <plot>         Also draw the results as this PNG (needs gnuplot).
   --record              Append the JSON line(s).
]])
    assert.are.same({ options = { ["--help"] = { value = false }, ["--ctx"] = { value = true, default = "1024" },
      ["--weights"] = { value = true, default = "bf16" }, ["--name"] = { value = true, default = "a b" },
      ["--plot"] = { value = true }, ["--record"] = { value = false } }, positionals = { "20b" } }, defaults)
    local function short(line) return results_command.shorten(line, function() return defaults end) end
    assert.are.equal("bench_gpu --ctx 64 --record",
      short("examples/bench_gpu.lua 20b --ctx 64 --weights bf16 --record"))
    assert.are.equal("bench_gpu 120b --plot x.png",
      short("lua5.4 ../examples/bench_gpu.lua 120b --ctx=1024 --plot x.png"))
    assert.are.equal("bench_gpu --ctx=64", short("./gptoss bench_gpu --ctx=64 --name 'a b'"))
    -- an option it does not know keeps its value; a positional before another stays
    assert.are.equal("bench_gpu --model 20b -m getp 20b x", short("gptoss bench_gpu --model 20b -m getp 20b x"))
    assert.are.equal("make fuzz FUZZ_SECONDS=5", short("make fuzz FUZZ_SECONDS=5"))
    assert.are.equal("bench_gpu 20b --ctx 1024", results_command.shorten("gptoss bench_gpu 20b --ctx 1024"))
  end)

  it("reads a results file, naming the line it cannot read", function()
    local path = H.tmp()
    local good = json.encode(gpu_line({ "2026-01-01", "abc1234" }, "bf16", 1, 269.6, 3.709))
    H.write_file(path, good .. "\n\n" .. good .. "\n")
    assert.are.equal(2, #results.read(path))
    local no_date = gpu_line({ "2026-01-01", "abc1234" }, "bf16", 1, 269.6)
    no_date.date = nil
    for _, case in ipairs {
      { "{\"bench\": ", "not a JSON object" },
      { json.encode(no_date), "no date" },
      { json.encode { bench = "gpu", machine = "m", command = "c", commit = "x", date = "d" },
        "neither a row's texts nor a benchmark's line (bench: gpu)" },
    } do
      H.write_file(path, good .. "\n" .. case[1] .. "\n")
      local ok, err = pcall(results.read, path)
      assert.is_false(ok)
      assert.truthy(err:find(("results.read: %s:2: %s"):format(path, case[2]), 1, true), err)
    end
  end)

  it("words each benchmark's JSON line as the table does", function()
    local base = { machine = "m", command = "c", commit = "abc1234", date = "2026-01-01" }
    local function row(line)
      for k, v in pairs(base) do line[k] = v end
      local r = results.rows({ line })[1]
      return { r.benchmark, r.configuration, r.figure }
    end
    assert.are.same({ "bench_golden", "20b-2l, fp32, 4 slots, 16 threads, prompt 16, decode 4",
      "prefill 1.720 s (37.2 rows/s), decode 0.459 s (34.8 rows/s)" },
      row { bench = "golden", model = "20b-2l", weights = "fp32", slots = 4, threads = 16, prompt = 16, decode = 4,
        prefill_s = 1.72, prefill_rows_per_s = 37.2, decode_s = 0.459, decode_rows_per_s = 34.8 })
    assert.are.same({ "bench_getp", "2048 requests, two GPUs, mxfp4",
      "53115.4 tok/s (38.556 s, 1033 engine steps); getp's Lua 2.007 / 2.060 ms a step, waiting 20.851 / 12.693" },
      row { bench = "getp", model = "20b", requests = 2048, slots = { 1024, 1024 }, replicas_per_device = 1,
        device = "NVIDIA H100 80GB HBM3", weights = "mxfp4", steps_limit = 1024, chat = false, tok_per_s = 53115.4,
        seconds = 38.556, engine_steps = 1033, host_ms_per_step = { 2.007, 2.06 },
        waited_ms_per_step = { 20.851, 12.693 } })
    assert.are.same({ "bench_tokenizer", "o200k mode, README.md repeated to 8 MB",
      "encode 15.25 MB/s one call, 8.77 one call a line; decode 31.0 MB/s; 3.39 bytes a token" },
      row { bench = "tokenizer", mode = "o200k", text = "/x/README.md", mb = 8, bytes = 339, tokens = 100,
        encode_mb_per_s = 15.25, encode_lines_mb_per_s = 8.77, decode_mb_per_s = 31.0 })
    local serve = { bench = "serve", requests = 1000, lengths = "sharegpt", rate = "inf", output_tok_per_s = 9894.4,
      elapsed = 20.01, chat_fraction = 0.2, json_schema = "typical" }
    for _, m in ipairs { "ttft_ms", "tpot_ms", "itl_ms" } do serve[m] = { p50 = 1, p90 = 2, p99 = 3 } end
    assert.are.equal("1000 streamed completions, 20% of them chat with json_schema typical, sharegpt lengths, "
      .. "unbounded rate", row(serve)[2])
    assert.are.equal("1000 streamed completions, sharegpt lengths, unbounded rate",
      row(H.with(serve, { chat_fraction = 0, json_schema = false }))[2])
  end)

  it("says which of README.md's rows has no line", function()
    local ok, err = pcall(results.readme, { gpu_line({ "2026-01-01", "abc1234" }, "bf16", 1, 269.6, 3.709) })
    assert.is_false(ok)
    assert.truthy(err:find("results: README.md's row 'GPU decode, 20b with MXFP4 experts (the GPU default), "
      .. "context 1024 (`bench_gpu`)' has no line of bench_gpu, ctx 1024, mxfp4", 1, true), err)
  end)

  it("describes the CPU as the machine of a CPU benchmark", function()
    local machine, gpu = results.machine { "cpu" }
    assert.truthy(machine:find(" %(%d+ cores%)$"), machine)
    assert.is_nil(gpu)
  end)
end)

describe("gptoss results", function()
  after_each(H.cleanup)

  -- a tree of the repository's results file and README.md, its figures drawn by gptoss results
  local function fixture_tree()
    local root = tree_root()
    local dir = H.tmpdir()
    assert(os.execute(("mkdir -p %s/examples %s/docs/figures"):format(H.shell_quote(dir), H.shell_quote(dir))))
    H.write_file(dir .. "/" .. results.FILE, H.read_file(root .. results.FILE))
    H.write_file(dir .. "/README.md", H.read_file(root .. "README.md"))
    local code, out, err = H.gptoss(pending, dir, { "results", "--root", dir })
    assert.are.same({ 0, "examples/RESULTS.md and README.md drawn from examples/results.jsonl\n" }, { code, out }, err)
    return dir
  end

  it("redraws a tree's files from its results file, and --check fails until it has", function()
    local dir = fixture_tree()
    local function check() return H.gptoss(pending, dir, { "results", "--check", "--root", dir }) end
    assert.are.equal(0, (check()))
    -- a later bench_gpu run of a configuration README.md shows, on its GPU: its figure in both,
    -- once redrawn; on another GPU, a row of its own in RESULTS.md only
    local f = assert(io.open(dir .. "/" .. results.FILE, "ab"))
    f:write(json.encode(gpu_line({ "2099-01-01", "abc1234" }, "bf16", 1, 270.1, 3.702, "NVIDIA H100 80GB HBM3")), "\n")
    f:write(json.encode(gpu_line({ "2099-01-02", "abc1234" }, "bf16", 1, 390.5, 2.561)), "\n")
    f:close()
    local code, out, err = check()
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("gptoss results: not what `gptoss results` draws from examples/results.jsonl: ", 1, true), err)
    for _, path in ipairs { "README.md", results.TABLE } do assert.truthy(err:find(dir .. "/" .. path, 1, true), err) end
    assert.are.equal(0, (H.gptoss(pending, dir, { "results", "--root", dir })))
    assert.are.equal(0, (check()))
    local table_text, readme = H.read_file(dir .. "/" .. results.TABLE), H.read_file(dir .. "/README.md")
    local row = "| ctx 1024, bf16 | B=1 270.1 tok/s (3.702 ms a step) | H100 | `bench_gpu` | abc1234 | 2099-01-01 |\n"
    assert.truthy(table_text:find(row, 1, true), table_text)
    assert.truthy(table_text:find("| ctx 1024, bf16 | B=1 390.5 tok/s (2.561 ms a step) | H200 |",
      1, true), table_text)
    assert.truthy(readme:find("| GPU decode, 20b in bf16, context 1024 (`bench_gpu`) | B=1 270.1 tok/s (3.702 ms a step) "
      .. "| one NVIDIA H100 80GB HBM3 |\n", 1, true), readme)
    -- a hand edit is found too
    H.write_file(dir .. "/" .. results.TABLE, table_text:gsub("270%.1", "270.2"))
    code, _, err = check()
    assert.are.equal(1, code)
    assert.truthy(err:find(dir .. "/examples/RESULTS.md", 1, true), err)
  end)

  it("shows in README.md the later run on another GPU that took a legacy row's place", function()
    local dir = fixture_tree()
    local f = assert(io.open(dir .. "/" .. results.FILE, "ab"))
    f:write(json.encode { bench = "getp", machine = "one NVIDIA H200", gpu = "NVIDIA H200", command = "gptoss bench_getp",
      commit = "abc1234", date = "2099-01-01", model = "20b", requests = 1024, slots = { 1024 }, device = "NVIDIA H200",
      weights = "bf16", steps_limit = 1024, tok_per_s = 30000.5, seconds = 30.0, engine_steps = 1033,
      host_ms_per_step = { 2.0 }, waited_ms_per_step = { 20.0 } }, "\n")
    f:close()
    assert.are.equal(0, (H.gptoss(pending, dir, { "results", "--root", dir })))
    local table_text, readme = H.read_file(dir .. "/" .. results.TABLE), H.read_file(dir .. "/README.md")
    assert.truthy(readme:find("| getp, 20b in bf16, 1024 requests of about 15 tokens, steps 1024 (`bench_getp`) | "
      .. "30000.5 tok/s (30.000 s, 1033 engine steps); getp's Lua 2.000 ms a step, waiting 20.000 | one NVIDIA H200 |",
      1, true), readme)
    local _, rows = table_text:gsub("\n| [^|]*| 1024 requests, one GPU, bf16 |", "")
    assert.are.equal(1, rows, table_text)
  end)

  it("refuses a README.md without its drawn part", function()
    local dir = fixture_tree()
    H.write_file(dir .. "/README.md", "# gptoss\n")
    local code, out, err = H.gptoss(pending, dir, { "results", "--check", "--root", dir })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find(("gptoss results: results: %s/README.md has no drawn part"):format(dir), 1, true), err)
  end)
end)

describe("--record", function()
  after_each(H.cleanup)

  local GOLDEN = { "bench_golden", "7m", "--slots", "1", "--prompt", "2", "--decode", "1" }

  it("appends a benchmark's JSON line with its machine, command, commit and date, only when asked", function()
    local dir, file = H.tmpdir(), H.tmp()
    os.remove(file)
    local code, out, err = H.gptoss(pending, dir, GOLDEN, { GPTOSS_RESULTS = file })
    assert.are.same({ 0, "" }, { code, err })
    assert.is_nil(io.open(file), "written without --record")
    local args = { table.unpack(GOLDEN) }
    args[#args + 1] = "--record"
    for run = 1, 2 do
      code, out, err = H.gptoss(pending, dir, args, { GPTOSS_RESULTS = file })
      assert.are.same({ 0, ("1 line recorded in %s\n"):format(file) }, { code, err })
      local printed = json.decode(out:match("\n({[^\n]*})\n$"))
      local lines = results.read(file)
      assert.are.equal(run, #lines)
      local line = lines[run]
      for k, v in pairs(printed) do assert.are.same(v, line[k], k) end
      assert.are.equal("gptoss bench_golden 7m --slots 1 --prompt 2 --decode 1", line.command)
      assert.are.equal(results.machine { "cpu" }, line.machine)
      assert.truthy(line.commit:match("^%x+$") or line.commit == "unknown", line.commit)
      assert.truthy(line.date:match("^%d%d%d%d%-%d%d%-%d%d$"), line.date)
    end
    -- outside a git checkout the commit is unknown
    code, _, err = H.gptoss(pending, dir, args, { GPTOSS_RESULTS = file, GIT_DIR = dir .. "/no-git" })
    assert.are.equal(0, code, err)
    assert.are.equal("unknown", results.read(file)[3].commit)
  end)

  it("is offered by every benchmark that prints a JSON line, whose rows gptoss.results can word", function()
    local root = tree_root()
    local kinds = require "gptoss.results_kinds"
    local benchmarks = 0
    for _, name in ipairs(H.list_dir(root .. "examples")) do
      local source = name:match("^bench_.*%.lua$") and H.read_file(root .. "examples/" .. name)
      if source and source:find("encode(", 1, true) then
        benchmarks = benchmarks + 1
        local bench = source:match('bench = "([%w_]+)"')
        assert.truthy(bench and kinds[bench], ("%s: its line's bench (%s) has no wording in gptoss.results_kinds")
          :format(name, tostring(bench)))
        local code, out = H.runner("examples/" .. name, pending)({ "--help" })
        assert.are.equal(0, code, name)
        assert.truthy(out:find("--record", 1, true), name .. " has no --record")
      end
    end
    assert.is_true(benchmarks >= 7, benchmarks)
    assert.truthy(H.read_file(root .. "tools/bench_vendor_gemm.py"):find('"--record"', 1, true))
  end)
end)
