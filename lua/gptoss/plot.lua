--- gptoss.plot: benchmark results drawn as one PNG through gnuplot (Debian's gnuplot-nox), for
-- bench_gpu's and bench_getp's --plot and examples/plot.lua, which draws a run measured
-- elsewhere (the GPU machine has no gnuplot) from the JSON lines the benchmarks print.
--
-- A result is the table of one such line. bench_gpu's ("gpu_decode") draw throughput against
-- batch size, a line per configuration, and, where per-kernel profiling ran, the profiled
-- step's time by kernel, a stacked bar per batch size; bench_getp's ("getp") draw throughput,
-- a bar a run, and each replica's host and waited ms a step, stacked. The panels stack in one
-- picture; a panel's labels name what differs between its results, its title what they share.
local json = require "dkjson"
local files = require "gptoss.files"

local plot = {}

-- The results drawn, by their JSON lines' "bench": the numbers each must have.
local NEEDS = { gpu_decode = { "batch", "tok_per_s" }, getp = { "tok_per_s" } }

-- a panel's height and the picture's width, in pixels: room for a legend of a dozen kernels
local PANEL_HEIGHT, WIDTH = 440, 960
-- kernels under this share of every bar's time are drawn as one "other", so the legend stays
-- readable (bench_gpu profiles a dozen kernels, half of them a few percent together)
local MINOR_SHARE = 0.03

--- Whether gnuplot is on PATH.
function plot.available()
  return os.execute("command -v gnuplot >/dev/null 2>&1") == true
end

local function need_gnuplot(option)
  if not plot.available() then
    error(("%s needs gnuplot (Debian: gnuplot-nox)"):format(option), 0)
  end
end

--- Raises unless gnuplot is on PATH and the PNG can be written, so that a benchmark fails
-- before it runs for minutes rather than after; option names the flag in the messages
-- ("--plot").
function plot.check(png, option)
  need_gnuplot(option)
  local existed = io.open(png, "rb")
  if existed then existed:close() end
  local f, msg = io.open(png, "ab")
  if not f then error(("%s: cannot write '%s': %s"):format(option, png, msg), 0) end
  f:close()
  if not existed then os.remove(png) end
end

--- The results in a file of the benchmarks' JSON lines or a saved run's whole output (lines
-- not starting with "{", the tables, are skipped; JSON of other scripts too), in file order.
function plot.read(path)
  local results = {}
  for n, line in files.lines("plot.read", path) do
    if line:match("^%s*{") then
      local r, _, err = json.decode(line)
      if r == nil then error(("plot.read: %s:%d: not a JSON line: %s"):format(path, n, err), 0) end
      if type(r) == "table" and NEEDS[r.bench] then results[#results + 1] = r end
    end
  end
  if #results == 0 then
    error(("plot.read: '%s' holds no JSON line of bench_gpu or bench_getp"):format(path), 0)
  end
  return results
end

-- A string in gnuplot's single quotes, where '' stands for a quote; they cannot hold a line
-- break, which a title given on the command line may, so that is a space.
local function q(s)
  return "'" .. tostring(s):gsub("'", "''"):gsub("\n", " ") .. "'"
end

-- A gnuplot data block $name of rows (a list of cells each): strings in double quotes, since
-- labels hold spaces.
local function datablock(name, rows)
  local lines = { ("$%s << EOD"):format(name) }
  for _, row in ipairs(rows) do
    local cells = {}
    for i, v in ipairs(row) do
      cells[i] = type(v) == "string" and '"' .. v:gsub('"', "'") .. '"' or ("%.10g"):format(v)
    end
    lines[#lines + 1] = table.concat(cells, " ")
  end
  lines[#lines + 1] = "EOD"
  return table.concat(lines, "\n")
end

-- The configuration fields a panel's labels and title name: {key, how it reads (a format of
-- the value, or a function of the result), always = in every label even when all agree}.
local GPU_FIELDS = {
  { "weights", "%s weights", always = true }, { "model", "%s" }, { "device", "%s" }, { "ctx", "ctx %d" },
  { "feed", "feed %s" },
}
local GETP_FIELDS = {
  { "requests", "%d requests", always = true }, { "weights", "%s weights" }, { "model", "%s" }, { "device", "%s" },
  { "steps_limit", "steps %d" },
  { "replicas", function(r) return r.slots and ("%d replica%s"):format(#r.slots, #r.slots == 1 and "" or "s") end },
  { "chat", function(r) return r.chat and "chat" or nil end },
  { "scheduler", "scheduler %s" }, { "partition", "partition %s" },
}

-- Each result's label (the fields whose text differs between results, and the `always` ones)
-- and the text of the fields all share, for the title.
local function describe(results, fields)
  local labels, shared = {}, {}
  for i = 1, #results do labels[i] = {} end
  for _, f in ipairs(fields) do
    local texts, same = {}, true
    for i, r in ipairs(results) do
      if type(f[2]) == "function" then texts[i] = f[2](r)
      elseif r[f[1]] ~= nil then texts[i] = f[2]:format(r[f[1]]) end
      same = same and texts[i] == texts[1]
    end
    if same and not f.always then
      shared[#shared + 1] = texts[1]
    else
      for i = 1, #results do labels[i][#labels[i] + 1] = texts[i] end
    end
  end
  for i = 1, #results do labels[i] = table.concat(labels[i], ", ") end
  return labels, table.concat(shared, ", ")
end

-- A panel's title: what it shows, then what its results share.
local function title(what, shared)
  return q(shared == "" and what or ("%s (%s)"):format(what, shared))
end

-- Bar colours: gnuplot's eight, which repeat after the eighth, then four more; the kernels'
-- "other" is grey.
local COLOURS = { "#9400d3", "#009e73", "#56b4e9", "#e69f00", "#f0e442", "#0072b2", "#e51e10", "#000000",
  "#cc79a7", "#8c564b", "#17becf", "#bcbd22" }
local OTHER, GREY = ("other kernels (each under %d%%)"):format(math.floor(100 * MINOR_SHARE)), "#b0b0b0"

-- gnuplot commands for a bar chart titled heading of rows {label, value...}: a bar a row, its
-- values stacked in the order of columns (their names in the legend when there are several)
-- and their sum written above it.
local function bars(name, rows, columns, ylabel, heading)
  -- a label's parts one a line (gnuplot reads "\n" in a quoted datum as a line break), slanted
  -- when side by side the longest lines would still run into each other (a character ~ 8 px);
  -- the bottom margin makes room for the lines, which a multiplot's layout does not
  local longest, lines, shown = 0, 1, {}
  for i, row in ipairs(rows) do
    local n = 0
    for part in (row[1] .. ", "):gmatch("(.-), ") do
      longest, n = math.max(longest, #part), n + 1
    end
    lines = math.max(lines, n)
    shown[i] = { (row[1]:gsub(", ", "\\n")), table.unpack(row, 2) }
  end
  local slanted = #rows * (longest + 2) * 8 > WIDTH * 0.7
  local cmds = {
    datablock(name, shown), "set title " .. heading, "set ylabel " .. q(ylabel),
    "set style data histograms", "set style histogram rowstacked", "set style fill solid 0.85 border -1",
    "set boxwidth 0.7", "set grid ytics", "set yrange [0:*]", "set offsets 0, 0, graph 0.08, 0",
    #columns > 1 and "set key outside right top" or "unset key",
    slanted and "set xtics rotate by -30" or "set xtics norotate",
    ("set bmargin %d"):format(slanted and lines + math.ceil(longest / 2) + 1 or lines + 2),
  }
  for x, row in ipairs(rows) do
    local sum = 0
    for c = 2, #row do sum = sum + row[c] end
    cmds[#cmds + 1] = ("set label '%.1f' at %d,%.10g center offset char 0,0.7"):format(sum, x - 1, sum)
  end
  local series = {}
  for k, column in ipairs(columns) do
    series[k] = ("%s using %d%s lc rgb '%s' title %s"):format(k == 1 and "$" .. name or "''", k + 1,
      k == 1 and ":xtic(1)" or "", column == OTHER and GREY or COLOURS[(k - 1) % #COLOURS + 1], q(column))
  end
  cmds[#cmds + 1] = "plot " .. table.concat(series, ", ")
  return cmds
end

-- The profile's ms a step by kernel label. bench_gpu's JSON gives each kernel's seconds over
-- the profiled steps but not how many steps ran; the embedding kernel, launched once a step,
-- counts them.
local function kernel_ms(r)
  local steps
  for _, p in ipairs(r.profile) do
    if p.label == "embedding" then steps = p.calls end
  end
  if not steps then
    error(("plot: bench_gpu's profile at B=%d has no embedding row to count its steps by"):format(r.batch), 0)
  end
  local ms, total = {}, 0
  for _, p in ipairs(r.profile) do
    ms[p.label] = 1000 * p.seconds / steps
    total = total + ms[p.label]
  end
  return ms, total
end

-- bench_gpu's throughput against batch size: log 2 with the batch sizes as tics, log 10 tok/s
-- (B=1's few hundred and B=1024's tens of thousands both read), a line per label, each point's
-- value above it where its line is the highest there and below it elsewhere, so that two
-- lines' values never meet.
local function throughput_panel(results, labels, shared)
  local order, points, at = {}, {}, {}
  local lo, hi = math.huge, 0
  for i, r in ipairs(results) do
    if not points[labels[i]] then
      order[#order + 1] = labels[i]
      points[labels[i]] = {}
    end
    table.insert(points[labels[i]], { r.batch, r.tok_per_s })
    at[r.batch] = at[r.batch] or {}
    table.insert(at[r.batch], r.tok_per_s)
    lo, hi = math.min(lo, r.tok_per_s), math.max(hi, r.tok_per_s)
  end
  local tics = {}
  for b, values in pairs(at) do
    tics[#tics + 1] = b
    table.sort(values, function(x, y) return x > y end)
  end
  table.sort(tics)
  -- tok/s tics 1, 2, 5 a decade: a log axis with only its decades labelled reads too coarsely
  local ytics = {}
  for e = math.floor(math.log(lo / 2, 10)), math.ceil(math.log(hi * 2, 10)) do
    for _, m in ipairs { 1, 2, 5 } do ytics[#ytics + 1] = ("%.0f"):format(m * 10 ^ e) end
  end
  local cmds = {
    "set title " .. title("decode throughput", shared), "set xlabel 'batch size (sequences decoding together)'",
    "set ylabel 'tok/s'", "set logscale x 2", "set logscale y 10", "set grid", "set key top left",
    ("set xrange [%g:%g]"):format(tics[1] / 1.5, tics[#tics] * 1.5), ("set yrange [%g:%g]"):format(lo / 2, hi * 2),
    ("set xtics (%s)"):format(table.concat(tics, ", ")), ("set ytics (%s)"):format(table.concat(ytics, ", ")),
  }
  local series = {}
  for k, label in ipairs(order) do
    table.sort(points[label], function(x, y) return x[1] < y[1] end)
    cmds[#cmds + 1] = datablock("gpu" .. k, points[label])
    series[k] = ("$gpu%d using 1:2 with linespoints lw 2 pt 7 lc %d title %s"):format(k, k, q(label))
    for _, p in ipairs(points[label]) do
      cmds[#cmds + 1] = ("set label '%.1f' at %g,%.10g center offset char 0,%g tc lt %d"):format(p[2], p[1], p[2],
        p[2] == at[p[1]][1] and 1 or -1, k)
    end
  end
  cmds[#cmds + 1] = "plot " .. table.concat(series, ", ")
  return cmds
end

-- bench_gpu's panels: throughput; and, for results with a profile, the step time by kernel.
local function gpu_panels(results)
  local labels, shared = describe(results, GPU_FIELDS)
  local panels = { throughput_panel(results, labels, shared) }
  local profiled, bar_labels = {}, {}
  for i, r in ipairs(results) do
    if r.profile then
      profiled[#profiled + 1] = r
      bar_labels[#profiled] = ("%s, B=%d"):format(labels[i], r.batch)
    end
  end
  if #profiled == 0 then return panels end
  -- a column for each kernel with a share of MINOR_SHARE in some bar, the largest in all first
  local ms, totals, sum, kept, columns = {}, {}, {}, {}, {}
  for k, r in ipairs(profiled) do
    ms[k], totals[k] = kernel_ms(r)
    for label, v in pairs(ms[k]) do
      if not kept[label] and v >= MINOR_SHARE * totals[k] then
        kept[label] = true
        columns[#columns + 1] = label
      end
      sum[label] = (sum[label] or 0) + v
    end
  end
  table.sort(columns, function(x, y) return sum[x] > sum[y] end)
  local rows = {}
  for k = 1, #profiled do
    rows[k] = { bar_labels[k] }
    local rest = totals[k]
    for c, label in ipairs(columns) do
      rows[k][c + 1] = ms[k][label] or 0
      rest = rest - rows[k][c + 1]
    end
    rows[k][#columns + 2] = math.max(0, rest)
  end
  columns[#columns + 1] = OTHER
  -- the throughput panel above names what the results share
  panels[2] = bars("kernels", rows, columns, "ms a step", q("a profiled step's time by kernel, each timed alone"))
  return panels
end

-- bench_getp's panels: throughput, a bar a run; and where the results have them, each
-- replica's ms a step of getp's Lua (host) and of waiting for the GPU (waited), stacked.
local function getp_panels(results)
  local labels, shared = describe(results, GETP_FIELDS)
  local tps, steps = {}, {}
  for i, r in ipairs(results) do
    tps[i] = { labels[i], r.tok_per_s }
    for k, host in ipairs(r.host_ms_per_step or {}) do
      -- a bar per replica, named by its run where there are several
      local bar = #r.host_ms_per_step > 1 and ("replica %d"):format(k) or labels[i]
      if #results > 1 and #r.host_ms_per_step > 1 then bar = labels[i] .. ", " .. bar end
      steps[#steps + 1] = { bar, host, r.waited_ms_per_step[k] }
    end
  end
  local panels = { bars("getp", tps, { "tok/s" }, "tok/s", title("getp throughput", shared)) }
  if #steps > 0 then
    panels[2] = bars("getp_steps", steps, { "host: getp's Lua", "waited for the device" }, "ms a step",
      q("a step's time by replica"))
  end
  return panels
end

-- Runs gnuplot on the script text; its own messages are the error when it fails.
local function gnuplot(text, png)
  local path = os.tmpname()
  files.write("plot", path, text)
  local p = assert(io.popen(("gnuplot '%s' 2>&1"):format((path:gsub("'", "'\\''")))))
  local out = p:read("a")
  local ok, _, status = p:close()
  os.remove(path)
  if not ok then
    os.remove(png) -- what gnuplot left of it is no picture
    error(("plot: gnuplot failed (exit status %s) drawing '%s':\n%s"):format(status, png, out), 0)
  end
end

--- Draws results (bench_gpu's and bench_getp's JSON lines' tables, as plot.read returns or
-- the benchmarks build) into the PNG png. opts.title: the picture's title above its panels.
function plot.write(results, png, opts)
  need_gnuplot("plot")
  opts = opts or {}
  local by = { gpu_decode = {}, getp = {} }
  for _, r in ipairs(results) do
    if not NEEDS[r.bench] then
      error(("plot: a result of '%s', not of bench_gpu or bench_getp"):format(tostring(r.bench)), 0)
    end
    for _, key in ipairs(NEEDS[r.bench]) do
      if type(r[key]) ~= "number" then error(("plot: a %s result without %s"):format(r.bench, key), 0) end
    end
    table.insert(by[r.bench], r)
  end
  local panels = {}
  for _, make in ipairs { { by.gpu_decode, gpu_panels }, { by.getp, getp_panels } } do
    if #make[1] > 0 then
      for _, p in ipairs(make[2](make[1])) do panels[#panels + 1] = p end
    end
  end
  if #panels == 0 then error("plot: no results to draw", 0) end
  -- noenhanced: kernel names such as moe_combine would read "_" as a subscript
  local script = {
    ("set terminal pngcairo noenhanced size %d,%d font 'sans,11'"):format(WIDTH, PANEL_HEIGHT * #panels),
    "set output " .. q(png),
    ("set multiplot layout %d,1%s"):format(#panels, opts.title and " title " .. q(opts.title) or ""),
  }
  for _, cmds in ipairs(panels) do
    -- reset: each panel's settings start from gnuplot's defaults (the terminal and output stay)
    script[#script + 1] = "reset"
    for _, c in ipairs(cmds) do script[#script + 1] = c end
  end
  script[#script + 1] = "unset multiplot"
  gnuplot(table.concat(script, "\n") .. "\n", png)
end

return plot
