--- gptoss.results: every benchmark measurement in one file, examples/results.jsonl (a JSON
-- object a line, oldest first), and what is drawn from it: examples/RESULTS.md's table and
-- README.md's figures (a table and docs/figures/bench_gpu.png), so that none of them is written
-- by hand (examples/results.lua is the command; docs/building.md#benchmarks).
--
-- A line is what a benchmark printed as JSON, its "bench" naming how it reads
-- (gptoss.results_kinds), with the machine, gpu, command, commit and date its --record added
-- (results.record); or, for a row of the table written before this file (and for what no
-- benchmark prints as JSON: the probes, fuzzing), its texts as the table had them: benchmark,
-- configuration, figure, the command's cell. Which lines make the table's rows:
-- gptoss.results_rows; their cells: gptoss.results_table.
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local files = require "gptoss.files"
local kinds = require "gptoss.results_kinds"
local plot = require "gptoss.plot"
local results_command = require "gptoss.results_command"
local results_rows = require "gptoss.results_rows"
local results_table = require "gptoss.results_table"

local results = {}

-- the files, from the source tree's root
results.FILE, results.TABLE, results.README = "examples/results.jsonl", "examples/RESULTS.md", "README.md"
results.FIGURE = "docs/figures/bench_gpu.png"

--- The source tree this module was loaded from ("" or a path ending in "/"), or nil for an
-- installed copy (luarocks puts the modules elsewhere than lua/gptoss/).
function results.tree()
  local module = package.searchpath("gptoss.results", package.path)
  return module and module:match("^(.-)lua/gptoss/results%.lua$")
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- Adds --record to a benchmark's argparse parser.
function results.add_option(parser)
  parser:flag("--record", ("Append the JSON line(s) to the results file ($GPTOSS_RESULTS, else this source "
    .. "tree's %s) with the machine, command, commit and date; gptoss results then redraws "
    .. "examples/RESULTS.md."):format(results.FILE))
end

--- The file --record appends to: $GPTOSS_RESULTS, else the source tree's results file.
function results.path()
  local env = os.getenv("GPTOSS_RESULTS")
  if env and env ~= "" then return env end
  local root = results.tree()
  if not root then
    error("--record: gptoss does not run from a source tree: set GPTOSS_RESULTS to the file to append to", 0)
  end
  return root .. results.FILE
end

-- This host's CPU: "MODEL (N cores)" from /proc/cpuinfo.
local function cpu()
  local f = io.open("/proc/cpuinfo", "r")
  local text = f and f:read("a") or ""
  if f then f:close() end
  local _, cores = ("\n" .. text):gsub("\nprocessor%s*:", "")
  return ("%s (%d cores)"):format(text:match("model name%s*:%s*([^\n]+)") or "a CPU of unknown model", cores)
end

--- What a measurement ran on as RESULTS.md's machine column says it ("one NVIDIA H200", "two
-- NVIDIA H100 80GB HBM3, one host", "AMD EPYC 7B13 (2 cores)"), and the GPU's name (nil on the
-- CPU). devices: the GPU numbers used (a repeat counts once), or {"cpu"}; nil: this host, its
-- CPU and the GPUs it has (bench_serve's, which measures a server it does not know the GPU of).
function results.machine(devices)
  local host = devices == nil
  if host then
    devices = {}
    for i, d in ipairs(gptoss.devices()) do devices[i] = d.id end
  end
  local names, seen = {}, {}
  for _, d in ipairs(devices) do
    if d ~= "cpu" and not seen[d] then
      seen[d] = true
      names[#names + 1] = gptoss.device(d).name
    end
  end
  if #names == 0 then return cpu(), nil end
  local same = true
  for _, name in ipairs(names) do same = same and name == names[1] end
  local gpus = same and ("%s %s"):format(kinds.number(#names), names[1]) or table.concat(names, " + ")
  if #names > 1 then gpus = gpus .. ", one host" end
  return host and ("%s, with %s"):format(cpu(), gpus) or gpus, names[1]
end

-- The command line as it ran, --record left out: arg[0] ("gptoss bench_gpu" through the gptoss
-- program, else the script's path) and its arguments, quoted where a shell would need it.
local function command_line()
  local words = { arg[0] }
  for i = 1, #arg do
    if arg[i] ~= "--record" then
      words[#words + 1] = arg[i]:match("^[%w%-_./,:=+@%%]+$") and arg[i] or shell_quote(arg[i])
    end
  end
  return table.concat(words, " ")
end

-- HEAD's short id in the source tree, and whether its tracked files differ from it (but for the
-- files this module appends to and draws: a record before must not mark the next); "unknown"
-- outside a git checkout.
local function commit()
  local root = results.tree()
  local function git(args)
    if not root then return nil end
    local p = assert(io.popen(("git -C %s %s 2>/dev/null"):format(shell_quote(root == "" and "." or root), args)))
    local out = p:read("a")
    return p:close() and out or nil
  end
  local head = (git("rev-parse --short HEAD") or ""):match("%S+")
  if not head then return "unknown", false end
  local drawn = {}
  for i, path in ipairs { results.FILE, results.TABLE, results.README, results.FIGURE } do
    drawn[i] = shell_quote(":(exclude)" .. path)
  end
  return head, (git("status --porcelain --untracked-files=no -- . " .. table.concat(drawn, " ")) or "") ~= ""
end

-- JSON of t with these keys first, then every other key (of t and its tables) sorted: lines
-- that read the same in every run, whatever the order of pairs().
local FIRST = { "bench", "machine", "gpu", "command", "commit", "uncommitted", "date" }
local function encode(t)
  local order, seen = {}, {}
  for _, k in ipairs(FIRST) do seen[k] = true end
  local function collect(v)
    for k, sub in pairs(v) do
      if type(k) == "string" and not seen[k] then
        seen[k] = true
        order[#order + 1] = k
      end
      if type(sub) == "table" then collect(sub) end
    end
  end
  collect(t)
  table.sort(order)
  return json.encode(t, { keyorder = table.move(order, 1, #order, #FIRST + 1, table.move(FIRST, 1, #FIRST, 1, {})) })
end

--- Appends each of lines (the tables a benchmark printed as JSON) to the results file with
-- the machine and GPU (devices as results.machine takes them), the command line, HEAD's
-- commit (uncommitted = true where the tree differs from it) and today's date (UTC); says
-- so on stderr (stdout keeps the benchmark's own lines).
function results.record(lines, devices)
  local path, machine, gpu = results.path(), results.machine(devices)
  local head, changed = commit()
  local text = {}
  for i, line in ipairs(lines) do
    local t = { machine = machine, gpu = gpu, command = command_line(), commit = head, uncommitted = changed or nil,
      date = os.date("!%Y-%m-%d") }
    for k, v in pairs(line) do t[k] = v end
    text[i] = encode(t) .. "\n"
  end
  local f, msg = io.open(path, "ab")
  if not f then error(("--record: cannot append to '%s': %s"):format(path, msg), 0) end
  f:write(table.concat(text))
  f:close()
  io.stderr:write(("%d line%s recorded in %s\n"):format(#lines, #lines == 1 and "" or "s", path))
end

--- For a benchmark's --record (its value `record`): results.record, once the results file is
-- known to be writable (so that a benchmark fails before it runs for minutes rather than
-- after); without --record, a function that does nothing.
function results.recorder(record)
  if not record then return function() end end
  cmdline.check_writable("--record", results.path())
  return results.record
end

local REQUIRED = results_rows.REQUIRED

--- The lines of a results file in file order, each a table. Raises, naming the file and the
-- line, for a line that is not a JSON object, lacks a field of REQUIRED, or has neither the
-- texts of a row (benchmark, configuration, figure) nor a "bench" of gptoss.results_kinds.
function results.read(path)
  local lines = {}
  for n, text in files.lines("results.read", path) do
    if text:match("%S") then
      local line, _, err = json.decode(text)
      local function bad(why) error(("results.read: %s:%d: %s"):format(path, n, why), 0) end
      if type(line) ~= "table" then bad("not a JSON object" .. (err and ": " .. err or "")) end
      for _, field in ipairs(REQUIRED) do
        if type(line[field]) ~= "string" then bad(("no %s"):format(field)) end
      end
      if not (line.figure and line.benchmark and line.configuration) and not kinds[line.bench] then
        bad(("neither a row's texts nor a benchmark's line (bench: %s)"):format(tostring(line.bench)))
      end
      lines[#lines + 1] = line
    end
  end
  return lines
end

--- The rows drawn from lines (gptoss.results_rows).
results.rows = results_rows.rows

-- README.md's table: what a row says, and the benchmark, configuration and GPU model ("" for
-- a CPU) whose latest run gives its figure (where a later run on another GPU took the place of
-- a legacy row, that run's); the first FIGURE_ROWS (bench_gpu's) are what the picture draws,
-- both of one GPU.
local README_ROWS = {
  { "GPU decode, 20b with MXFP4 experts (the GPU default), context 1024 (`bench_gpu`)", "bench_gpu",
    "ctx 1024, mxfp4", "H100" },
  { "GPU decode, 20b in bf16, context 1024 (`bench_gpu`)", "bench_gpu", "ctx 1024, bf16", "H100" },
  { "getp, 20b with MXFP4 experts, 2048 requests (`bench_getp`)", "bench_getp", "2048 requests, one GPU, mxfp4",
    "H100" },
  { "getp, 20b in bf16, 1024 requests of about 15 tokens, steps 1024 (`bench_getp`)", "bench_getp",
    "1024 requests, one GPU, bf16", "H100" },
  { "getp, 20b in bf16, 2048 requests on two GPUs", "bench_getp", "2048 requests, two GPUs, bf16", "H200" },
  { "GPU decode, 20b MXFP4, one sequence at positions 8k / 32k / 128k (`bench_gpu --prompt`)",
    "bench_gpu, long positions", "20b, mxfp4, B=1, decoding at positions 8000..8191 / 32512..32767 / "
    .. "130816..131071 after a prefill in 2048-row steps", "H100" },
  { "CPU golden engine, 20b-2l, 4 slots (`bench_golden`)", "bench_golden",
    "20b-2l, fp32, 4 slots, 16 threads, prompt 16, decode 4", "" },
  { "tokenizer encode and decode, course mode (`bench_tokenizer`)", "bench_tokenizer",
    "course mode, README.md repeated to 8 MB", "" },
  { "tokenizer encode and decode, o200k mode (`bench_tokenizer --mode o200k`)", "bench_tokenizer",
    "o200k mode, README.md repeated to 8 MB", "" },
}
local FIGURE_ROWS = 2

-- the lines that hold README.md's drawn part
local BEGIN = "<!-- drawn by `gptoss results` from examples/results.jsonl: edit that file, not this part -->"
local END = "<!-- end of what gptoss results draws -->"

-- the distinct values of field in rows, joined by ", "
local function distinct(rows, field)
  local values, seen = {}, {}
  for _, row in ipairs(rows) do
    if not seen[row[field]] then
      seen[row[field]] = true
      values[#values + 1] = row[field]
    end
  end
  return table.concat(values, ", ")
end

-- The row of rows (results.rows') that gives each of README_ROWS its figure: its key's latest
-- run (a sweep's runs share a key), else the row of its configuration that took a legacy row's
-- place; nil where there is none.
local function readme_rows(rows)
  local by_key, by_setting = {}, {}
  local function keep_latest(map, key, row)
    if not map[key] or row.date:sub(1, 10) > map[key].date:sub(1, 10) then map[key] = row end
  end
  for _, row in ipairs(rows) do
    keep_latest(by_key, results_rows.key(row.benchmark, row.configuration, row.gpu), row)
    keep_latest(by_setting, row.benchmark .. "\0" .. row.configuration, row)
  end
  local chosen = {}
  for i, r in ipairs(README_ROWS) do
    chosen[i] = by_key[results_rows.key(r[2], r[3], r[4])] or by_setting[r[2] .. "\0" .. r[3]]
  end
  return chosen
end

--- examples/RESULTS.md's text drawn from lines, each command shortened by defaults_of (as
-- gptoss.results_command.shorten takes it; nil: as it ran): the rows results_rows.shown keeps,
-- README.md's among them.
function results.table_text(lines, defaults_of)
  local rows, in_readme = results.rows(lines), {}
  for _, row in pairs(readme_rows(rows)) do in_readme[row] = true end
  return results_table.text(results_rows.shown(rows, in_readme), defaults_of)
end

--- README.md's drawn part (BEGIN to END: the picture, its caption and the table of figures),
-- the lines the picture draws and its title, from lines.
function results.readme(lines)
  local chosen = readme_rows(results.rows(lines))
  local table_rows, drawn, runs, figure_rows = { "| what | figure | machine |", "|---|---|---|" }, {}, {}, {}
  for i, r in ipairs(README_ROWS) do
    local row = chosen[i]
    if not row then error(("results: README.md's row '%s' has no line of %s, %s"):format(r[1], r[2], r[3]), 0) end
    table_rows[#table_rows + 1] = ("| %s | %s | %s |"):format(r[1], row.figure, row.machine)
    if i <= FIGURE_ROWS then
      table.move(row.lines, 1, #row.lines, #drawn + 1, drawn)
      runs[i], figure_rows[i] = ("%s at %s"):format(row.lines[1].weights, results_table.commit(row)), row
    end
  end
  local what = ("%s (%s, %s)"):format(table.concat(runs, ", "), distinct(figure_rows, "machine"),
    distinct(figure_rows, "date"))
  local block = { BEGIN, "", ("![bench_gpu: decode throughput against batch size](%s)"):format(results.FIGURE), "",
    ("Decode throughput of the synthetic 20b against batch size (`bench_gpu`, context 1024): %s."):format(what), "",
    table.concat(table_rows, "\n"), END }
  return table.concat(block, "\n"), drawn, "bench_gpu, context 1024: " .. what
end

--- The commands' defaults as results_command.shorten takes them: each command's --help, run by
-- the gptoss program of the tree this module came from (else the one on PATH) with the build
-- folder gptoss.core came from.
function results.defaults_reader()
  local tree = results.tree()
  local program = tree and (tree == "" and "./" or tree) .. "gptoss" or "gptoss"
  local core = package.searchpath("gptoss.core", package.cpath)
  return results_command.help_reader(program, core and core:match("^(.*)/gptoss/core%.[^/]*$"))
end

--- What `gptoss results` writes in the source tree at root ("" or ending in "/"), drawn from
-- its results file: {path = text} for RESULTS.md and README.md (its drawn part replaced), and
-- the picture's lines and title.
function results.draw(root)
  local lines = results.read(root .. results.FILE)
  local readme_path = root .. results.README
  local readme = files.read("results", readme_path)
  local block, drawn, title = results.readme(lines)
  local first = readme:find(BEGIN, 1, true)
  local _, last = readme:find(END, first or 1, true)
  if not (first and last) then
    error(("results: %s has no drawn part (a line '%s' and, after it, '%s')"):format(readme_path, BEGIN, END), 0)
  end
  return { [root .. results.TABLE] = results.table_text(lines, results.defaults_reader()),
    [readme_path] = readme:sub(1, first - 1) .. block .. readme:sub(last + 1) }, drawn, title
end

--- The files of the tree at root that are not what results.draw draws: a sorted list of
-- paths, the picture among them when gnuplot can draw it to compare (the second value says
-- whether it could).
function results.differences(root)
  local texts, drawn, title = results.draw(root)
  local differ = {}
  for path, text in pairs(texts) do
    local ok, old = pcall(files.read, "results", path)
    if not ok or old ~= text then differ[#differ + 1] = path end
  end
  local drew = plot.available()
  if drew then
    local png = os.tmpname()
    plot.write(drawn, png, { title = title })
    local ok, old = pcall(files.read, "results", root .. results.FIGURE)
    if not ok or old ~= files.read("results", png) then differ[#differ + 1] = root .. results.FIGURE end
    os.remove(png)
  end
  table.sort(differ)
  return differ, drew
end

return results
