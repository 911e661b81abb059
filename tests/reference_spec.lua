-- An independent plain-Lua implementation of the gpt-oss forward pass (course run.cpp numerics,
-- docs/course.md#the-forward-pass), used to check the C CPU golden
-- engine. The reference runs in double precision; the engine runs in float32 with the course's
-- double accumulators. Logits must agree to 1e-5 absolute; trace stages to 1e-5 times the stage's
-- own magnitude (see stage_tol). Expert selection must agree exactly.
--
-- The reference also has "variant" switches that reproduce known mistakes of other ports
-- (a wrong RoPE pairing, a missing sink, ...). The last block of tests shows that every such variant moves
-- the logits by far more than the tolerance: an engine with that mistake could not pass the
-- agreement tests above it.

local gptoss = require "gptoss"
local H = require "helpers"
local with, CONFIG_FIELDS, DEFAULTS_7M = H.with, H.CONFIG_FIELDS, H.CONFIG_7M

local TOL = 1e-5
local NEG_INF = -math.huge

-- Windowed layers, GQA with 2 query heads per kv head, YaRN. The window (4) is shorter than the
-- ~10-token sequences below, so the mask is active on even course layers.
local CFG_GQA = {
   vocab_size = 64, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
   n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64,
   initial_context_length = 4096, rope_theta = 150000.0, rope_scaling_factor = 32.0,
   sliding_window = 4, swiglu_limit = 7.0,
}

-- Plain multi-head attention, no YaRN (s = 1: concentration 1, inv_freq = 1/freq), no window.
local CFG_MHA = with(CFG_GQA, { n_kv_heads = 4, rope_scaling_factor = 1.0, sliding_window = 0 })

-- YaRN only changes the low-frequency dimensions, whose angles stay tiny over a few positions with
-- theta 150000. A small theta and context move the ramp (low ~ 0.54, high ~ 2.55 for D = 8, still
-- inside the course's assert 0 < low < high < d2-1) to frequencies that turn within 10 tokens.
local CFG_YARN = with(CFG_GQA, { rope_theta = 1000.0, initial_context_length = 512 })

-- The synthetic weights of these small shapes keep mlp1 outputs around 1, below the default limit
-- of 7, so this config lowers the limit until every clamp of docs/course.md#per-token step 2.11.2
-- bites (a
-- test below checks that all four sides are hit).
local CFG_CLAMP = with(CFG_GQA, { swiglu_limit = 0.5 })

-- Every field left to the engine's defaults (the 7m shapes: H 32, E 32, I 64, D 32, Hq 2, Hkv 1,
-- window 128) except a small vocabulary, so the defaults themselves get checked.
local CFG_7M_SMALL_VOCAB = { vocab_size = 512 }

local TOKENS_A = { 5, 9, 11, 60, 0, 33, 17, 42, 8, 63 }
local TOKENS_B = { 1, 2, 3, 61, 40, 12, 7, 7, 50, 21 }

---------------------------------------------------------------------------------------------------
-- Small numeric helpers (docs/course.md#helper-numerics)
---------------------------------------------------------------------------------------------------

-- y[o] = sum_i W[o][i] * x[i] (+ b[o]): weights are stored (out, in),
-- docs/course.md#tensor-order-and-shapes.
local function matvec(W, x, b)
   local y = {}
   for o = 1, #W do
      local row, s = W[o], 0.0
      for i = 1, #x do s = s + row[i] * x[i] end
      y[o] = b and (s + b[o]) or s
   end
   return y
end

-- RMSNorm with eps 1e-5 inside the square root (hard-coded in run.cpp,
-- docs/course.md#named-configurations-and-constants).
local function rmsnorm(x, w)
   local ss = 0.0
   for i = 1, #x do ss = ss + x[i] * x[i] end
   local inv = 1.0 / math.sqrt(ss / #x + 1e-5)
   local o = {}
   for i = 1, #x do o[i] = w[i] * (inv * x[i]) end
   return o
end

-- Softmax that tolerates -inf entries (masked attention keys get probability exactly 0).
local function softmax(x)
   local m = NEG_INF
   for i = 1, #x do if x[i] > m then m = x[i] end end
   local p, sum = {}, 0.0
   for i = 1, #x do
      p[i] = (x[i] == NEG_INF) and 0.0 or math.exp(x[i] - m)
      sum = sum + p[i]
   end
   for i = 1, #x do p[i] = p[i] / sum end
   return p
end

local function slice(v, first, n)
   local s = {}
   for i = 1, n do s[i] = v[first + i - 1] end
   return s
end

local function add_into(acc, v)
   for i = 1, #acc do acc[i] = acc[i] + v[i] end
end

local function copy(v)
   local c = {}
   for i = 1, #v do c[i] = v[i] end
   return c
end

local function sigmoid(z) return 1.0 / (1.0 + math.exp(-z)) end

---------------------------------------------------------------------------------------------------
-- RoPE (docs/course.md#per-token, step 2.4)
---------------------------------------------------------------------------------------------------

-- cos/sin tables for one position. YaRN when s > 1: NTK-by-parts interpolation between the
-- extrapolated (1/freq) and interpolated (1/(s*freq)) frequencies, with the ramp bounds low/high
-- left UNROUNDED (pitfalls.md: rounding them broke vLLM and SGLang), and the concentration
-- 0.1*ln(s)+1 multiplying BOTH cos and sin.
local function rope_tables(cfg, pos, v)
   local D = cfg.head_dim
   local d2 = D // 2
   local theta, s, C = cfg.rope_theta, cfg.rope_scaling_factor, cfg.initial_context_length
   local concentration, low, high = 1.0, nil, nil
   if v.no_yarn then s = 1.0 end
   if s > 1.0 then
      concentration = 0.1 * math.log(s) + 1.0
      local ntk_beta, ntk_alpha = 32.0, 1.0
      low = d2 * math.log(C / (ntk_beta * 2 * math.pi)) / math.log(theta)
      high = d2 * math.log(C / (ntk_alpha * 2 * math.pi)) / math.log(theta)
      assert(0 < low and low < high and high < d2 - 1, "course asserts 0 < low < high < d2-1")
      if v.rounded_yarn then low, high = math.floor(low), math.ceil(high) end
   end
   local cos, sin = {}, {}
   for i = 0, d2 - 1 do
      local freq = theta ^ ((2 * i) / D)
      local inv_freq
      if s > 1.0 then
         local ramp = math.min(math.max((i - low) / (high - low), 0.0), 1.0)
         inv_freq = (1.0 / (s * freq)) * ramp + (1.0 / freq) * (1.0 - ramp)
      else
         inv_freq = 1.0 / freq
      end
      local angle = pos * inv_freq
      cos[i + 1] = math.cos(angle) * concentration
      sin[i + 1] = math.sin(angle) * (v.concentration_cos_only and 1.0 or concentration)
   end
   return cos, sin
end

-- Rotate every head of a flat (n_heads * D) vector in place. The course pairs dimension i with
-- i + D/2 (half-split), not (2i, 2i+1): no q/k permutation happens at export
-- (docs/course.md#how-the-checkpoints-were-exported).
local function rope_apply(x, n_heads, D, cos, sin, v)
   local d2 = D // 2
   for h = 0, n_heads - 1 do
      local base = h * D
      for i = 1, d2 do
         local ia, ib
         if v.interleaved_rope then ia, ib = base + 2 * i - 1, base + 2 * i
         else ia, ib = base + i, base + i + d2 end
         local a, b = x[ia], x[ib]
         x[ia] = a * cos[i] - b * sin[i]
         x[ib] = b * cos[i] + a * sin[i]
      end
   end
end

---------------------------------------------------------------------------------------------------
-- Weights
---------------------------------------------------------------------------------------------------

local function config_of(model)
   local c = {}
   for _, f in ipairs(CONFIG_FIELDS) do c[f] = model.config[f] end
   return c
end

-- Copy every tensor to Lua tables once (layer and expert are 1-based in the Lua API).
local function load_weights(model)
   local function T(name, ...) return model:tensor(name, ...):totable() end
   local cfg = config_of(model)
   local W = { cfg = cfg, emb = T("token_embedding_table"), out = T("out"), rms_out = T("rms_out_w"), layers = {} }
   for l = 1, cfg.n_layers do
      local L = {
         rms_attn = T("rms_attn_w", l), rms_ffn = T("rms_ffn_w", l),
         w_qkv = T("w_qkv", l), b_qkv = T("b_qkv", l), w_o = T("w_o", l), b_o = T("b_o", l),
         sinks = T("attn_sinks", l), w_router = T("w_router", l), b_router = T("b_router", l),
         experts = {},
      }
      for e = 1, cfg.n_experts do
         L.experts[e] = { w1 = T("w_mlp1", l, e), b1 = T("b_mlp1", l, e), w2 = T("w_mlp2", l, e), b2 = T("b_mlp2", l, e) }
      end
      W.layers[l] = L
   end
   return W
end

---------------------------------------------------------------------------------------------------
-- The reference forward (one token at a time, like run.cpp's forward(token, pos))
---------------------------------------------------------------------------------------------------

local Session = {}
Session.__index = Session

-- cfg may differ from the weights' own config in fields that do not change shapes (for example
-- sliding_window), which lets one set of weights be run under two masks.
local function new_session(W, cfg, variant)
   local s = setmetatable({ W = W, cfg = cfg or W.cfg, v = variant or {}, kcache = {}, vcache = {} }, Session)
   for l = 1, s.cfg.n_layers do s.kcache[l], s.vcache[l] = {}, {} end
   return s
end

-- Attention for one layer (docs/course.md#per-token, step 2.5). Returns the concatenated head
-- outputs and,
-- for the trace, the per-head scores and probabilities (t = 0..pos, then the sink last).
function Session:attention(li, q, pos)
   local cfg, v, L = self.cfg, self.v, self.W.layers[li]
   local D, Hq, Hkv = cfg.head_dim, cfg.n_attn_heads, cfg.n_kv_heads
   local group = Hq // Hkv
   -- Only even course layers (0-based l = li - 1) are windowed; odd layers see every position.
   local windowed = cfg.sliding_window > 0 and ((li - 1) % 2 == 0 or v.window_all_layers)
   local out, scores, probs = {}, {}, {}
   for h = 0, Hq - 1 do
      -- Consecutive query heads share a kv head (GQA), docs/course.md#per-token step 2.5.
      local g = v.gqa_modulo and (h % Hkv) or (h // group)
      local qh = slice(q, h * D + 1, D)
      local sc = {}
      for t = 0, pos do
         local kt, dot = self.kcache[li][t], 0.0
         for i = 1, D do dot = dot + qh[i] * kt[g * D + i] end
         sc[t + 1] = dot / math.sqrt(D)
         -- The window includes the current token: key t is visible iff pos - t < sliding_window.
         local hidden = pos - t >= cfg.sliding_window
         if v.window_inclusive then hidden = pos - t > cfg.sliding_window end
         if windowed and hidden then sc[t + 1] = NEG_INF end
      end
      -- The sink is a raw per-head logit that joins the softmax denominator only.
      if not v.no_sink then sc[pos + 2] = L.sinks[h + 1] end
      local p = softmax(sc)
      -- It has no value vector: the output sums over t = 0..pos and the sink's mass is dropped.
      local oh = {}
      for i = 1, D do oh[i] = 0.0 end
      for t = 0, pos do
         local vt = self.vcache[li][t]
         for i = 1, D do oh[i] = oh[i] + p[t + 1] * vt[g * D + i] end
      end
      for i = 1, D do out[h * D + i] = oh[i] end
      if v.no_sink then sc[pos + 2], p[pos + 2] = NEG_INF, 0.0 end -- keep the trace shape
      scores[h + 1], probs[h + 1] = sc, p
   end
   return out, scores, probs
end

-- SwiGLU of the course (docs/course.md#per-token, steps 2.11.2-3): mlp1 rows interleave gate
-- (even, 0-based)
-- and up (odd); the gate is clamped only from above, up on both sides, and up gets a "+1".
function Session:swiglu(h1)
   local limit, v = self.cfg.swiglu_limit, self.v
   local y = {}
   for j = 1, #h1 // 2 do
      local gate, up = h1[2 * j - 1], h1[2 * j]
      if not v.no_clamp then
         gate = math.min(gate, limit)
         if v.gate_clamp_both then gate = math.max(gate, -limit) end
         up = math.min(math.max(up, -limit), limit)
      end
      y[j] = gate * sigmoid(1.702 * gate) * (v.no_up_plus_one and up or (up + 1.0))
   end
   return y
end

-- Mixture of experts (docs/course.md#per-token, steps 2.8-2.12).
function Session:moe(li, t)
   local cfg, v, L = self.cfg, self.v, self.W.layers[li]
   local E, k = cfg.n_experts, cfg.experts_per_token
   local router = matvec(L.w_router, t, L.b_router)
   -- Top-k of the raw logits, descending; ties go to the lower expert id
   -- (docs/course.md#per-token, step 2.9).
   local order = {}
   for e = 0, E - 1 do order[e + 1] = e end
   table.sort(order, function(a, b)
      if router[a + 1] ~= router[b + 1] then return router[a + 1] > router[b + 1] end
      return a < b
   end)
   local idx, logits_k = {}, {}
   for j = 1, k do idx[j], logits_k[j] = order[j], router[order[j] + 1] end
   -- The expert weights are a softmax over the k selected logits only.
   local w
   if v.softmax_all_router then
      local pall = softmax(router)
      w = {}
      for j = 1, k do w[j] = pall[idx[j] + 1] end
   else
      w = softmax(logits_k)
   end
   local tr = { router = router, topk_idx = idx, topk_w = w, mlp1 = {}, swiglu = {}, mlp2 = {} }
   local h2_of, w_of = {}, {}
   for j = 1, k do
      local ex = L.experts[idx[j] + 1]
      local h1 = matvec(ex.w1, t, ex.b1)
      local y = self:swiglu(h1)
      local h2 = matvec(ex.w2, y, ex.b2)
      tr.mlp1[j], tr.swiglu[j], tr.mlp2[j] = h1, y, h2
      h2_of[idx[j]], w_of[idx[j]] = h2, w[j]
   end
   -- Accumulate in ascending expert id, as run.cpp does (the order matters for float parity).
   local agg = {}
   for i = 1, cfg.hidden_dim do agg[i] = 0.0 end
   for e = 0, E - 1 do
      if h2_of[e] then
         for i = 1, cfg.hidden_dim do agg[i] = agg[i] + h2_of[e][i] * w_of[e] end
      end
   end
   tr.moe_out = agg
   return agg, tr
end

-- One token at one position: writes this position's K/V into the cache and returns the logits
-- plus every intermediate under the names the engine's trace uses.
function Session:forward(token, pos)
   local cfg, W, v = self.cfg, self.W, self.v
   local D, Hq, Hkv = cfg.head_dim, cfg.n_attn_heads, cfg.n_kv_heads
   local trace = { layers = {} }
   local x = copy(W.emb[token + 1])
   trace.embedding = copy(x)
   local cos, sin = rope_tables(cfg, pos, v)
   for li = 1, cfg.n_layers do
      local L, tl = W.layers[li], {}
      trace.layers[li] = tl
      local t = rmsnorm(x, L.rms_attn)
      tl.attn_norm = t
      local qkv = matvec(L.w_qkv, t, L.b_qkv)
      tl.qkv = qkv
      -- Rows of w_qkv: q heads, then k heads, then v heads (docs/course.md#tensor-order-and-shapes).
      local q = slice(qkv, 1, Hq * D)
      local k = slice(qkv, Hq * D + 1, Hkv * D)
      local vv = slice(qkv, Hq * D + Hkv * D + 1, Hkv * D)
      rope_apply(q, Hq, D, cos, sin, v)
      rope_apply(k, Hkv, D, cos, sin, v)
      tl.q_rope, tl.k_rope = q, k
      -- The cache stores keys after rotation; values are never rotated.
      self.kcache[li][pos], self.vcache[li][pos] = k, vv
      local o, scores, probs = self:attention(li, q, pos)
      tl.scores, tl.probs, tl.attn_out = scores, probs, o
      local proj = matvec(L.w_o, o, L.b_o)
      tl.attn_proj = proj
      add_into(x, proj)
      tl.resid_attn = copy(x)
      t = rmsnorm(x, L.rms_ffn)
      tl.ffn_norm = t
      local agg, mt = self:moe(li, t)
      for name, val in pairs(mt) do tl[name] = val end
      add_into(x, agg)
      tl.resid_ffn = copy(x)
   end
   x = rmsnorm(x, W.rms_out)
   trace.final_norm = x
   -- The unembedding has no bias.
   local logits = matvec(W.out, x)
   trace.logits = logits
   return logits, trace
end

-- Logits of every token of a sequence, positions 0.., like a prefill (a list of rows).
local function reference_logits(W, tokens, cfg, variant)
   local s, rows = new_session(W, cfg, variant), {}
   for i, tok in ipairs(tokens) do rows[i] = (s:forward(tok, i - 1)) end
   return rows
end

---------------------------------------------------------------------------------------------------
-- Comparison helpers
---------------------------------------------------------------------------------------------------

local flatten = H.flatten

-- Largest absolute difference; -inf must meet -inf exactly (a masked score).
local function max_diff(a, b)
   a, b = flatten(a), flatten(b)
   if #a ~= #b then return math.huge, 0, nil, nil, #a, #b end
   local worst, wi = 0.0, nil
   for i = 1, #a do
      local x, y = a[i], b[i]
      local d
      if x == y then d = 0.0
      elseif x ~= x or y ~= y or x == NEG_INF or y == NEG_INF or x == math.huge or y == math.huge then d = math.huge
      else d = math.abs(x - y) end
      if d > worst or wi == nil then worst, wi = d, i end
   end
   return worst, wi, a[wi], b[wi], #a, #b
end

-- Trace stages hold values up to ~10 (attention scores, expert outputs), where float32 spacing is
-- ~1e-6 and the engine's float rounding upstream grows with the value's size (measured: 7e-6 on
-- scores of magnitude 5.6 in layer 2, while rounding the reference's RoPE to float32 does not
-- close the gap). So a stage gets TOL times its own scale, never less than TOL; logits keep the
-- plain absolute TOL.
local function stage_tol(want)
   local m = 1.0
   for _, x in ipairs(flatten(want)) do
      if x ~= NEG_INF and math.abs(x) > m then m = math.abs(x) end
   end
   return TOL * m
end

local function assert_close(what, got, want, tol)
   local d, i, g, w, ng, nw = max_diff(got, want)
   assert(ng == nw, ("%s: engine gave %d values, reference %d"):format(what, ng, nw))
   assert(d <= tol, ("%s: max |engine - reference| = %.4g at flat index %d (engine %.9g, reference %.9g), tolerance %g")
      :format(what, d, i, g, w, tol))
end

local function assert_shape(what, shape, want)
   local s = {}
   for i = 1, #shape do s[i] = shape[i] end
   assert(#s == #want, ("%s: shape {%s}, expected {%s}"):format(what, table.concat(s, ","), table.concat(want, ",")))
   for i = 1, #want do
      assert(s[i] == want[i], ("%s: shape {%s}, expected {%s}"):format(what, table.concat(s, ","), table.concat(want, ",")))
   end
end

local function step(r, slot, first_pos, tokens)
   local slots, positions = {}, {}
   for i = 1, #tokens do slots[i], positions[i] = slot, first_pos + i - 1 end
   return r:step { slots = slots, positions = positions, tokens = tokens }
end

local function first(tokens, n) return slice(tokens, 1, n) end

---------------------------------------------------------------------------------------------------
-- Tests
---------------------------------------------------------------------------------------------------

local CASES = {
   { name = "GQA, YaRN, sliding window 4", cfg = CFG_GQA, seed = 3 },
   { name = "MHA, no YaRN (s = 1), no window", cfg = CFG_MHA, seed = 5 },
   { name = "YaRN ramp at short range (theta 1000, context 512)", cfg = CFG_YARN, seed = 11 },
   { name = "SwiGLU limit 0.5", cfg = CFG_CLAMP, seed = 7 },
   { name = "7m defaults, vocab 512", cfg = CFG_7M_SMALL_VOCAB, seed = 1 },
}

for _, case in ipairs(CASES) do
   describe("reference forward vs CPU golden engine (" .. case.name .. ")", function()
      local model, W
      local cfg = with(DEFAULTS_7M, case.cfg)

      lazy_setup(function()
         model = gptoss.synthetic(case.cfg, { seed = case.seed })
         W = load_weights(model)
      end)

      local function replica() return model:replica { device = "cpu", slots = 3, ctx = 32 } end

      it("keeps the config it was given", function()
         for _, f in ipairs(CONFIG_FIELDS) do
            assert.are.equal(cfg[f], model.config[f], f)
         end
      end)

      -- The reference reads weights through per-layer/per-expert slices; if slices were offset
      -- wrongly every later comparison would fail for a reason unrelated to the forward pass.
      it("returns tensor slices that match the whole tensor", function()
         local c = cfg
         local Q = c.head_dim * c.n_attn_heads + 2 * c.head_dim * c.n_kv_heads
         local whole_qkv = model:tensor("w_qkv")
         assert_shape("w_qkv", whole_qkv.shape, { c.n_layers, Q, c.hidden_dim })
         local l2 = model:tensor("w_qkv", 2)
         assert_shape("w_qkv[2]", l2.shape, { Q, c.hidden_dim })
         assert_close("w_qkv[2] slice", l2:totable(), whole_qkv:totable()[2], 0)
         local whole_mlp1 = model:tensor("w_mlp1")
         assert_shape("w_mlp1", whole_mlp1.shape, { c.n_layers, c.n_experts, 2 * c.intermediate_dim, c.hidden_dim })
         local e = model:tensor("w_mlp1", 2, 3)
         assert_shape("w_mlp1[2][3]", e.shape, { 2 * c.intermediate_dim, c.hidden_dim })
         assert_close("w_mlp1[2][3] slice", e:totable(), whole_mlp1:totable()[2][3], 0)
         assert_close("b_mlp2[1][8] slice", model:tensor("b_mlp2", 1, 8):totable(), model:tensor("b_mlp2"):totable()[1][8], 0)
         assert_shape("rms_out_w", model:tensor("rms_out_w").shape, { c.hidden_dim })
         assert_shape("attn_sinks[1]", model:tensor("attn_sinks", 1).shape, { c.n_attn_heads })
      end)

      it("prefill of 10 tokens in one step matches the reference on every logit", function()
         local want = reference_logits(W, TOKENS_A)
         local logits = step(replica(), 1, 0, TOKENS_A):logits()
         assert_shape("prefill logits", logits.shape, { #TOKENS_A, cfg.vocab_size })
         local got = logits:totable()
         for row = 1, #TOKENS_A do
            assert_close(("prefill row %d (pos %d)"):format(row, row - 1), got[row], want[row], TOL)
         end
      end)

      it("decode one token per step in another slot matches the reference", function()
         local r = replica()
         step(r, 1, 0, TOKENS_A) -- occupy slot 1 with a different sequence: slots must not mix
         local want = reference_logits(W, TOKENS_B)
         for i, tok in ipairs(TOKENS_B) do
            local logits = step(r, 2, i - 1, { tok }):logits()
            assert_shape("decode logits", logits.shape, { 1, cfg.vocab_size })
            assert_close(("decode pos %d"):format(i - 1), logits:totable()[1], want[i], TOL)
         end
      end)

      it("a step mixing slots and positions matches the reference per row", function()
         local r = replica()
         step(r, 1, 0, first(TOKENS_A, 6))
         step(r, 2, 0, first(TOKENS_B, 3))
         -- one batch: slot 1 decodes pos 6, slot 2 prefills pos 3..5, slot 3 starts at pos 0
         local h = r:step { slots = { 2, 1, 2, 3, 2 }, positions = { 3, 6, 4, 0, 5 },
            tokens = { TOKENS_B[4], TOKENS_A[7], TOKENS_B[5], TOKENS_A[1], TOKENS_B[6] } }
         local got = h:logits():totable()
         local ra, rb = reference_logits(W, first(TOKENS_A, 7)), reference_logits(W, first(TOKENS_B, 6))
         assert_close("slot 2 pos 3", got[1], rb[4], TOL)
         assert_close("slot 1 pos 6", got[2], ra[7], TOL)
         assert_close("slot 2 pos 4", got[3], rb[5], TOL)
         assert_close("slot 3 pos 0", got[4], ra[1], TOL)
         assert_close("slot 2 pos 5", got[5], rb[6], TOL)
      end)

      it("reset empties a slot so that it can take a new sequence", function()
         local r = replica()
         step(r, 1, 0, TOKENS_A)
         r:reset(1)
         local want = reference_logits(W, first(TOKENS_B, 5))
         local got = step(r, 1, 0, first(TOKENS_B, 5)):logits():totable()
         for row = 1, 5 do assert_close(("after reset, pos %d"):format(row - 1), got[row], want[row], TOL) end
      end)

      it("trace at position 6 matches every intermediate of the reference", function()
         local c = cfg
         local pos = 6
         local toks = first(TOKENS_A, pos + 1)
         local sess = new_session(W)
         local want
         for i, tok in ipairs(toks) do _, want = sess:forward(tok, i - 1) end

         local r = replica()
         step(r, 3, 0, first(toks, pos))
         local tr = r:trace(3, toks[pos + 1], pos)

         local function T(x) return x:totable() end
         assert_close("embedding", T(tr.embedding), want.embedding, stage_tol(want.embedding))
         local k, I = c.experts_per_token, c.intermediate_dim
         local shapes = {
            scores = { c.n_attn_heads, pos + 2 }, probs = { c.n_attn_heads, pos + 2 },
            mlp1 = { k, 2 * I }, swiglu = { k, I }, mlp2 = { k, c.hidden_dim },
         }
         local stages = { "attn_norm", "qkv", "q_rope", "k_rope", "scores", "probs", "attn_out", "attn_proj",
            "resid_attn", "ffn_norm", "router", "topk_w", "mlp1", "swiglu", "mlp2", "moe_out", "resid_ffn" }
         for li = 1, c.n_layers do
            local got_l, want_l = tr.layers[li], want.layers[li]
            assert(got_l, ("trace has no layer %d"):format(li))
            -- expert choice must be exact: everything after it depends on it
            local got_idx = T(got_l.topk_idx)
            assert.are.same(want_l.topk_idx, flatten(got_idx), ("layer %d topk_idx"):format(li))
            for _, name in ipairs(stages) do
               local what = ("layer %d %s"):format(li, name)
               assert(got_l[name], what .. " missing from the trace")
               if shapes[name] then assert_shape(what, got_l[name].shape, shapes[name]) end
               assert_close(what, T(got_l[name]), want_l[name], stage_tol(want_l[name]))
            end
         end
         assert_close("final_norm", T(tr.final_norm), want.final_norm, stage_tol(want.final_norm))
         assert_close("trace logits", T(tr.logits), want.logits, TOL)

         -- The trace wrote this position's K/V like a step: the next decode sees it.
         local nxt = TOKENS_A[pos + 2]
         local want_next = sess:forward(nxt, pos + 1)
         assert_close("decode after trace", step(r, 3, pos + 1, { nxt }):logits():totable()[1], want_next, TOL)
      end)

      -- The sink joins the softmax denominator (docs/course.md#per-token, step 2.5.4); that its
      -- mass is then
      -- dropped rather than weighting a value shows up in attn_out of the trace test above.
      it("puts the sink logit in the softmax denominator with a visible share", function()
         local c = cfg
         local pos = 5
         local r = replica()
         step(r, 1, 0, first(TOKENS_A, pos))
         local tr = r:trace(1, TOKENS_A[pos + 1], pos)
         for li = 1, c.n_layers do
            local probs = tr.layers[li].probs:totable()
            for h = 1, c.n_attn_heads do
               local row, keys = probs[h], 0.0
               for t = 1, pos + 1 do keys = keys + row[t] end
               local sink = row[pos + 2]
               -- the sink takes a visible share, and keys + sink is one distribution
               assert(sink > 1e-3, ("layer %d head %d: sink probability %.3g is too small to test"):format(li, h, sink))
               assert(math.abs(keys + sink - 1.0) < 1e-5,
                  ("layer %d head %d: keys %.9g + sink %.9g ~= 1"):format(li, h, keys, sink))
            end
         end
      end)
   end)
end

describe("the sliding window is exercised", function()
   local W_small, W_large, model_small, model_large
   local LARGE = 64 -- at least ctx: nothing is ever masked
   lazy_setup(function()
      model_small = gptoss.synthetic(CFG_GQA, { seed = 3 })
      model_large = gptoss.synthetic(with(CFG_GQA, { sliding_window = LARGE }), { seed = 3 })
      W_small, W_large = load_weights(model_small), load_weights(model_large)
   end)

   it("changes the reference logits exactly from position sliding_window on", function()
      -- same weights, two masks: only the mask can make the difference
      local a = reference_logits(W_small, TOKENS_A)
      local b = reference_logits(W_small, TOKENS_A, with(W_small.cfg, { sliding_window = LARGE }))
      for row = 1, #TOKENS_A do
         local d = max_diff(a[row], b[row])
         if row - 1 < CFG_GQA.sliding_window then
            assert(d == 0, ("pos %d is inside the window yet the logits moved by %.3g"):format(row - 1, d))
         else
            assert(d > 100 * TOL, ("pos %d: window 4 vs %d moves the logits only by %.3g"):format(row - 1, LARGE, d))
         end
      end
   end)

   it("the engine matches the reference under both windows", function()
      for _, m in ipairs { { model_small, W_small, "window 4" }, { model_large, W_large, "window 64" } } do
         local want = reference_logits(m[2], TOKENS_A)
         local got = step(m[1]:replica { device = "cpu", slots = 1, ctx = 32 }, 1, 0, TOKENS_A):logits():totable()
         for row = 1, #TOKENS_A do
            assert_close(("%s, pos %d"):format(m[3], row - 1), got[row], want[row], TOL)
         end
      end
   end)
end)

-- Each variant is a mistake some port made (pitfalls.md). If the correct reference and the variant
-- differ by far more than TOL, an engine with that mistake cannot pass the agreement tests above.
describe("each known mistake moves the logits well beyond the tolerance", function()
   local Ws = {}
   lazy_setup(function()
      for _, case in ipairs(CASES) do Ws[case.cfg] = load_weights(gptoss.synthetic(case.cfg, { seed = case.seed })) end
   end)

   -- Without this the two clamp variants below could pass for a reason other than the clamp.
   it("(the clamp config hits all four clamp sides)", function()
      local limit, seen = CFG_CLAMP.swiglu_limit, { gate_hi = 0, gate_lo = 0, up_hi = 0, up_lo = 0 }
      local s = new_session(Ws[CFG_CLAMP])
      for i, tok in ipairs(TOKENS_A) do
         local _, tr = s:forward(tok, i - 1)
         for _, tl in ipairs(tr.layers) do
            for _, h1 in ipairs(tl.mlp1) do
               for j = 1, #h1 // 2 do
                  local gate, up = h1[2 * j - 1], h1[2 * j]
                  if gate > limit then seen.gate_hi = seen.gate_hi + 1 end
                  if gate < -limit then seen.gate_lo = seen.gate_lo + 1 end
                  if up > limit then seen.up_hi = seen.up_hi + 1 end
                  if up < -limit then seen.up_lo = seen.up_lo + 1 end
               end
            end
         end
      end
      for side, n in pairs(seen) do assert(n > 0, side .. " never clamped") end
   end)

   local variants = {
      { "YaRN bounds rounded", "rounded_yarn", "yarn" },
      { "YaRN off (inv_freq = 1/freq, concentration 1)", "no_yarn", "yarn" },
      { "RoPE pairs (2i, 2i+1)", "interleaved_rope", "gqa" },
      { "RoPE pairs (2i, 2i+1), no YaRN", "interleaved_rope", "mha" },
      { "concentration on cos only", "concentration_cos_only", "gqa" },
      { "GQA head h -> h % Hkv", "gqa_modulo", "gqa" },
      { "window on every layer", "window_all_layers", "gqa" },
      { "window one key too wide", "window_inclusive", "gqa" },
      { "no attention sink", "no_sink", "gqa" },
      { "no attention sink, MHA", "no_sink", "mha" },
      { "router softmax over all experts", "softmax_all_router", "gqa" },
      { "SwiGLU without +1 on up", "no_up_plus_one", "gqa" },
      { "gate clamped from below too", "gate_clamp_both", "clamp" },
      { "no SwiGLU clamp at all", "no_clamp", "clamp" },
   }
   local cfg_of = { gqa = CFG_GQA, mha = CFG_MHA, yarn = CFG_YARN, clamp = CFG_CLAMP }
   for _, v in ipairs(variants) do
      it(v[1], function()
         local W = Ws[cfg_of[v[3]]]
         local good = reference_logits(W, TOKENS_A)
         local bad = reference_logits(W, TOKENS_A, nil, { [v[2]] = true })
         local worst = 0.0
         for row = 1, #TOKENS_A do worst = math.max(worst, (max_diff(good[row], bad[row]))) end
         assert(worst > 100 * TOL, ("%s changes the logits only by %.3g"):format(v[1], worst))
      end)
   end
end)
