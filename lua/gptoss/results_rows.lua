--- gptoss.results_rows: which lines of the results file make examples/RESULTS.md's rows. A row
-- is a benchmark, a configuration (gptoss.results_kinds words a benchmark's line; a legacy line,
-- written before the benchmarks recorded theirs, carries its own texts) and a GPU model; it
-- shows the latest run of its key. A legacy row also gives way to any later row of its
-- benchmark and configuration on another GPU model: its machine is prose, so the newer
-- measurement stands for it (a recorded row keeps one row per GPU model).
local kinds = require "gptoss.results_kinds"

local rows = {}

-- The fields every line has.
rows.REQUIRED = { "machine", "command", "commit", "date" }

-- A line's benchmark, configuration and the kind that draws it (nil: a legacy line's texts).
local function describe(line)
  if line.figure then return line.benchmark, line.configuration, nil end
  local kind = kinds[line.bench]
  return kind.benchmark, kind.configuration(line), kind
end

-- The GPU model a line ran on ("H100", "H200"), from its gpu field or its machine's words;
-- "" for a CPU's: a figure of one GPU does not replace another's.
local function gpu_model(line)
  return (line.gpu or line.machine or ""):match("NVIDIA (H%d+)") or ""
end

--- A row's key: its benchmark, configuration and GPU model.
function rows.key(benchmark, configuration, gpu)
  return benchmark .. "\0" .. configuration .. "\0" .. gpu
end

-- The lines of one run, the latest line of a key being `last`: those of its key, command,
-- commit, date and machine. A kind's run keeps the latest line of each sweep value (of the
-- whole run, without a sweep), in sweep order; texts keep all, in file order.
local function run_of(lines, keys, last, kind)
  local run, at = {}, {}
  for i, line in ipairs(lines) do
    local same = keys[i] == keys[last]
    for _, field in ipairs(rows.REQUIRED) do same = same and line[field] == lines[last][field] end
    if same then
      local value = kind and (kind.sweep and line[kind.sweep] or true) or i
      if not at[value] then
        run[#run + 1] = line
        at[value] = #run
      else
        run[at[value]] = line
      end
    end
  end
  if kind and kind.sweep then table.sort(run, function(x, y) return x[kind.sweep] < y[kind.sweep] end) end
  return run
end

-- Whether line i of lines was measured after line j: a later day, or the same day and later in
-- the file.
local function later(lines, i, j)
  local a, b = lines[i].date:sub(1, 10), lines[j].date:sub(1, 10)
  return a > b or (a == b and i > j)
end

-- The index of the latest line of each key (keys[i]: line i's), legacy rows given way.
local function latest_lines(lines, keys, legacy)
  local latest, newest_of = {}, {} -- by key; by benchmark and configuration, any GPU
  for i in ipairs(lines) do
    if not latest[keys[i]] or later(lines, i, latest[keys[i]]) then latest[keys[i]] = i end
    local setting = keys[i]:match("^(.*)\0")
    if not newest_of[setting] or later(lines, i, newest_of[setting]) then newest_of[setting] = i end
  end
  for key, i in pairs(latest) do
    if legacy[i] and newest_of[key:match("^(.*)\0")] ~= i then latest[key] = nil end
  end
  return latest
end

--- The rows drawn from lines: for each benchmark, configuration and GPU model the latest run,
-- as {benchmark, configuration, gpu, figure, legacy, machine, command, commit, uncommitted,
-- date, lines = the run's}, sorted by benchmark, configuration, then GPU model.
function rows.rows(lines)
  local keys, named, legacy = {}, {}, {}
  for i, line in ipairs(lines) do
    local benchmark, configuration, kind = describe(line)
    keys[i], legacy[i] = rows.key(benchmark, configuration, gpu_model(line)), kind == nil
    named[keys[i]] = { benchmark, configuration, kind }
  end
  local drawn = {}
  for key, last in pairs(latest_lines(lines, keys, legacy)) do
    local benchmark, configuration, kind = table.unpack(named[key], 1, 3)
    local line, run = lines[last], run_of(lines, keys, last, kind)
    local figures = {}
    for i, l in ipairs(run) do figures[i] = l.figure end
    drawn[#drawn + 1] = { benchmark = benchmark, configuration = configuration, gpu = gpu_model(line),
      figure = kind and kind.figure(run) or table.concat(figures, "; "), legacy = kind == nil,
      machine = line.machine, command = line.command, commit = line.commit, uncommitted = line.uncommitted,
      date = line.date, lines = run }
  end
  table.sort(drawn, function(x, y)
    if x.benchmark ~= y.benchmark then return x.benchmark < y.benchmark end
    if x.configuration ~= y.configuration then return x.configuration < y.configuration end
    return x.gpu < y.gpu
  end)
  return drawn
end

return rows
