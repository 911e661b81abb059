--- gptoss.parity: the stage-by-stage parity tracer. The same tokens run through two
-- replicas (typically a GPU replica and the CPU golden) with r:trace, and every traced
-- stage of every layer is compared, with embedding, final_norm and logits.
--
-- a is the replica checked, b the reference (its values set the scale). Stages are
-- keyed "embedding", "layer L NAME" (L 1-based, NAME one of parity.STAGES), "final_norm"
-- and "logits", and visited in that forward order: position by position as traced, and
-- within a position embedding, layer 1's stages, layer 2's, ..., final_norm, logits.
--
-- Error of a stage at one position:
--   max_abs  max |a_i - b_i| over its elements
--   max_rel  max_abs / max |b_i|: normalised by the stage's largest reference value, not
--            per element, so that elements near zero (a logit of 1e-6, a masked
--            probability) do not turn noise into huge ratios. 0 when the stage is
--            identical, inf when b is all zero (or infinite) and a is not.
--   Equal infinities agree (masked scores are -inf on both sides); an infinity against
--   anything else is an infinite error; NaN on either side never agrees (max_abs NaN).
-- A stage passes when max_abs <= abs + rel * max |b_i|, (abs, rel) its tolerance.
--
-- Routing: topk_idx passes only when identical; a difference is a routing flip. At a
-- routing flip the rows of mlp1, swiglu and mlp2 and the weights topk_w belong to
-- different experts, so they are reported as "not compared (routing flip)", never as
-- errors. moe_out and everything after it are compared as usual.
--
-- Flips (report.flips, in forward order):
--   routing   topk_idx differs: the first rank where it does, the expert each replica
--             chose there, and each replica's margin for its choice (router logit of its
--             expert minus that of the other's). The two margins add up to at most twice
--             the largest router difference, so a flip of near-tied logits shows as two
--             margins small beside the router's spread.
--   rounding  a stage that both replicas round to bf16 (GEMM inputs when both read bf16
--             weights: attn_norm, attn_out, ffn_norm, swiglu, final_norm; what a bf16 KV
--             cache stores when both use one: k_rope and qkv's value part) agrees within
--             the noise (max_rel <= noise, default parity.NOISE) yet some element rounds
--             to different bf16 values: from there on the two replicas read inputs a bf16
--             step (2^-8 relative) apart.
-- The first stage over tolerance at a position gets a cause where one exists: a rounding
-- flip before it at that position, or, for scores, probs and attn_out of layer L, layer
-- L's stored keys or values of an earlier traced position that differ (beyond the noise,
-- or rounded apart when both caches are bf16). Between replicas of the same numeric mode
-- a divergence without a cause points at a bug.
local gptoss = require "gptoss"
local parity_format = require "gptoss.parity_format"
local stages = require "gptoss.parity_stages"
local trace = require "gptoss.parity_trace"
local util = require "gptoss.util"

local parity = {}

-- What the pieces define, public here and documented there: parity_stages.lua (the stages,
-- the noise and the tolerances), parity_trace.lua (one traced row compared, the element-wise
-- measures) and parity_format.lua (the printed report). This file runs the traces and
-- gathers the rows into a report (parity.compare).
parity.STAGES = stages.PER_LAYER                   -- the per-layer stages, in forward order
parity.NOISE = stages.NOISE                        -- the rounding-flip threshold's default
parity.TOLERANCES = stages.TOLERANCES              -- the default tolerances by numeric mode
parity.tolerance = stages.default_tolerance        -- the default tolerance of two replicas
parity.divergence = trace.divergence               -- max_rel, max_abs, where, max |b|
parity.rounds_apart = trace.rounds_apart           -- the first element rounded apart in bf16
parity.compare_traces = trace.compare_traces       -- one traced row, stage by stage
parity.explain = trace.explain                     -- causes found in earlier rows
parity.describe_flip = parity_format.describe_flip -- one line of a flip
parity.format = parity_format.report_lines         -- a report's printed lines

--- The values of a host tensor (row-major) or of a (nested) list, as one flat list
-- (util.flatten).
parity.flatten = util.flatten

--- x (as a float32) rounded to the nearest bf16, ties to even, as the engines round;
-- NaN and infinities are themselves.
parity.bf16_round = gptoss.bf16_round

local is_a = util.is_a

local function check_list(fn, name, v, level)
  if type(v) ~= "table" then
    error(("%s: %s must be a list of integers (got %s)"):format(fn, name, type(v)), level)
  end
  if #v == 0 then
    error(("%s: %s is empty: nothing to compare"):format(fn, name), level)
  end
  for i = 1, #v do
    if math.type(v[i]) ~= "integer" then
      error(("%s: %s[%d] must be an integer (got %s)"):format(fn, name, i, tostring(v[i])), level)
    end
  end
end

