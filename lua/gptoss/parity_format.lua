--- gptoss.parity_format (internal, gptoss.parity's): the text of a comparison: where a
-- stage is ("position P, layer L NAME"), one line per flip, and a report's printed table.
local util = require "gptoss.util"

local parity_format = {}

--- Where a stage is: "position P, layer L NAME", without the position or the layer when
-- nil. Without a position it is the stage's key in a report ("layer 3 qkv", "logits").
function parity_format.where(position, layer, stage)
  local at = layer and ("layer %d %s"):format(layer, stage) or stage
  if position then return ("position %d, %s"):format(position, at) end
  return at
end

--- One line describing a flip of report.flips (or of compare_traces' flips).
function parity_format.describe_flip(f)
  local at = parity_format.where(f.position, f.layer, f.kind == "routing" and "topk_idx" or f.stage)
  if f.kind == "routing" then
    return ("%s: routing flip at rank %d: a picks expert %d, b expert %d (router margins %.2e on a, %.2e on b; "
      .. "router logits differ by up to %.2e, largest %.3g)")
      :format(at, f.rank, f.a_expert, f.b_expert, f.a_margin, f.b_margin, f.router_diff, f.router_max)
  end
  return ("%s: bf16 rounding flip at element %d: a %.9g rounds to %.9g, b %.9g to %.9g")
    :format(at, f.index, f.a, f.a_bf16, f.b, f.b_bf16)
end

local function num(x)
  if x == nil then return "-" end
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  return ("%.2e"):format(x)
end

local function tolerance_text(abs, rel)
  if abs == 0 then return ("rel %.3g"):format(rel) end
  return ("abs %.3g + rel %.3g"):format(abs, rel)
end

local function over_text(e)
  if e.abs == 0 then return ("rel %s > %.3g"):format(num(e.max_rel), e.rel) end
  return ("max abs %s > %.3g + %.3g x max|b| %.3g"):format(num(e.max_abs), e.abs, e.rel, e.scale)
end

local function plural(n, what)
  return ("%d %s%s"):format(n, what, n == 1 and "" or "s")
end

-- e: a report.stages entry or a report.summary entry (which has over_layers)
local function status_of(e)
  local s
  if e.stage == "topk_idx" then
    s = e.flips == 0 and "identical" or plural(e.flips, "routing flip")
  elseif e.compared == 0 then
    return "not compared (routing flip)"
  elseif e.ok then
    s = "ok"
  elseif e.over_layers and e.over_layers[1] then
    local ls = {}
    for i, l in ipairs(e.over_layers) do ls[i] = tostring(l) end
    s = ("OVER in %s %s"):format(#ls == 1 and "layer" or "layers", table.concat(ls, ", "))
  else
    s = ("OVER at %s"):format(plural(e.over, "position"))
  end
  if e.not_compared > 0 then
    s = ("%s; %s not compared (routing flip)"):format(s, plural(e.not_compared, "row"))
  end
  return s
end

local MAX_FLIPS_SHOWN = 20

local function add(lines, fmt, ...) lines[#lines + 1] = fmt:format(...) end

-- Which replicas, positions and layers were compared, and with what tolerance.
local function add_heading(lines, report)
  local positions = report.positions
  local function side(name)
    local r = report[name]
    return ("%s weights %s kv %s"):format(r.device == "cpu" and "cpu" or "GPU " .. tostring(r.device), r.weights, r.kv)
  end
  add(lines, "parity: a = %s, b = %s (reference); slot %d, %d position%s (%d..%d), %d layers",
    side("a"), side("b"), report.slot, #positions, #positions == 1 and "" or "s", positions[1],
    positions[#positions], report.layers)
  local tol = report.tolerance
  add(lines, "tolerance (%s mode): max|a-b| <= %.3g + %.3g x max|b| per stage%s", tol.mode, tol.abs, tol.rel,
    next(tol.stages) and ", with per-stage overrides" or "")
end

-- One line per stage name (its worst layer), then with `layers` one per layer and stage.
local function add_table(lines, report, layers)
  local header = ("%-16s %5s %8s %10s %10s  %-18s %s"):format("stage", "layer", "position", "max abs", "max rel",
    "tolerance", "status")
  lines[#lines + 1] = header
  local function line(e)
    local tolerance = e.stage == "topk_idx" and "identical" or tolerance_text(e.abs, e.rel)
    add(lines, "%-16s %5s %8s %10s %10s  %-18s %s", e.stage, e.layer and tostring(e.layer) or "-",
      e.position and tostring(e.position) or "-", num(e.max_abs), num(e.max_rel), tolerance, status_of(e))
  end
  for _, s in ipairs(report.summary) do line(s) end
  if layers then
    lines[#lines + 1] = ""
    lines[#lines + 1] = header
    for _, key in ipairs(report.order) do line(report.stages[key]) end
  end
end

-- The first stage over tolerance and why, or that every stage is within it; and what a
-- routing flip left uncompared.
local function add_verdict(lines, report)
  local f = report.first
  if f then
    local why
    if f.flip then
      local fl = f.flip
      why = ("routing flip at rank %d: a picks expert %d, b expert %d; router margins %.2e and %.2e, largest "
        .. "logit %.3g"):format(fl.rank, fl.a_expert, fl.b_expert, fl.a_margin, fl.b_margin, fl.router_max)
    else
      why = over_text(f)
    end
    add(lines, "first stage over tolerance: %s (%s)", parity_format.where(f.position, f.layer, f.stage), why)
    if f.cause then add(lines, "  after: %s", f.cause) end
    local a, b = report.a, report.b
    if a.weights ~= b.weights or a.kv ~= b.kv then
      add(lines, "  the replicas' numeric modes differ (a: weights %s kv %s; b: weights %s kv %s): bf16 rounding "
        .. "differences are expected", a.weights, a.kv, b.weights, b.kv)
    end
  else
    lines[#lines + 1] = "all stages within tolerance"
  end
  for _, s in ipairs(report.summary) do
    if s.not_compared > 0 then
      lines[#lines + 1] = "rows of topk_w, mlp1, swiglu and mlp2 at a routing flip are not compared: "
        .. "they belong to different experts"
      break
    end
  end
end

-- The flips counted by kind, the first MAX_FLIPS_SHOWN of them one a line.
local function add_flips(lines, flips)
  if #flips == 0 then return end
  local routing = 0
  for _, fl in ipairs(flips) do
    if fl.kind == "routing" then routing = routing + 1 end
  end
  add(lines, "flips: %d routing, %d bf16 rounding", routing, #flips - routing)
  for i = 1, math.min(#flips, MAX_FLIPS_SHOWN) do lines[#lines + 1] = "  " .. parity_format.describe_flip(flips[i]) end
  if #flips > MAX_FLIPS_SHOWN then add(lines, "  ... and %d more", #flips - MAX_FLIPS_SHOWN) end
end

--- parity.format(report, opts): the printed form of a report, as a list of lines: a
-- header, one line per stage name (its worst layer; with opts.layers, one line per layer
-- and stage as well), the verdict, and the flips.
function parity_format.report_lines(report, opts)
  opts = util.options("parity.format", opts, { "layers" }, 2)
  local lines = {}
  add_heading(lines, report)
  add_table(lines, report, opts.layers)
  add_verdict(lines, report)
  add_flips(lines, report.flips)
  return lines
end

return parity_format
