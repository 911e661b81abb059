--- gptoss.parity_trace (internal, gptoss.parity's): one traced row of two replicas
-- compared stage by stage (parity.compare_traces: errors, routing and rounding flips, the
-- first stage over tolerance and its cause), causes that need earlier rows
-- (parity.explain), and the element-wise measures both use (parity.divergence,
-- parity.rounds_apart). gptoss.parity's header defines each.
local gptoss = require "gptoss"
local parity_format = require "gptoss.parity_format"
local stages = require "gptoss.parity_stages"
local util = require "gptoss.util"

local trace = {}

local is_a, flatten, bf16_round, where = util.is_a, util.flatten, gptoss.bf16_round, parity_format.where

--- Divergence of two flat lists over elements from..to (default: all of fb).
-- Returns max_rel (max |a-b| / max |b|, see gptoss.parity's header), max_abs, the index of
-- the worst element (nil when they agree) and max |b| over b's finite elements.
function trace.divergence(fa, fb, from, to)
  local d, m, at, nan_at = 0.0, 0.0, nil, nil
  for i = from or 1, to or #fb do
    local x, y = fa[i], fb[i]
    if x ~= y then
      local e = math.abs(x - y)
      if e ~= e then
        nan_at = nan_at or i
      elseif e > d then
        d, at = e, i
      end
    end
    local ay = math.abs(y)
    if ay > m and ay ~= math.huge then m = ay end
  end
  if nan_at then return 0 / 0, 0 / 0, nan_at, m end
  if d == 0 then return 0.0, 0.0, nil, m end
  return m > 0 and d / m or math.huge, d, at, m
end

--- The first index in from..to (default: all of fb) whose elements round to different
-- bf16 values, or nil.
function trace.rounds_apart(fa, fb, from, to)
  for i = from or 1, to or #fb do
    local x, y = fa[i], fb[i]
    if x ~= y and bf16_round(x) ~= bf16_round(y) then return i end
  end
end

local function shape_text(t)
  return "{" .. table.concat(t.shape, ", ") .. "}"
end

-- the values a cache stores: as traced, or rounded to bf16
local function stored(values, from, to, round)
  local out = {}
  for i = from, to do out[#out + 1] = round and bf16_round(values[i]) or values[i] end
  return out
end

-- whether the stored keys or values (elements from..to) differ between the two caches:
-- rounded apart when both are bf16, beyond the noise otherwise
local function kv_differ(fa, fb, from, to, round_a, round_b, noise)
  if round_a and round_b then return trace.rounds_apart(fa, fb, from, to) ~= nil end
  local sa, sb = stored(fa, from, to, round_a), stored(fb, from, to, round_b)
  return not (trace.divergence(sa, sb) <= noise) -- a NaN divergence differs too
end

-- The routing flip of topk_idx ia (a) against ib (b), with each replica's router logits,
-- or nil when the two are identical.
local function routing_flip(ia, ib, ra, rb)
  local rank
  for k = 1, #ib do
    if ia[k] ~= ib[k] then
      rank = k
      break
    end
  end
  if not rank then return nil end
  local ea, eb = ia[rank], ib[rank]
  local _, router_diff, _, router_max = trace.divergence(ra, rb)
  return {
    kind = "routing", rank = rank, a_expert = ea, b_expert = eb, a_ids = ia, b_ids = ib,
    a_margin = ra[ea + 1] - ra[eb + 1], b_margin = rb[eb + 1] - rb[ea + 1],
    router_diff = router_diff, router_max = router_max,
  }
end

-- compare_traces' arguments checked: what its comparisons work from, {fn, tol, noise,
-- round_gemm, round_kv_a, round_kv_b, v_from, v_to}. level: compare_traces' caller, seen
-- from here.
local function trace_setup(fn, ta, tb, config, tolerance, opts, level)
  if type(ta) ~= "table" or type(tb) ~= "table" then
    error(("%s: expected two traces (tables from r:trace), got %s and %s"):format(fn, type(ta), type(tb)), level)
  end
  if type(config) ~= "table" or math.type(config.n_layers) ~= "integer" then
    error(("%s: config must be a model's config table (got %s)"):format(fn, type(config)), level)
  end
  opts = util.options(fn, opts, { "a", "b", "noise" }, level)
  local wa, ka, wb, kb = "fp32", "fp32", "fp32", "fp32"
  if opts.a ~= nil then wa, ka = stages.mode_of(opts.a, fn, "opts.a", level + 1) end
  if opts.b ~= nil then wb, kb = stages.mode_of(opts.b, fn, "opts.b", level + 1) end
  local noise = opts.noise or stages.NOISE
  stages.check_bound(fn, "opts.noise", noise, level + 1)
  local tol = stages.merge_tolerance(fn, stages.TOLERANCES.fp32, tolerance, config.n_layers, level + 1)
  local q_dim = config.n_attn_heads * config.head_dim
  local kv_dim = config.n_kv_heads * config.head_dim
  return {
    fn = fn, tol = tol, noise = noise,
    round_gemm = wa == "bf16" and wb == "bf16", round_kv_a = ka == "bf16", round_kv_b = kb == "bf16",
    -- qkv's value part: what the cache stores besides the keys
    v_from = q_dim + kv_dim + 1, v_to = q_dim + 2 * kv_dim,
  }
end

-- Stage name's tensors (of layer l, or outside the layers when l is nil) in both traces,
-- checked to be there and of one shape.
local function stage_tensors(fn, ta, tb, l, name, level)
  local A, B
  if l then
    A, B = ta.layers and ta.layers[l] and ta.layers[l][name], tb.layers and tb.layers[l] and tb.layers[l][name]
  else
    A, B = ta[name], tb[name]
  end
  if not is_a(A, "gptoss.tensor") or not is_a(B, "gptoss.tensor") then
    error(("%s: %s is missing from trace %s"):format(fn, where(nil, l, name),
      is_a(A, "gptoss.tensor") and "b" or "a"), level)
  end
  if shape_text(A) ~= shape_text(B) then
    error(("%s: %s has shape %s on a, %s on b"):format(fn, where(nil, l, name), shape_text(A), shape_text(B)), level)
  end
  return A, B
end

-- Records a row's entry in forward order. The first one over tolerance is row.first, with
-- the first rounding flip before it (all flips so far are) as its cause.
local function add_entry(row, entry)
  row.stages[entry.key] = entry
  row.order[#row.order + 1] = entry.key
  if not entry.ok and not row.first then
    row.first = entry
    for _, f in ipairs(row.flips) do
      if f.kind == "rounding" then
        entry.cause = parity_format.describe_flip(f)
        break
      end
    end
  end
end

-- The elements from..to of a stage of n elements that both replicas round to bf16, or nil.
local function rounded_range(ctx, name, n)
  if ctx.round_gemm and stages.GEMM_INPUT[name] then return 1, n end
  if ctx.round_kv_a and ctx.round_kv_b then
    if name == "k_rope" then return 1, n end
    if name == "qkv" then return ctx.v_from, ctx.v_to end
  end
end

-- A bf16 rounding flip of a stage (layer l, or none) whose values fa and fb differ by
-- max_rel, or nil: a rounding flip is only one while the stage still agrees in float.
local function rounding_flip(ctx, l, name, fa, fb, max_rel)
  local from, to = rounded_range(ctx, name, #fb)
  if not (from and max_rel <= ctx.noise) then return nil end
  local i = trace.rounds_apart(fa, fb, from, to)
  if not i then return nil end
  return { kind = "rounding", layer = l, stage = name, index = i,
    a = fa[i], b = fb[i], a_bf16 = bf16_round(fa[i]), b_bf16 = bf16_round(fb[i]) }
end

-- Compares a stage's values fa against fb: its entry, then the rounding flip it shows.
local function compare_numeric(row, ctx, l, name, fa, fb)
  local key = where(nil, l, name)
  local abs, rel = stages.bounds(ctx.tol, key, name)
  local max_rel, max_abs, index, scale = trace.divergence(fa, fb)
  add_entry(row, { key = key, layer = l, stage = name, max_abs = max_abs, max_rel = max_rel, index = index,
    scale = scale, abs = abs, rel = rel, ok = max_abs <= abs + rel * scale })
  local flip = rounding_flip(ctx, l, name, fa, fb, max_rel)
  if flip then row.flips[#row.flips + 1] = flip end
end

-- Compares a stage outside the layers (embedding, final_norm, logits).
local function compare_outside(row, ctx, ta, tb, name, level)
  local A, B = stage_tensors(ctx.fn, ta, tb, nil, name, level + 1)
  compare_numeric(row, ctx, nil, name, flatten(A), flatten(B))
end

-- Compares layer l's topk_idx, A against B, given the layer's router logits: identical,
-- or a routing flip (recorded before its entry). Returns the flip or nil.
local function compare_routing(row, l, A, B, router_a, router_b)
  local flip = routing_flip(flatten(A), flatten(B), router_a, router_b)
  if flip then
    flip.layer = l
    row.flips[#row.flips + 1] = flip
  end
  add_entry(row, { key = where(nil, l, "topk_idx"), layer = l, stage = "topk_idx", ok = flip == nil, flip = flip })
  return flip
end

-- Whether a layer's stored keys (k_rope, k_a against k_b) or values (qkv's value part)
-- differ between the two caches.
local function kv_apart(ctx, k_a, k_b, qkv_a, qkv_b)
  return kv_differ(k_a, k_b, 1, #k_b, ctx.round_kv_a, ctx.round_kv_b, ctx.noise)
      or kv_differ(qkv_a, qkv_b, ctx.v_from, ctx.v_to, ctx.round_kv_a, ctx.round_kv_b, ctx.noise)
end

-- Compares every stage of layer l in forward order. After a routing flip the per-expert
-- stages are not compared.
local function compare_layer(row, ctx, ta, tb, l, level)
  local flip, qkv_a, qkv_b, router_a, router_b
  for _, name in ipairs(stages.PER_LAYER) do
    local A, B = stage_tensors(ctx.fn, ta, tb, l, name, level + 1)
    if name == "topk_idx" then
      flip = compare_routing(row, l, A, B, router_a, router_b)
    elseif flip and stages.PER_EXPERT[name] then
      add_entry(row, { key = where(nil, l, name), layer = l, stage = name, ok = true, not_compared = "routing flip" })
    else
      local fa, fb = flatten(A), flatten(B)
      compare_numeric(row, ctx, l, name, fa, fb)
      if name == "qkv" then
        qkv_a, qkv_b = fa, fb
      elseif name == "router" then
        router_a, router_b = fa, fb
      elseif name == "k_rope" and kv_apart(ctx, fa, fb, qkv_a, qkv_b) then
        row.kv_apart[#row.kv_apart + 1] = l
      end
    end
  end
end

--- Compares one traced row: ta (replica a's trace, checked) against tb (b's, the reference).
-- config: the model's config (model.config). tolerance: {abs =, rel =, stages =} as
-- compare's opts.tolerance (default parity.TOLERANCES.fp32). opts: a, b (the replicas,
-- or {weights =, kv =} tables: which stages each rounds; default fp32), noise (default
-- parity.NOISE). Returns a row:
--   stages[key] = {key, layer, stage, max_abs, max_rel, index, scale (max |b|), abs, rel,
--                  ok, not_compared ("routing flip") or flip (topk_idx)}
--   order       the keys in forward order
--   first       the first stage over tolerance (a stages entry), with cause (a string)
--               when a rounding flip precedes it, or nil
--   flips       routing and rounding flips in forward order (see gptoss.parity's header)
--   kv_apart    layers whose stored keys or values of this row differ (a list)
function trace.compare_traces(ta, tb, config, tolerance, opts)
  local ctx = trace_setup("parity.compare_traces", ta, tb, config, tolerance, opts, 3)
  local row = { stages = {}, order = {}, flips = {}, kv_apart = {} }
  for _, name in ipairs(stages.BEFORE_LAYERS) do compare_outside(row, ctx, ta, tb, name, 3) end
  for l = 1, config.n_layers do compare_layer(row, ctx, ta, tb, l, 3) end
  for _, name in ipairs(stages.AFTER_LAYERS) do compare_outside(row, ctx, ta, tb, name, 3) end
  return row
end

--- Fills in the causes that need earlier positions: rows are compare_traces results in
-- the order traced, each with its position. For a first failure in scores, probs or
-- attn_out of layer L without a cause yet, an earlier position still in the slot (a
-- trace at p truncates the slot to p + 1) whose layer L keys or values differ is one.
-- Returns rows.
function trace.explain(rows)
  local held = {} -- position -> the row last traced there, while the slot still holds it
  for _, row in ipairs(rows) do
    local p = row.position
    for q in pairs(held) do
      if q >= p then held[q] = nil end
    end
    local first = row.first
    if first and not first.cause and stages.ATTENTION[first.stage] then
      for q = p - 1, 0, -1 do
        local earlier = held[q]
        if earlier then
          for _, l in ipairs(earlier.kv_apart) do
            if l == first.layer then
              first.cause = ("layer %d's stored keys or values of position %d differ"):format(l, q)
              break
            end
          end
        end
        if first.cause then break end
      end
    end
    held[p] = row
  end
  return rows
end

return trace
