--- gptoss.results_table: examples/RESULTS.md's text from the rows gptoss.results_rows chooses,
-- a line a row and short cells: the GPU model for the machine, the command's name and the
-- flags that differ from its defaults (gptoss.results_command), the commit's short id, and a
-- legacy row's longer texts cut after a clause (marked "…"; results.jsonl keeps them whole).
local command = require "gptoss.results_command"
local kinds = require "gptoss.results_kinds"
local results_rows = require "gptoss.results_rows"

local tbl = {}

-- the most characters of a legacy row's figure and command cells, before a cut
tbl.FIGURE_CHARS, tbl.COMMAND_CHARS = 110, 60

--- text cut after its last clause within limit characters, " …" after it: a clause ends before
-- "; " or ". ", or after code, outside parentheses and code. A cut keeps a figure: where what
-- fits has no digit, the first clause that has one. text itself where it fits or has no such
-- clause.
function tbl.cut(text, limit)
  if utf8.len(text) <= limit then return text end
  local depth, code, chars, fits, first = 0, false, 0, nil, nil
  local function clause(at)
    if not text:sub(1, at):find("%d") then return end
    if chars <= limit then fits = at elseif not first then first = at end
  end
  for i = 1, #text do
    local c = text:sub(i, i)
    if not c:find("[\128-\191]") then chars = chars + 1 end -- a UTF-8 character's first byte
    if c == "`" then
      code = not code
      if not code and depth == 0 then clause(i) end
    elseif not code and (c == "(" or c == ")") then
      depth = depth + (c == "(" and 1 or -1)
    elseif not code and depth == 0 and text:sub(i, i + 1):find("^[;.] ") then
      clause(i - 1)
    end
    if (fits or first) and chars > limit then break end
  end
  local at = fits or first
  return at and at < #text and text:sub(1, at) .. " …" or text
end

--- The machine as its GPU models ("H100", "two H100", "H100; H200"), else as its CPU's cores
-- ("CPU, 16 cores"), else as written.
function tbl.machine(text)
  local gpus = {}
  for count, model in text:gmatch("(%a+) NVIDIA (%w+)") do
    gpus[#gpus + 1] = (count == "one" and "" or count .. " ") .. model
  end
  if #gpus > 0 then return table.concat(gpus, "; ") end
  local cores = text:match("(%d+) cores")
  return cores and ("CPU, %s cores"):format(cores) or text
end

-- A legacy cell's first match of pattern, " …" after it where the cell says more.
local function first(text, pattern)
  local found = text:match(pattern)
  if not found then return text end
  return found .. (text:gsub("%s", "") ~= found and " …" or "")
end

--- A row's cells (the table's columns), commands shortened by defaults_of (as
-- results_command.shorten takes it).
function tbl.cells(row, defaults_of)
  local cells = { benchmark = row.benchmark, configuration = row.configuration, machine = tbl.machine(row.machine) }
  if row.legacy then
    -- each command in code a cell names, shortened; the cell as the table wrote it
    local commands = row.command:gsub("`([^`]+)`", function(line)
      local unescaped = line:gsub("\\|", "|")
      return "`" .. command.shorten(unescaped, defaults_of):gsub("|", "\\|") .. "`"
    end)
    cells.figure, cells.command = tbl.cut(row.figure, tbl.FIGURE_CHARS), tbl.cut(commands, tbl.COMMAND_CHARS)
    cells.commit, cells.date = first(row.commit, "%f[%w]%x%x%x%x%x%x%x"), first(row.date, "%d+%-%d+%-%d+")
  else
    cells.figure = row.figure
    cells.command = "`" .. command.shorten(row.command, defaults_of):gsub("|", "\\|") .. "`"
    cells.commit, cells.date = tbl.commit(row), row.date
  end
  return cells
end

--- A recorded row's commit cell: the short id, "+" where the tree had changes on it.
function tbl.commit(row)
  return row.commit:sub(1, 7) .. (row.uncommitted and "+" or "")
end

tbl.HEADER = [[
# Benchmark results

Drawn by `gptoss results` from [results.jsonl](results.jsonl), where a benchmark's `--record` appends
its lines; `gptoss results --check` fails while this table or README.md's figures differ from what
it draws ([building.md](../docs/building.md#benchmarks)). A row is a run of a benchmark and
configuration on a GPU model, none estimated, showing the latest figure of each batch size (a later
run of some sizes leaves the others' standing). A row written before the benchmarks recorded their
lines gives way to a later run of its configuration on any GPU, and to a row of its benchmark on its
GPU model ]] .. kinds.number(results_rows.STALE_DAYS)
  .. [[ or more days newer (unless README.md shows it). Older runs and every row's whole
text: results.jsonl and git; the designs they decided: [decisions.md](../docs/decisions.md).

- Unless a row says otherwise: the synthetic 20b, bf16 weights and KV cache, greedy; `mxfp4`: the
  experts in MXFP4. `bench_gpu`: B sequences prefill 16 tokens, then decode to position ctx − 1;
  "% of copy": a step's bytes over its time against `gptoss.copy_bandwidth`; per kernel: ms a
  step. `bench_getp`: requests of 15.2 tokens on average, TPS the course's way.
- command: the gptoss command and its arguments that differ from today's defaults; "same call":
  one GPU machine call. commit: the code measured (`+`: with changes not committed). `…`: cut.
  Rows dated up to 2026-11-29 number GPUs from 1 (`--devices 1,2`, "GPU 1": today's `--device
  0,1`, GPU 0) and ran the benchmarks on synthetic weights of seed 1 (today's default is 7).
- Not measured yet: getp on four or more GPUs, MPI ranks on more than two, any run on gfx90a.
]]

local COLUMNS = { "benchmark", "configuration", "figure", "machine", "command", "commit", "date" }

--- examples/RESULTS.md's text: the header and a line of cells a row, a benchmark named where its
-- rows begin.
function tbl.text(rows, defaults_of)
  local out = { tbl.HEADER, "| " .. table.concat(COLUMNS, " | ") .. " |", "|" .. ("---|"):rep(#COLUMNS) }
  for r, row in ipairs(rows) do
    local cells, line = tbl.cells(row, defaults_of), {}
    if r > 1 and rows[r - 1].benchmark == row.benchmark then cells.benchmark = "" end -- said above
    for i, c in ipairs(COLUMNS) do line[i] = cells[c] end
    out[#out + 1] = "| " .. table.concat(line, " | ") .. " |"
  end
  return table.concat(out, "\n") .. "\n"
end

return tbl
