--- gptoss.parity_stages (internal, gptoss.parity's): the stages a trace records, what the
-- comparison knows of them (which belong to one expert, which read keys and values, which
-- are GEMM inputs), and how closely each must agree: the noise threshold, the tolerances by
-- numeric mode and the per-stage overrides of a user's tolerance table (gptoss.parity's
-- header says how they are applied).
local gptoss = require "gptoss"
local util = require "gptoss.util"

local stages = {}

--- Every stage a trace records, in forward order: the engines' one table.
stages.ALL = {}
--- The per-layer stages of a trace, in forward order (parity.STAGES).
stages.PER_LAYER = {}
--- The stages recorded once per token, before the layers and after them.
stages.BEFORE_LAYERS, stages.AFTER_LAYERS = {}, {}
for _, s in ipairs(gptoss.trace_stages()) do
  stages.ALL[#stages.ALL + 1] = s.name
  local list = s.per_layer and stages.PER_LAYER
      or (#stages.PER_LAYER == 0 and stages.BEFORE_LAYERS or stages.AFTER_LAYERS)
  list[#list + 1] = s.name
end

local NON_LAYER, KNOWN_STAGE = {}, {}
for _, name in ipairs(stages.BEFORE_LAYERS) do NON_LAYER[name] = true end
for _, name in ipairs(stages.AFTER_LAYERS) do NON_LAYER[name] = true end
for _, name in ipairs(stages.ALL) do KNOWN_STAGE[name] = true end
-- what a routing flip makes incomparable: rows and weights of the chosen experts
stages.PER_EXPERT = { topk_w = true, mlp1 = true, swiglu = true, mlp2 = true }
-- what reads the keys and values stored at earlier positions
stages.ATTENTION = { scores = true, probs = true, attn_out = true }
-- GEMM inputs, rounded to bf16 in bf16 weights mode (docs/numerics.md#bf16-mode-of-the-golden-engine)
stages.GEMM_INPUT = { attn_norm = true, attn_out = true, ffn_norm = true, swiglu = true, final_norm = true }

--- parity.NOISE: fp32 summation-order noise, relative to a stage's largest value (what the
-- GPU's fp32 mode shows against the golden, docs/numerics.md#fp32-mode-of-the-gpu-engine): a
-- stage within it agrees "in float", so a bf16 rounding that differs there is a flip, not drift.
stages.NOISE = 2e-5

--- parity.TOLERANCES, the default tolerances by numeric mode: "fp32" when both replicas
-- run weights and KV in fp32, "bf16" as soon as either rounds anything.
stages.TOLERANCES = {
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

-- The arithmetic ("fp32" or "bf16") of each weight format, from the core's format table.
local ARITHMETIC = {}
for _, f in ipairs(gptoss.weight_formats()) do ARITHMETIC[f.name] = f.bf16_arithmetic and "bf16" or "fp32" end

--- The arithmetic of r's GEMMs and its KV cache ("fp32" or "bf16" each): r is a replica or a
-- {weights =, kv =} table, weights any weight format (mxfp4 computes as bf16); else an error
-- naming fn and what, at level.
function stages.mode_of(r, fn, what, level)
  local ok, weights, kv = pcall(function() return r.weights, r.kv end)
  if not ok or not ARITHMETIC[weights] or not util.listed(gptoss.kv_formats(), kv) then
    error(("%s: %s must be a replica or a table {weights = %s, kv = %s}"):format(fn, what,
      '"' .. table.concat(gptoss.weight_format_names(), '"|"') .. '"', '"' .. table.concat(gptoss.kv_formats(), '"|"')
      .. '"'), level)
  end
  return ARITHMETIC[weights], kv
end

--- parity.tolerance(a, b): the default tolerance for a pair of replicas (or of {weights =,
-- kv =} tables): a fresh {abs =, rel =, mode = "fp32"|"bf16"} from parity.TOLERANCES.
function stages.default_tolerance(a, b)
  local wa, ka = stages.mode_of(a, "parity.tolerance", "a", 3)
  local wb, kb = stages.mode_of(b, "parity.tolerance", "b", 3)
  local mode = (wa == "fp32" and ka == "fp32" and wb == "fp32" and kb == "fp32") and "fp32" or "bf16"
  return { abs = stages.TOLERANCES[mode].abs, rel = stages.TOLERANCES[mode].rel, mode = mode }
end

--- Raises "<fn>: <where> must be a non-negative number" at level unless v is one.
function stages.check_bound(fn, where, v, level)
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
      :format(fn, tostring(key), table.concat(stages.ALL, ", "), n_layers), level)
  end
  if key == "topk_idx" or name == "topk_idx" then
    error(("%s: tolerance.stages: %s has no tolerance: routing must be identical"):format(fn, key), level)
  end
end

--- base ({abs, rel, mode} of parity.tolerance or TOLERANCES) overridden field by field by
-- user (nil, {abs=, rel=, stages = {[name or key] = {abs=, rel=}}}); a fresh table, checked.
function stages.merge_tolerance(fn, base, user, n_layers, level)
  local tol = { abs = base.abs, rel = base.rel, mode = base.mode, stages = {} }
  if user == nil then return tol end
  if type(user) ~= "table" then
    error(("%s: tolerance must be a table {abs =, rel =, stages =} (got %s)"):format(fn, type(user)), level)
  end
  util.check_known(fn .. ": tolerance", user, { "abs", "rel", "stages", "mode" }, "field", level)
  for _, f in ipairs { "abs", "rel" } do
    if user[f] ~= nil then
      stages.check_bound(fn, "tolerance." .. f, user[f], level + 1)
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
        stages.check_bound(fn, ("tolerance.stages['%s'].%s"):format(key, f), v, level + 1)
        s[f] = v
      end
      tol.stages[key] = s
    end
  end
  return tol
end

--- (abs, rel) of one stage: its key's override, then its name's, then the global values.
function stages.bounds(tol, key, name)
  local k, n = tol.stages[key] or {}, tol.stages[name] or {}
  local abs = k.abs or n.abs or tol.abs
  local rel = k.rel or n.rel or tol.rel
  return abs, rel
end

return stages