local function check_replica(fn, what, r, level)
  if not is_a(r, "gptoss.replica") then
    error(("%s: replica %s must be a gptoss replica (got %s)"):format(fn, what, type(r)), level)
  end
  if r.closed then
    error(("%s: replica %s is closed"):format(fn, what), level)
  end
end

local function same_config(fn, a, b, level)
  local ca, cb = a.model.config, b.model.config
  local keys = {}
  for k in pairs(ca) do keys[#keys + 1] = k end
  for k in pairs(cb) do
    if ca[k] == nil then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if ca[k] ~= cb[k] then
      error(("%s: the replicas hold models of different shapes: %s is %s on a, %s on b")
        :format(fn, k, tostring(ca[k]), tostring(cb[k])), level)
    end
  end
  return ca
end

local function writer_of(fn, p, level)
  if p == nil or p == true then
    return function(line) io.stdout:write(line, "\n") end
  elseif p == false then
    return nil
  elseif type(p) == "function" then
    return p
  end
  error(("%s: print must be a boolean or a function(line) (got %s)"):format(fn, type(p)), level)
end

-- worse of two errors: NaN first, then the larger
local function worse(x, y)
  if y == nil then return false end
  if x == nil then return true end
  if x ~= x then return false end
  return y ~= y or y > x
end

local COMPARE_OPTIONS = { "tokens", "positions", "slot", "tolerance", "noise", "print", "layers" }

-- parity.compare's arguments checked, with the defaults filled in: {tokens, positions,
-- slot, noise, write, config, tol}. level: compare's caller, seen from here.
local function compare_setup(fn, a, b, opts, level)
  check_replica(fn, "a", a, level + 1)
  check_replica(fn, "b", b, level + 1)
  if type(opts) ~= "table" then
    error(("%s: options must be a table {tokens =, positions =, ...} (got %s)"):format(fn, type(opts)), level)
  end
  util.check_known(fn, opts, COMPARE_OPTIONS, "option", level)
  check_list(fn, "tokens", opts.tokens, level + 1)
  local tokens, positions = opts.tokens, opts.positions
  if positions == nil then
    positions = {}
    for i = 1, #tokens do positions[i] = i - 1 end
  else
    check_list(fn, "positions", positions, level + 1)
    if #positions ~= #tokens then
      error(("%s: tokens and positions must have the same length (got %d and %d)"):format(fn, #tokens, #positions),
        level)
    end
  end
  local slot = opts.slot == nil and 1 or opts.slot
  if math.type(slot) ~= "integer" then
    error(("%s: slot must be an integer (got %s)"):format(fn, tostring(slot)), level)
  end
  local noise = opts.noise == nil and stages.NOISE or opts.noise
  stages.check_bound(fn, "noise", noise, level + 1)
  local write = writer_of(fn, opts.print, level + 1)
  local config = same_config(fn, a, b, level + 1)
  local tol = stages.merge_tolerance(fn, parity.tolerance(a, b), opts.tolerance, config.n_layers, level + 1)
  return { tokens = tokens, positions = positions, slot = slot, noise = noise, write = write, config = config,
    tol = tol }
end

-- The traces of tokens[i] at its position on both replicas of pair (in that order).
local function trace_both(fn, pair, slot, i, token, position, level)
  local traces = {}
  for _, side in ipairs { "a", "b" } do
    local r = pair[side]
    local ok, t = pcall(r.trace, r, slot, token, position)
    if not ok then
      error(("%s: replica %s at tokens[%d] (position %d): %s"):format(fn, side, i, position, tostring(t)), level)
    end
    traces[side] = t
  end
  return traces.a, traces.b
end

-- A report.stages entry, started from a row's entry e of its stage.
local function new_aggregate(e)
  return { key = e.key, layer = e.layer, stage = e.stage, abs = e.abs, rel = e.rel, ok = true, over = 0,
    compared = 0, not_compared = 0, flips = e.stage == "topk_idx" and 0 or nil }
end

-- Adds a row's entry e, traced at position, to its stage's report.stages entry agg.
local function aggregate_entry(agg, e, position)
  if e.not_compared then
    agg.not_compared = agg.not_compared + 1
    return
  end
  agg.compared = agg.compared + 1
  if e.flip then
    agg.flips = agg.flips + 1
    agg.position = agg.position or position
  elseif worse(agg.max_rel, e.max_rel) then
    agg.max_rel, agg.position = e.max_rel, position
  end
  if worse(agg.max_abs, e.max_abs) then agg.max_abs = e.max_abs end
  if not e.ok then agg.ok, agg.over = false, agg.over + 1 end
end

-- Adds a compare_traces row, traced at position, to the report: its flips, and each of
-- its entries to its stage (the first row that has a stage puts it in report.order).
local function aggregate_row(report, row, position)
  for _, f in ipairs(row.flips) do
    f.position = position
    report.flips[#report.flips + 1] = f
  end
  for _, key in ipairs(row.order) do
    local e = row.stages[key]
    local agg = report.stages[key]
    if not agg then
      agg = new_aggregate(e)
      report.stages[key] = agg
      report.order[#report.order + 1] = key
    end
    aggregate_entry(agg, e, position)
  end
end

-- Adds layer entry e (a report.stages entry) to summary entry s of its stage name: the
-- totals, and e as the worst layer when it is (the largest max_rel, or for topk_idx the
-- first layer that flips).
local function summarize_layer(s, e)
  s.compared, s.not_compared, s.over = s.compared + e.compared, s.not_compared + e.not_compared, s.over + e.over
  if not e.ok then
    s.ok = false
    s.over_layers[#s.over_layers + 1] = e.layer
  end
  local pick
  if s.stage == "topk_idx" then
    pick = e.flips > 0 and s.flips == 0
    s.flips = s.flips + e.flips
  else
    pick = worse(s.max_rel, e.max_rel)
  end
  if pick then
    s.key, s.layer, s.max_rel, s.position, s.abs, s.rel = e.key, e.layer, e.max_rel, e.position, e.abs, e.rel
  end
  if worse(s.max_abs, e.max_abs) then s.max_abs = e.max_abs end
end

-- report.summary: one entry per stage name, its worst layer and its totals over the layers.
local function summarize(report)
  local summary = {}
  for _, name in ipairs(stages.ALL) do
    local s = { stage = name, ok = true, over_layers = {}, over = 0, compared = 0, not_compared = 0,
      flips = name == "topk_idx" and 0 or nil }
    for _, key in ipairs(report.order) do
      local e = report.stages[key]
      if e.stage == name then summarize_layer(s, e) end
    end
    if s.abs == nil then s.abs, s.rel = stages.bounds(report.tolerance, name, name) end
    summary[#summary + 1] = s
  end
  return summary
end

--- Runs opts.tokens at opts.positions through replicas a and b with r:trace and compares
-- every stage (see the header). Options:
--   tokens     list of token ids (required, not empty)
--   positions  list of 0-based positions, one per token (default 0, 1, ...): they start
--              at 0 or continue what the slot holds, which must be the same tokens on
--              both replicas (traces write the slot's KV as steps do)
--   slot       the slot traced on both replicas (default 1)
--   tolerance  overrides of the mode's default (parity.tolerance(a, b)): abs, rel, and
--              stages = {[NAME or "layer L NAME"] = {abs =, rel =}}
--   noise      the rounding-flip threshold (default parity.NOISE)
--   print      true (default): print the table (parity.format) on io.stdout; false:
--              nothing; a function: called with each line
--   layers     print one line per layer and stage as well (default false)
-- Returns a report:
--   ok, first (the first stage over tolerance in forward order, with position, and
--   cause or flip as compare_traces gives them, or nil), flips (routing and rounding,
--   each with position), a and b ({device, weights, kv}), slot, tokens, positions,
--   tolerance (the one applied, with mode), noise,
--   order (stage keys in forward order), stages[key] = {key, layer, stage, max_abs,
--   max_rel, position (the worst one), abs, rel, ok, over (positions over tolerance),
--   compared, not_compared (positions at a routing flip), flips (topk_idx: positions
--   that flip)}, summary (one entry per stage name, its worst layer: stage, layer, and
--   the fields above, over_layers), rows (per position: position, token, first,
--   kv_apart).
function parity.compare(a, b, opts)
  local fn = "parity.compare"
  local s = compare_setup(fn, a, b, opts, 3)
  local tokens, positions = s.tokens, s.positions
  local report = {
    a = { device = a.device, weights = a.weights, kv = a.kv },
    b = { device = b.device, weights = b.weights, kv = b.kv },
    slot = s.slot, tokens = table.move(tokens, 1, #tokens, 1, {}),
    positions = table.move(positions, 1, #positions, 1, {}), tolerance = s.tol, noise = s.noise,
    order = {}, stages = {}, flips = {}, rows = {}, layers = s.config.n_layers,
  }
  local pair = { a = a, b = b, noise = s.noise }
  for i = 1, #tokens do
    local ta, tb = trace_both(fn, pair, s.slot, i, tokens[i], positions[i], 3)
    local row = parity.compare_traces(ta, tb, s.config, s.tol, pair)
    aggregate_row(report, row, positions[i])
    if row.first then row.first.position = positions[i] end
    report.rows[i] = { position = positions[i], token = tokens[i], first = row.first, kv_apart = row.kv_apart }
  end
  parity.explain(report.rows)
  for _, row in ipairs(report.rows) do
    if row.first then
      report.first = row.first
      break
    end
  end
  report.ok = report.first == nil
  report.summary = summarize(report)
  if s.write then
    for _, line in ipairs(parity.format(report, { layers = opts.layers })) do s.write(line) end
  end
  return report
end

return parity
