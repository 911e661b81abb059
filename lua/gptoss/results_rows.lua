--- gptoss.results_rows: which lines of the results file make examples/RESULTS.md's rows. A row
-- is a benchmark, a configuration (gptoss.results_kinds words a benchmark's line; a legacy line,
-- written before the benchmarks recorded theirs, carries its own texts) and a GPU model. A
-- recorded key keeps the latest figure of each sweep value (bench_gpu's batch sizes), a row for
-- each run that measured some of them, so that a later run of a few batch sizes leaves the
-- others' standing; a legacy key shows its latest run. A legacy row also gives way to any later
-- row of its benchmark and configuration on another GPU model: its machine is prose, so the
-- newer measurement stands for it (a recorded row keeps one row per GPU model).
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

-- A run's identity: the fields its lines share (a benchmark's one command line).
local function run_id(line)
  local fields = {}
  for i, field in ipairs(rows.REQUIRED) do fields[i] = line[field] end
  return table.concat(fields, "\0")
end

-- A legacy key's row lines: those of the run of its latest line `last`, in file order.
local function legacy_run(lines, keys, last)
  local run = {}
  for i, line in ipairs(lines) do
    if keys[i] == keys[last] and run_id(line) == run_id(lines[last]) then run[#run + 1] = line end
  end
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

-- A recorded key's runs: the latest of its lines of each sweep value (the latest line, without a
-- sweep), grouped by the run that measured them, each in sweep order; the runs in the order of
-- their first values. A later run of some batch sizes leaves an earlier run's others standing.
local function recorded_runs(lines, keys, legacy, key, kind)
  local latest = {} -- by sweep value
  for i, line in ipairs(lines) do
    if keys[i] == key and not legacy[i] then
      local value = kind.sweep and line[kind.sweep] or true
      if not latest[value] or later(lines, i, latest[value]) then latest[value] = i end
    end
  end
  local runs, by_run = {}, {}
  for _, i in pairs(latest) do
    local id = run_id(lines[i])
    if not by_run[id] then
      by_run[id] = {}
      runs[#runs + 1] = by_run[id]
    end
    table.insert(by_run[id], lines[i])
  end
  local function before(x, y) return x[kind.sweep] < y[kind.sweep] end
  if kind.sweep then
    for _, run in ipairs(runs) do table.sort(run, before) end
    table.sort(runs, function(x, y) return before(x[1], y[1]) end)
  end
  return runs
end

--- The rows drawn from lines: for each benchmark, configuration and GPU model, a legacy key's
-- latest run, a recorded key's latest figure of each sweep value, a row for each run that
-- measured some; as {benchmark, configuration, gpu, figure, legacy, machine, command, commit,
-- uncommitted, date, lines = the row's, sweep_start = its first sweep value or 0}, sorted by
-- benchmark, configuration, GPU model, then sweep_start.
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
    for _, run in ipairs(legacy[last] and { legacy_run(lines, keys, last) }
        or recorded_runs(lines, keys, legacy, key, kind)) do
      local line, figures = run[#run], {}
      for i, l in ipairs(run) do figures[i] = l.figure end
      drawn[#drawn + 1] = { benchmark = benchmark, configuration = configuration, gpu = gpu_model(line),
        figure = kind and kind.figure(run) or table.concat(figures, "; "), legacy = kind == nil,
        machine = line.machine, command = line.command, commit = line.commit, uncommitted = line.uncommitted,
        date = line.date, lines = run, sweep_start = kind and kind.sweep and run[1][kind.sweep] or 0 }
    end
  end
  table.sort(drawn, function(x, y)
    if x.benchmark ~= y.benchmark then return x.benchmark < y.benchmark end
    if x.configuration ~= y.configuration then return x.configuration < y.configuration end
    if x.gpu ~= y.gpu then return x.gpu < y.gpu end
    return x.sweep_start < y.sweep_start
  end)
  return drawn
end

-- Days after which a legacy row gives way to its benchmark's newer rows (rows.shown).
rows.STALE_DAYS = 2

-- A date's day number ("2026-11-25 ...": the text of a legacy line may go on).
local function day(date)
  local y, m, d = date:match("^(%d+)%-(%d+)%-(%d+)")
  return os.time { year = tonumber(y), month = tonumber(m), day = tonumber(d), hour = 12 } // 86400
end

--- The rows of drawn (rows.rows') that examples/RESULTS.md shows: a legacy row gives way once
-- its benchmark has a row on its GPU model measured STALE_DAYS or more days later (the engine
-- under it has changed; results.jsonl keeps it), but for those of kept (a set of rows).
function rows.shown(drawn, kept)
  local newest = {} -- by benchmark and GPU model, the latest day
  for _, row in ipairs(drawn) do
    local setting = row.benchmark .. "\0" .. row.gpu
    newest[setting] = math.max(newest[setting] or 0, day(row.date))
  end
  local shown = {}
  for _, row in ipairs(drawn) do
    if not row.legacy or kept[row] or newest[row.benchmark .. "\0" .. row.gpu] - day(row.date) < rows.STALE_DAYS then
      shown[#shown + 1] = row
    end
  end
  return shown
end

return rows
