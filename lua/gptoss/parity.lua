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
local util = require "gptoss.util"

local parity = {}

-- Every stage a trace records, in forward order: the engines' one table.
local ALL_STAGES = {}
--- The per-layer stages of a trace, in forward order.
parity.STAGES = {}
-- the stages recorded once per token, before the layers and after them
local ONCE_BEFORE, ONCE_AFTER = {}, {}
for _, s in ipairs(gptoss.trace_stages()) do
  ALL_STAGES[#ALL_STAGES + 1] = s.name
  local list = s.per_layer and parity.STAGES or (#parity.STAGES == 0 and ONCE_BEFORE or ONCE_AFTER)
  list[#list + 1] = s.name
end

--- fp32 summation-order noise, relative to a stage's largest value (what the GPU's fp32
-- mode shows against the golden, docs/numerics.md#fp32-mode-of-the-gpu-engine): a stage within it
-- agrees "in float", so a bf16 rounding that differs there is a flip, not drift.
parity.NOISE = 2e-5

--- Default tolerances by numeric mode: "fp32" when both replicas run weights and KV in
-- fp32, "bf16" as soon as either rounds anything.
parity.TOLERANCES = {
  -- Both fp32: the engines do the same float operations and differ only in summation
  -- order (double accumulators rounded to float agree barring double-rounding ties;
  -- attention's float sums may round differently), i.e. by a few float ulps (2^-24
  -- relative) per stage; 1e-5 of the stage's largest value leaves room for those to
  -- grow through the layers while any porting mistake (a wrong index, a missing bias,
  -- a half-applied RoPE) shows at 1e-3 or more.
  fp32 = { abs = 0, rel = 1e-5 },
  -- Any bf16: each rounded operand is off by up to 2^-8 of itself (half a bf16 step at
  -- the bottom of a binade); a GEMM output sums such errors over its inputs; every layer
  -- rounds its inputs again, so the drift compounds down the residual stream; attention's
  -- exponentials turn a score error into the same relative error of a probability; and
  -- the MoE combine adds expert outputs that partly cancel, so its error, measured
  -- against the combined output's largest value, is several times the experts'. Between
  -- fp32 and bf16 replicas of synthetic models (7m, a 4-layer hidden-256 shape, a
  -- 12-layer one) that drift reached 0.1 of a stage's largest value before any routing
  -- flip; 2^-3 (32 bf16 steps) bounds it, while a wrong kernel (an index, a missing term)
  -- is off by the order of the values themselves. A routing flip fails at any tolerance.
  bf16 = { abs = 0, rel = 2 ^ -3 },
}

local NON_LAYER, KNOWN_STAGE = {}, {}
for _, name in ipairs(ONCE_BEFORE) do NON_LAYER[name] = true end
for _, name in ipairs(ONCE_AFTER) do NON_LAYER[name] = true end
for _, name in ipairs(ALL_STAGES) do KNOWN_STAGE[name] = true end
-- what a routing flip makes incomparable: rows and weights of the chosen experts
local PER_EXPERT = { topk_w = true, mlp1 = true, swiglu = true, mlp2 = true }
local ATTENTION = { scores = true, probs = true, attn_out = true }
-- GEMM inputs, rounded to bf16 in bf16 weights mode (docs/numerics.md#bf16-mode-of-the-golden-engine)
local GEMM_INPUT = { attn_norm = true, attn_out = true, ffn_norm = true, swiglu = true, final_norm = true }

local is_a = util.is_a

--- The values of a host tensor (row-major) or of a (nested) list, as one flat list
-- (util.flatten).
parity.flatten = util.flatten

--- x (as a float32) rounded to the nearest bf16, ties to even, as the engines round;
-- NaN and infinities are themselves.
parity.bf16_round = gptoss.bf16_round

--- Divergence of two flat lists over elements from..to (default: all of fb).
-- Returns max_rel (max |a-b| / max |b|, see the header), max_abs, the index of the worst
-- element (nil when they agree) and max |b| over b's finite elements.
function parity.divergence(fa, fb, from, to)
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
function parity.rounds_apart(fa, fb, from, to)
  local round = parity.bf16_round
  for i = from or 1, to or #fb do
    local x, y = fa[i], fb[i]
    if x ~= y and round(x) ~= round(y) then return i end
  end
end

local function mode_of(r, fn, what, level)
  local ok, weights, kv = pcall(function() return r.weights, r.kv end)
  if not ok or (weights ~= "fp32" and weights ~= "bf16") or (kv ~= "fp32" and kv ~= "bf16") then
    error(("%s: %s must be a replica or a table {weights = \"fp32\"|\"bf16\", kv = \"fp32\"|\"bf16\"}")
      :format(fn, what), level)
  end
  return weights, kv
end

--- The default tolerance for a pair of replicas (or of {weights =, kv =} tables):
-- a fresh {abs =, rel =, mode = "fp32"|"bf16"} from parity.TOLERANCES.
function parity.tolerance(a, b)
  local wa, ka = mode_of(a, "parity.tolerance", "a", 3)
  local wb, kb = mode_of(b, "parity.tolerance", "b", 3)
  local mode = (wa == "fp32" and ka == "fp32" and wb == "fp32" and kb == "fp32") and "fp32" or "bf16"
  return { abs = parity.TOLERANCES[mode].abs, rel = parity.TOLERANCES[mode].rel, mode = mode }
end

local function check_bound(fn, where, v, level)
  if type(v) ~= "number" or v ~= v or v < 0 then
    error(("%s: %s must be a non-negative number (got %s)"):format(fn, where, tostring(v)), level)
  end
end

local function check_stage_key(fn, key, n_layers, level)
  local l, name = tostring(key):match("^layer ([1-9]%d*) (.+)$")
  l = tonumber(l)
  local known = KNOWN_STAGE[key] or (l and not NON_LAYER[name] and KNOWN_STAGE[name] and l >= 1 and l <= n_layers)
  if not known then
    error(("%s: tolerance.stages: unknown stage '%s' (a stage name: %s; or 'layer L NAME' with L in 1..%d)")
      :format(fn, tostring(key), table.concat(ALL_STAGES, ", "), n_layers), level)
  end
  if key == "topk_idx" or name == "topk_idx" then
    error(("%s: tolerance.stages: %s has no tolerance: routing must be identical"):format(fn, key), level)
  end
end

-- base ({abs, rel, mode} of parity.tolerance or TOLERANCES) overridden field by field by user (nil, {abs=, rel=,
-- stages = {[name or key] = {abs=, rel=}}}); a fresh table, checked.
local function merge_tolerance(fn, base, user, n_layers, level)
  local tol = { abs = base.abs, rel = base.rel, mode = base.mode, stages = {} }
  if user == nil then return tol end
  if type(user) ~= "table" then
    error(("%s: tolerance must be a table {abs =, rel =, stages =} (got %s)"):format(fn, type(user)), level)
  end
  util.check_known(fn .. ": tolerance", user, { "abs", "rel", "stages", "mode" }, "field", level)
  for _, f in ipairs { "abs", "rel" } do
    if user[f] ~= nil then
      check_bound(fn, "tolerance." .. f, user[f], level + 1)
      tol[f] = user[f]
    end
  end
  -- mode only labels the result (parity.tolerance's tables carry it)
  if user.mode ~= nil then tol.mode = tostring(user.mode) end
  if user.stages ~= nil then
    if type(user.stages) ~= "table" then
      error(("%s: tolerance.stages must be a table (got %s)"):format(fn, type(user.stages)), level)
    end
    for key, t in pairs(user.stages) do
      check_stage_key(fn, key, n_layers, level + 1)
      if type(t) ~= "table" then
        error(("%s: tolerance.stages['%s'] must be a table {abs =, rel =} (got %s)"):format(fn, key, type(t)), level)
      end
      local s = tol.stages[key] or {}
      util.check_known(("%s: tolerance.stages['%s']"):format(fn, key), t, { "abs", "rel" }, "field", level)
      for f, v in pairs(t) do
        check_bound(fn, ("tolerance.stages['%s'].%s"):format(key, f), v, level + 1)
        s[f] = v
      end
      tol.stages[key] = s
    end
  end
  return tol
end

-- (abs, rel) of one stage: its key's override, then its name's, then the global values
local function bounds(tol, key, name)
  local k, n = tol.stages[key] or {}, tol.stages[name] or {}
  local abs = k.abs or n.abs or tol.abs
  local rel = k.rel or n.rel or tol.rel
  return abs, rel
end

local function where_of(position, layer, stage)
  local at = layer and ("layer %d %s"):format(layer, stage) or stage
  if position then return ("position %d, %s"):format(position, at) end
  return at
end

--- One line describing a flip of report.flips (or of compare_traces' flips).
function parity.describe_flip(f)
  local at = where_of(f.position, f.layer, f.kind == "routing" and "topk_idx" or f.stage)
  if f.kind == "routing" then
    return ("%s: routing flip at rank %d: a picks expert %d, b expert %d (router margins %.2e on a, %.2e on b; "
      .. "router logits differ by up to %.2e, largest %.3g)")
      :format(at, f.rank, f.a_expert, f.b_expert, f.a_margin, f.b_margin, f.router_diff, f.router_max)
  end
  return ("%s: bf16 rounding flip at element %d: a %.9g rounds to %.9g, b %.9g to %.9g")
    :format(at, f.index, f.a, f.a_bf16, f.b, f.b_bf16)
end

local function shape_text(t)
  return "{" .. table.concat(t.shape, ", ") .. "}"
end

-- the values a cache stores: as traced, or rounded to bf16
local function stored(values, from, to, round)
  local out = {}
  for i = from, to do out[#out + 1] = round and parity.bf16_round(values[i]) or values[i] end
  return out
end

-- whether the stored keys or values (elements from..to) differ between the two caches:
-- rounded apart when both are bf16, beyond the noise otherwise
local function kv_differ(fa, fb, from, to, round_a, round_b, noise)
  if round_a and round_b then return parity.rounds_apart(fa, fb, from, to) ~= nil end
  local sa, sb = stored(fa, from, to, round_a), stored(fb, from, to, round_b)
  return not (parity.divergence(sa, sb) <= noise)
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
  local _, router_diff, _, router_max = parity.divergence(ra, rb)
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
  if opts.a ~= nil then wa, ka = mode_of(opts.a, fn, "opts.a", level + 1) end
  if opts.b ~= nil then wb, kb = mode_of(opts.b, fn, "opts.b", level + 1) end
  local noise = opts.noise or parity.NOISE
  check_bound(fn, "opts.noise", noise, level + 1)
  local tol = merge_tolerance(fn, parity.TOLERANCES.fp32, tolerance, config.n_layers, level + 1)
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
    error(("%s: %s is missing from trace %s"):format(fn, where_of(nil, l, name),
      is_a(A, "gptoss.tensor") and "b" or "a"), level)
  end
  if shape_text(A) ~= shape_text(B) then
    error(("%s: %s has shape %s on a, %s on b"):format(fn, where_of(nil, l, name), shape_text(A), shape_text(B)), level)
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
        entry.cause = parity.describe_flip(f)
        break
      end
    end
  end
end

-- The elements from..to of a stage of n elements that both replicas round to bf16, or nil.
local function rounded_range(ctx, name, n)
  if ctx.round_gemm and GEMM_INPUT[name] then return 1, n end
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
  local i = parity.rounds_apart(fa, fb, from, to)
  if not i then return nil end
  return { kind = "rounding", layer = l, stage = name, index = i,
    a = fa[i], b = fb[i], a_bf16 = parity.bf16_round(fa[i]), b_bf16 = parity.bf16_round(fb[i]) }
end

-- Compares a stage's values fa against fb: its entry, then the rounding flip it shows.
local function compare_numeric(row, ctx, l, name, fa, fb)
  local key = where_of(nil, l, name)
  local abs, rel = bounds(ctx.tol, key, name)
  local max_rel, max_abs, index, scale = parity.divergence(fa, fb)
  add_entry(row, { key = key, layer = l, stage = name, max_abs = max_abs, max_rel = max_rel, index = index,
    scale = scale, abs = abs, rel = rel, ok = max_abs <= abs + rel * scale })
  local flip = rounding_flip(ctx, l, name, fa, fb, max_rel)
  if flip then row.flips[#row.flips + 1] = flip end
end

-- Compares a stage outside the layers (embedding, final_norm, logits).
local function compare_outside(row, ctx, ta, tb, name, level)
  local A, B = stage_tensors(ctx.fn, ta, tb, nil, name, level + 1)
  compare_numeric(row, ctx, nil, name, parity.flatten(A), parity.flatten(B))
end

-- Compares layer l's topk_idx, A against B, given the layer's router logits: identical,
-- or a routing flip (recorded before its entry). Returns the flip or nil.
local function compare_routing(row, l, A, B, router_a, router_b)
  local flip = routing_flip(parity.flatten(A), parity.flatten(B), router_a, router_b)
  if flip then
    flip.layer = l
    row.flips[#row.flips + 1] = flip
  end
  add_entry(row, { key = where_of(nil, l, "topk_idx"), layer = l, stage = "topk_idx", ok = flip == nil, flip = flip })
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
  for _, name in ipairs(parity.STAGES) do
    local A, B = stage_tensors(ctx.fn, ta, tb, l, name, level + 1)
    if name == "topk_idx" then
      flip = compare_routing(row, l, A, B, router_a, router_b)
    elseif flip and PER_EXPERT[name] then
      add_entry(row, { key = where_of(nil, l, name), layer = l, stage = name, ok = true, not_compared = "routing flip" })
    else
      local fa, fb = parity.flatten(A), parity.flatten(B)
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
--   flips       routing and rounding flips in forward order (see the header)
--   kv_apart    layers whose stored keys or values of this row differ (a list)
function parity.compare_traces(ta, tb, config, tolerance, opts)
  local ctx = trace_setup("parity.compare_traces", ta, tb, config, tolerance, opts, 3)
  local row = { stages = {}, order = {}, flips = {}, kv_apart = {} }
  for _, name in ipairs(ONCE_BEFORE) do compare_outside(row, ctx, ta, tb, name, 3) end
  for l = 1, config.n_layers do compare_layer(row, ctx, ta, tb, l, 3) end
  for _, name in ipairs(ONCE_AFTER) do compare_outside(row, ctx, ta, tb, name, 3) end
  return row
end

--- Fills in the causes that need earlier positions: rows are compare_traces results in
-- the order traced, each with its position. For a first failure in scores, probs or
-- attn_out of layer L without a cause yet, an earlier position still in the slot (a
-- trace at p truncates the slot to p + 1) whose layer L keys or values differ is one.
-- Returns rows.
function parity.explain(rows)
  local held = {} -- position -> the row last traced there, while the slot still holds it
  for _, row in ipairs(rows) do
    local p = row.position
    for q in pairs(held) do
      if q >= p then held[q] = nil end
    end
    local first = row.first
    if first and not first.cause and ATTENTION[first.stage] then
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
  local noise = opts.noise == nil and parity.NOISE or opts.noise
  check_bound(fn, "noise", noise, level + 1)
  local write = writer_of(fn, opts.print, level + 1)
  local config = same_config(fn, a, b, level + 1)
  local tol = merge_tolerance(fn, parity.tolerance(a, b), opts.tolerance, config.n_layers, level + 1)
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
  for _, name in ipairs(ALL_STAGES) do
    local s = { stage = name, ok = true, over_layers = {}, over = 0, compared = 0, not_compared = 0,
      flips = name == "topk_idx" and 0 or nil }
    for _, key in ipairs(report.order) do
      local e = report.stages[key]
      if e.stage == name then summarize_layer(s, e) end
    end
    if s.abs == nil then s.abs, s.rel = bounds(report.tolerance, name, name) end
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
    a = { device = a.device, weights = a.weights, kv = a.kv }, b = { device = b.device, weights = b.weights, kv = b.kv },
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

--- The printed form of a report, as a list of lines: a header, one line per stage name
-- (its worst layer; with opts.layers, one line per layer and stage as well), the
-- verdict, and the flips.
function parity.format(report, opts)
  opts = util.options("parity.format", opts, { "layers" }, 2)
  local lines = {}
  local function add(fmt, ...) lines[#lines + 1] = fmt:format(...) end
  local positions = report.positions
  local function side(name)
    local r = report[name]
    return ("%s weights %s kv %s"):format(r.device == "cpu" and "cpu" or "GPU " .. tostring(r.device), r.weights, r.kv)
  end
  add("parity: a = %s, b = %s (reference); slot %d, %d position%s (%d..%d), %d layers",
    side("a"), side("b"), report.slot, #positions, #positions == 1 and "" or "s", positions[1],
    positions[#positions], report.layers)
  local tol = report.tolerance
  add("tolerance (%s mode): max|a-b| <= %.3g + %.3g x max|b| per stage%s", tol.mode, tol.abs, tol.rel,
    next(tol.stages) and ", with per-stage overrides" or "")
  local header = ("%-16s %5s %8s %10s %10s  %-18s %s"):format("stage", "layer", "position", "max abs", "max rel",
    "tolerance", "status")
  lines[#lines + 1] = header
  local function line(e)
    local tolerance = e.stage == "topk_idx" and "identical" or tolerance_text(e.abs, e.rel)
    add("%-16s %5s %8s %10s %10s  %-18s %s", e.stage, e.layer and tostring(e.layer) or "-",
      e.position and tostring(e.position) or "-", num(e.max_abs), num(e.max_rel), tolerance, status_of(e))
  end
  for _, s in ipairs(report.summary) do line(s) end
  if opts.layers then
    lines[#lines + 1] = ""
    lines[#lines + 1] = header
    for _, key in ipairs(report.order) do line(report.stages[key]) end
  end
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
    add("first stage over tolerance: %s (%s)", where_of(f.position, f.layer, f.stage), why)
    if f.cause then add("  after: %s", f.cause) end
    local a, b = report.a, report.b
    if a.weights ~= b.weights or a.kv ~= b.kv then
      add("  the replicas' numeric modes differ (a: weights %s kv %s; b: weights %s kv %s): bf16 rounding "
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
  local flips = report.flips
  if #flips > 0 then
    local routing = 0
    for _, fl in ipairs(flips) do
      if fl.kind == "routing" then routing = routing + 1 end
    end
    add("flips: %d routing, %d bf16 rounding", routing, #flips - routing)
    for i = 1, math.min(#flips, MAX_FLIPS_SHOWN) do lines[#lines + 1] = "  " .. parity.describe_flip(flips[i]) end
    if #flips > MAX_FLIPS_SHOWN then add("  ... and %d more", #flips - MAX_FLIPS_SHOWN) end
  end
  return lines
end

return parity
