-- The GPU engine against the CPU golden (tag: gpu). Runs where a GPU is
-- visible; reported as pending elsewhere. Figures the note quotes are
-- printed on stderr as "[gpu-parity] ...".
local gptoss = require "gptoss"
local parity = require "gptoss.parity"
local helpers = require "helpers"
local expect_error = helpers.expect_error

local has_gpu = #gptoss.devices() > 0

-- A mid-size shape of our own: GQA 4:1, a window of 32 that the 80
-- positions overrun (the ring), 8 experts top-2, a vocabulary that is not a
-- multiple of the GEMM tile.
local MID = {
  vocab_size = 5000, hidden_dim = 256, n_experts = 8, experts_per_token = 2, intermediate_dim = 192,
  n_layers = 4, head_dim = 64, n_attn_heads = 8, n_kv_heads = 2, seq_len = 256,
  initial_context_length = 4096, rope_theta = 150000.0, rope_scaling_factor = 32.0,
  sliding_window = 32, swiglu_limit = 7.0,
}

-- Head shapes that take attention's other staging paths: 18 values per
-- head (not a multiple of 8: staged value by value, rows padded to 20) and
-- 136 (31 keys per staged chunk: several chunks per split of 128 keys).
-- The mid shape with some fields changed.
local function mid_with(changes) return helpers.with(MID, changes) end

local function with_heads(head_dim, n_attn_heads, n_kv_heads)
  return mid_with { head_dim = head_dim, n_attn_heads = n_attn_heads, n_kv_heads = n_kv_heads }
end
local NARROW_HEADS, WIDE_HEADS = with_heads(18, 6, 2), with_heads(136, 4, 2)

local function note(fmt, ...)
  io.stderr:write("[gpu-parity] " .. fmt:format(...) .. "\n")
end

local tokens_for = helpers.token_ids

-- A ragged schedule: slot s starts with a 16-token prefill chunk at step
-- start[s], then decodes one row per step; the batch of a step holds every
-- active slot, so prefill chunks and decode rows of other slots at other
-- positions share it. Calls visit(step, batch, n_rows_per_slot) and feeds
-- back tokens = feed(batch, logits_or_nil).
local function schedule(n_slots, starts, decodes, vocab)
  local steps = {}
  local pos = {}
  local last = 0
  for s = 1, n_slots do last = math.max(last, starts[s] + decodes) end
  for step = 0, last do
    local batch = { slots = {}, positions = {}, tokens = {} }
    for s = 1, n_slots do
      if step == starts[s] then
        for i, t in ipairs(tokens_for(s, 16, vocab)) do
          batch.slots[#batch.slots + 1] = s
          batch.positions[#batch.positions + 1] = i - 1
          batch.tokens[#batch.tokens + 1] = t
        end
        pos[s] = 16
      elseif step > starts[s] and step <= starts[s] + decodes then
        batch.slots[#batch.slots + 1] = s
        batch.positions[#batch.positions + 1] = pos[s]
        batch.tokens[#batch.tokens + 1] = false -- the reference's previous greedy token
        pos[s] = pos[s] + 1
      end
    end
    steps[#steps + 1] = batch
  end
  return steps
end

-- Runs the schedule on both replicas, feeding both the reference's greedy
-- tokens; compare(step, row, gpu_row, cpu_row, batch) checks each row.
local function run_pair(gpu, cpu, steps, compare)
  local fed = {}
  for step, batch in ipairs(steps) do
    local tokens = {}
    for i, t in ipairs(batch.tokens) do tokens[i] = t or fed[batch.slots[i]] end
    batch = { slots = batch.slots, positions = batch.positions, tokens = tokens }
    local hc = cpu:step(batch)
    local hg = gpu:step({ slots = batch.slots, positions = batch.positions, tokens = batch.tokens,
      logits = true })
    local lc, lg = hc:logits(), hg:logits()
    local greedy = hc:tokens()
    for r = 1, #batch.slots do
      compare(step, r, lg[r], lc[r], batch)
      fed[batch.slots[r]] = greedy[r]
    end
  end
end

local function fp32_parity(model, n_slots, starts, decodes, atol, rtol)
  local c = model.config
  local gpu = model:replica { device = 0, slots = n_slots, ctx = 96, weights = "fp32" }
  local cpu = model:replica { slots = n_slots, ctx = 96 }
  local worst, rows = 0, 0
  run_pair(gpu, cpu, schedule(n_slots, starts, decodes, c.vocab_size), function(step, r, g, ref, b)
    local ok, at = g:allclose(ref, atol, rtol)
    assert(ok, ("step %d row %d (slot %d pos %d): logit %d is %.9g on the GPU, %.9g on the CPU")
      :format(step, r, b.slots[r], b.positions[r], (at or 1) - 1, g[at or 1], ref[at or 1]))
    worst = math.max(worst, g:max_abs_diff(ref))
    rows = rows + 1
  end)
  gpu:close()
  cpu:close()
  return worst, rows
end

-- bf16 mode is chaotic under rounding: both engines round GEMM inputs and
-- KV entries to bf16, so once a float that differs by summation order alone
-- (1e-6 relative) rounds the other way, the two engines carry inputs one
-- bf16 step (2^-8) apart, which reach more roundings, and so on; rows then
-- differ at the bf16 noise level (measured: 0.1-0.6% of max |logit|, more
-- after a routing flip). So rows beyond the bar are checked by tracing their
-- slot: at every position where some stage differs beyond accumulation
-- noise (DIVERGE of the stage's max |value|), the first such stage must have
-- a cause the engines do not share:
--  - a routing flip, or a bf16 rounding flip (a value that agrees in fp32
--    within the noise but rounds to different bf16 values) in a stage before
--    it at the same position, or
--  - for an attention stage of layer L: layer L's stored keys or values of
--    an earlier position of the slot that differ once rounded (with an fp32
--    KV cache nothing rounds them: that differ beyond DIVERGE, i.e. that
--    carry an earlier position's divergence).
-- A kernel bug diverges without such a cause and fails.
local DIVERGE = 2e-5
-- stages rounded to bf16 before use: GEMM inputs, and the keys and values
-- stored in a bf16 KV cache (k_rope, qkv's value part)
local ROUNDED = { attn_norm = true, k_rope = true, qkv = true, attn_out = true, ffn_norm = true, swiglu = true,
  final_norm = true }
local ATTENTION = { scores = true, probs = true, attn_out = true }

local flat = helpers.flatten -- a tensor's values, row-major

-- max |a - b| / max |b| over the finite entries (equal infinities agree)
local function divergence(a, b)
  local d, m = 0, 0
  for i = 1, #b do
    if a[i] ~= b[i] then d = math.max(d, math.abs(a[i] - b[i])) end
    if b[i] == b[i] and math.abs(b[i]) ~= math.huge then m = math.max(m, math.abs(b[i])) end
  end
  return m > 0 and d / m or d
end

-- whether what a KV cache stores of a stage (elements from `from` on) comes
-- apart between the engines: rounds apart in a bf16 cache; in an fp32 one,
-- which rounds nothing, differs beyond DIVERGE
local function stored_apart(fa, fb, from, kv)
  if kv == "bf16" then return parity.rounds_apart(fa, fb, from) ~= nil end
  return divergence(table.move(fa, from, #fa, 1, {}), table.move(fb, from, #fb, 1, {})) > DIVERGE
end

-- One traced row on both engines: the first stage beyond DIVERGE (first,
-- first_layer, first_stage), a routing or rounding flip before it (flip),
-- and the layers whose stored key or value comes apart (kv_apart[l]).
local function examine(tg, tc, c, kv)
  local r = { kv_apart = {} }
  local values_from = (c.n_attn_heads + c.n_kv_heads) * c.head_dim + 1 -- qkv's value part
  local function stage(name, l, a, b)
    local fa, fb = flat(a), flat(b)
    local stored = name == "k_rope" or name == "qkv"
    if l and stored and stored_apart(fa, fb, name == "qkv" and values_from or 1, kv) then
      r.kv_apart[l] = true
    end
    if r.first then return end
    local where = l and ("layer %d %s"):format(l, name) or name
    local d = divergence(fa, fb)
    if name == "topk_idx" and d > 0 and not r.flip then
      for i = 1, #fb do
        if fa[i] ~= fb[i] then
          r.flip = ("routing flip at %s: GPU expert %d, CPU expert %d"):format(where, fa[i], fb[i])
          break
        end
      end
    end
    if d > DIVERGE then
      r.first, r.first_layer, r.first_stage = ("%s (%.2g of its max)"):format(where, d), l, name
    elseif ROUNDED[name] and not (stored and kv ~= "bf16") and not r.flip then
      local i = parity.rounds_apart(fa, fb, name == "qkv" and values_from or 1)
      if i then r.flip = ("bf16 rounding flip at %s element %d: GPU %.9g, CPU %.9g"):format(where, i, fa[i], fb[i]) end
    end
  end
  stage("embedding", nil, tg.embedding, tc.embedding)
  for l, lc in ipairs(tc.layers) do
    for _, name in ipairs(parity.STAGES) do stage(name, l, tg.layers[l][name], lc[name]) end
  end
  stage("final_norm", nil, tg.final_norm, tc.final_norm)
  stage("logits", nil, tg.logits, tc.logits)
  return r
end

-- Traces positions last .. 0 of a slot (a trace at p keeps the positions
-- below p) and checks the cause of every divergence. Returns a summary, and
-- a failure message or nil.
local function explain_slot(gpu, cpu, c, slot, fed_tokens, last)
  local seen = {}
  for p = last, 0, -1 do
    seen[p] = examine(gpu:trace(slot, fed_tokens[p], p), cpu:trace(slot, fed_tokens[p], p), c, gpu.kv)
  end
  local origin, diverging, by_history = nil, 0, 0
  for p = 0, last do
    local e = seen[p]
    if e.first then
      diverging = diverging + 1
      local cause = e.flip
      if not cause and ATTENTION[e.first_stage] then
        for q = p - 1, 0, -1 do
          if seen[q].kv_apart[e.first_layer] then
            cause = ("layer %d's stored keys or values of position %d round apart"):format(e.first_layer, q)
            by_history = by_history + 1
            break
          end
        end
      end
      if not cause then
        return nil, ("position %d: %s, with no routing or rounding flip before it and no earlier stored "
          .. "key or value of that layer rounding apart"):format(p, e.first)
      end
      origin = origin or ("diverges first at position %d, %s: %s"):format(p, e.first, cause)
    end
  end
  if not origin then return nil, "no stage diverges when traced" end
  return ("%s; %d diverging positions, %d of them through the stored KV"):format(origin, diverging, by_history)
end

local function bf16_parity(model, n_slots, starts, decodes, kv, ctx)
  local c = model.config
  local gpu = model:replica { device = 0, slots = n_slots, ctx = ctx, weights = "bf16", kv = kv }
  local cpu = model:replica { slots = n_slots, ctx = ctx, weights = "bf16", kv = kv }
  local zeros = gptoss.tensor.zeros { c.vocab_size }
  local worst, rows, over = 0, 0, {}
  local fed = {} -- fed[slot][pos]: the token each position ran with
  for s = 1, n_slots do fed[s] = {} end
  run_pair(gpu, cpu, schedule(n_slots, starts, decodes, c.vocab_size), function(_, r, g, ref, b)
    local rel = g:max_abs_diff(ref) / ref:max_abs_diff(zeros)
    worst = math.max(worst, rel)
    rows = rows + 1
    fed[b.slots[r]][b.positions[r]] = b.tokens[r]
    if rel > 1e-3 then over[b.slots[r]] = math.max(over[b.slots[r]] or 0, b.positions[r]) end
  end)
  local failures, n_over = {}, 0
  for s = 1, n_slots do
    if over[s] then
      n_over = n_over + 1
      local why, failure = explain_slot(gpu, cpu, c, s, fed[s], over[s])
      note("bf16: slot %d (rows up to position %d over 1e-3): %s", s, over[s], why or failure)
      if failure then failures[#failures + 1] = ("slot %d: %s"):format(s, failure) end
    end
  end
  gpu:close()
  cpu:close()
  assert(#failures == 0, table.concat(failures, "\n"))
  return worst, rows, n_over
end

describe("GPU engine #gpu", function()
  if not has_gpu then
    pending("no GPU visible to this build (gptoss.devices() is empty)")
    return
  end
  after_each(helpers.cleanup)

  describe("fp32 mode equals the CPU golden", function()
    it("7m: every logit within atol 1e-6, rtol 1e-5 (the course checker's thresholds)", function()
      local worst, rows = fp32_parity(gptoss.synthetic("7m", { seed = 5 }), 4, { 0, 3, 10, 25 }, 64,
        1e-6, 1e-5)
      note("fp32 7m: %d rows, max |dlogit| %.3g", rows, worst)
    end)

    it("mid-size: every logit within atol 1e-5, rtol 1e-5", function()
      local worst, rows = fp32_parity(gptoss.synthetic(MID, { seed = 6 }), 4, { 0, 2, 9, 30 }, 64,
        1e-5, 1e-5)
      note("fp32 mid: %d rows, max |dlogit| %.3g", rows, worst)
    end)

    it("20b-2l: every logit within atol 1e-5, rtol 1e-5", function()
      local worst, rows = fp32_parity(gptoss.synthetic("20b-2l", { seed = 7 }), 3, { 0, 4, 20 }, 64,
        1e-5, 1e-5)
      note("fp32 20b-2l: %d rows, max |dlogit| %.3g", rows, worst)
    end)
  end)

  describe("bf16 mode against the CPU's bf16 mode: max |dlogit| / max |logit| <= 1e-3 per row, "
    .. "or a divergence that starts at a routing or bf16 rounding flip", function()
    -- { name, shape, slots, KV cache, ctx, decode steps }; at ctx 256 the
    -- keys of the mid shape's full layers come in splits of 128, which
    -- attention folds in a kernel of its own past the first 128 positions
    for _, case in ipairs { { "7m", "7m", 4 }, { "mid", MID, 4 }, { "20b-2l", "20b-2l", 3 },
      { "heads of 18", NARROW_HEADS, 2 }, { "heads of 136", WIDE_HEADS, 2 },
      { "7m, fp32 KV cache", "7m", 4, "fp32" },
      { "mid, positions past one attention split", MID, 2, "bf16", 256, 140 } } do
      it(case[1], function()
        local worst, rows, slots = bf16_parity(gptoss.synthetic(case[2], { seed = 8 }), case[3],
          { 0, 3, 10, 25 }, case[6] or 64, case[4] or "bf16", case[5] or 96)
        note("bf16 %s: %d rows, worst max|d|/max|logit| %.3g; %d slots with rows over 1e-3, each explained",
          case[1], rows, worst, slots)
      end)
    end
  end)

  -- A sequence alone or among n - 1 others, for each { mode, n } of cases,
  -- gives the same tokens and logits.
  local function batch_invariance(m, label, cases)
    local c = m.config
    for _, case in ipairs(cases) do
      local mode, n = case[1], case[2]
      local alone = m:replica { device = 0, slots = 1, ctx = 64, weights = mode, kv = mode }
      local crowd = m:replica { device = 0, slots = n, ctx = 64, weights = mode, kv = mode }
      local prompt = tokens_for(100, 16, c.vocab_size)
      local function prefill(rep, slot, toks)
        local b = { slots = {}, positions = {}, tokens = {} }
        for i, t in ipairs(toks) do
          b.slots[i], b.positions[i], b.tokens[i] = slot, i - 1, t
        end
        return b
      end
      -- the crowd prefills its n - 1 others first, then runs the target among them
      for s = 2, n do crowd:step(prefill(crowd, s, tokens_for(s, 16, c.vocab_size))):tokens() end
      local ha = alone:step { slots = prefill(nil, 1, prompt).slots, positions = prefill(nil, 1, prompt).positions,
        tokens = prompt, logits = true }
      local hc = crowd:step { slots = prefill(nil, 1, prompt).slots, positions = prefill(nil, 1, prompt).positions,
        tokens = prompt, logits = true }
      local worst = ha:logits():max_abs_diff(hc:logits())
      local ta, tc = ha:tokens()[16], hc:tokens()[16]
      assert.are.equal(ta, tc)
      for pos = 16, 47 do
        local b = { slots = { 1 }, positions = { pos }, tokens = { ta }, logits = true }
        for s = 2, n do
          b.slots[s], b.positions[s], b.tokens[s] = s, pos, (s * 7 + pos) % c.vocab_size
        end
        local h1 = alone:step { slots = { 1 }, positions = { pos }, tokens = { ta }, logits = true }
        local h2 = crowd:step(b)
        local l1, l2 = h1:logits()[1], h2:logits()[1]
        worst = math.max(worst, l1:max_abs_diff(l2))
        assert(l1:allclose(l2, 1e-5, 0), ("%s: position %d: logits differ by %.3g"):format(mode, pos,
          l1:max_abs_diff(l2)))
        ta, tc = h1:tokens()[1], h2:tokens()[1]
        assert.are.equal(ta, tc)
      end
      note("batch invariance %s %s: max |dlogit| alone vs %d rows %.3g", mode, label, n, worst)
      alone:close()
      crowd:close()
    end
  end

  it("batch invariance: a sequence alone or among 63 (127, 255, 511) others gives the same tokens and logits",
    function()
      -- bf16: the experts' GEMMs take 16-row streaming tiles at 64 rows, two
      -- of them for many experts at 128, 32-row staged tiles at 256 and
      -- 64-row ones at 512, with row groups past the expert's last row; the
      -- dense GEMMs of 128 rows and more take the tiled kernel, or the staged
      -- one where its 64-row tiles fill a wave (the unembedding, and the qkv
      -- projection at 512 rows). Alone, every GEMM streams 16-row tiles.
      batch_invariance(gptoss.synthetic("20b-2l", { seed = 9 }), "20b-2l",
        { { "fp32", 64 }, { "bf16", 64 }, { "bf16", 128 }, { "bf16", 256 }, { "bf16", 512 } })
    end)

  it("batch invariance at row counts a step pads to its graph's bucket, its last row repeated", function()
    -- 5 rows launch 8, 37 launch 64, 77 launch 80 (gptoss_gpu_padded_rows): the repeated
    -- rows write the last row's keys and values again, bit for bit, and draw nothing read
    batch_invariance(gptoss.synthetic("20b-2l", { seed = 12 }), "20b-2l, padded",
      { { "bf16", 5 }, { "bf16", 37 }, { "bf16", 77 } })
  end)

  it("batch invariance where the experts' staged tiles take their checked copies", function()
    -- k not a multiple of a stage's 64: mlp1's 196 (nor of 8: element by
    -- element) and mlp2's 152 (16-byte copies, zeros past k); 8 experts of
    -- 2 per token give 32-row tiles at 128 rows and 64-row ones at 256
    batch_invariance(gptoss.synthetic(mid_with { hidden_dim = 196, intermediate_dim = 152 }, { seed = 10 }),
      "hidden 196, experts 152",
      { { "bf16", 128 }, { "bf16", 256 } })
  end)

  it("batch invariance where attention's blocks take several splits of a row", function()
    -- ctx 256: the full layers' keys past position 127 come in two splits.
    -- Alone, a row's 8 KV heads by 2 splits are 16 blocks of one split;
    -- among 1024 rows (16384 blocks) each block takes both of its row's.
    local m = gptoss.synthetic("20b-2l", { seed = 11 })
    local c, n, len = m.config, 1024, 200
    local alone = m:replica { device = 0, slots = 1, ctx = 256, weights = "bf16", kv = "bf16" }
    local crowd = m:replica { device = 0, slots = n, ctx = 256, weights = "bf16", kv = "bf16" }
    local prompt = tokens_for(200, len, c.vocab_size)
    local last
    for pos = 0, len - 1 do
      local b = { slots = {}, positions = {}, tokens = {} }
      for s = 1, n do
        b.slots[s], b.positions[s] = s, pos
        b.tokens[s] = s == 1 and prompt[pos + 1] or (s * 7919 + pos * 104729) % c.vocab_size
      end
      if pos == len - 1 then b.logits = { 1 } end
      last = crowd:step(b)
    end
    local ha -- alone, the prompt in steps of up to 128 rows (the replica's chunk)
    for first = 0, len - 1, 128 do
      local b = { slots = {}, positions = {}, tokens = {} }
      for pos = first, math.min(first + 127, len - 1) do
        b.slots[#b.slots + 1], b.positions[#b.positions + 1], b.tokens[#b.tokens + 1] = 1, pos, prompt[pos + 1]
      end
      if first + 128 >= len then b.logits = { #b.slots } end
      ha = alone:step(b)
    end
    local worst = ha:logits()[1]:max_abs_diff(last:logits()[1])
    note("batch invariance bf16 20b-2l at position %d (two attention splits): max |dlogit| alone vs %d rows %.3g",
      len - 1, n, worst)
    assert.are.equal(0, worst)
    alone:close()
    crowd:close()
  end)

  describe("mxfp4 replicas give the bf16 replica's logits and tokens bit for bit", function()
    -- decode steps of n rows then one that adds a prefill chunk: n rows take
    -- the experts' streaming tiles (up to 16 a expert), the staged ones of
    -- 32 rows or of 64
    local function same_bits(m, label, sizes)
      local c = m.config
      for _, n in ipairs(sizes) do
        local function replica(weights)
          return m:replica { device = 0, slots = n, ctx = 32, rows = n + 8, weights = weights, kv = "bf16" }
        end
        local bf16, mx = replica "bf16", replica "mxfp4"
        assert.are.equal("mxfp4", mx.weights)
        for step = 0, 3 do
          local b = { slots = {}, positions = {}, tokens = {}, logits = true }
          for s = 1, n do
            b.slots[s], b.positions[s], b.tokens[s] = s, step, (s * 131 + step * 7) % c.vocab_size
          end
          if step == 3 then -- slot 1 prefills 8 positions more
            for i = 1, 8 do
              b.slots[n + i], b.positions[n + i], b.tokens[n + i] = 1, 3 + i, (i * 977) % c.vocab_size
            end
          end
          local hb, hm = bf16:step(b), mx:step(b)
          local d = hb:logits():max_abs_diff(hm:logits())
          assert(d == 0, ("%s, %d rows, step %d: logits differ by %.3g"):format(label, n, step, d))
          assert.are.same(hb:tokens(), hm:tokens())
        end
        assert.is_true(mx.memory.weights_mxfp4 > 0 and mx.memory.weights < bf16.memory.weights)
        note("mxfp4 = bf16 bits: %s at %d rows; weights %.1f MiB vs %.1f MiB", label, n,
          mx.memory.weights / 2 ^ 20, bf16.memory.weights / 2 ^ 20)
        bf16:close()
        mx:close()
      end
    end

    it("7m", function() same_bits(gptoss.synthetic("7m", { seed = 21 }), "7m", { 1, 64, 256 }) end)
    it("20b-2l", function()
      same_bits(gptoss.synthetic("20b-2l", { seed = 22 }), "20b-2l", { 1, 4, 64, 256, 512 })
    end)
    it("dims that are no multiple of 64 (nor 32: blocks end part empty)", function()
      same_bits(gptoss.synthetic(mid_with { hidden_dim = 196, intermediate_dim = 152 }, { seed = 23 }),
        "hidden 196, experts 152", { 3, 128, 256 })
    end)
  end)

  -- two bf16 replicas of m with 4 slots, `slot` sampling alike in both: one to be fed on
  -- the device, one told its tokens
  local function fed_and_told(m, slot, sampling)
    local fed = m:replica { device = 0, slots = 4, ctx = 64, weights = "bf16", kv = "bf16" }
    local told = m:replica { device = 0, slots = 4, ctx = 64, weights = "bf16", kv = "bf16" }
    for _, r in ipairs { fed, told } do r:sampling(slot, sampling) end
    return fed, told
  end

  it("feeds a step the tokens the latest one sampled on the device, enqueued before they are read", function()
    local m = gptoss.synthetic("20b-2l", { seed = 12 })
    local slots, first = { 1, 2, 3, 4 }, tokens_for(12, 4, m.config.vocab_size)
    local function at(pos) return { pos, pos, pos, pos } end
    local fed, told = fed_and_told(m, 3, { temperature = 1.5, top_k = 40, seed = 4 })
    local h = fed:step { slots = slots, positions = at(0), tokens = first }
    local ids = told:step { slots = slots, positions = at(0), tokens = first }:tokens()
    for pos = 1, 24 do
      local nxt = fed:step { slots = slots, positions = at(pos), tokens = h } -- before h is read
      assert.are.same(ids, h:tokens())
      ids = told:step { slots = slots, positions = at(pos), tokens = ids }:tokens()
      h = nxt
    end
    assert.are.same(ids, h:tokens())
    -- and the logits of a fed step are those of the same step told its tokens
    local lf = fed:step { slots = slots, positions = at(25), tokens = h, logits = true }:logits()
    local lt = told:step { slots = slots, positions = at(25), tokens = ids, logits = true }:logits()
    assert.are.equal(0, lf:max_abs_diff(lt))
    fed:close()
    told:close()
  end)

  it("says when a step is done without waiting (h:ready), and its tokens are the waited ones", function()
    local m = gptoss.synthetic("20b-2l", { seed = 15 })
    local r = m:replica { device = 0, slots = 4, ctx = 64, weights = "bf16", kv = "bf16" }
    local slots, first = { 1, 2, 3, 4 }, tokens_for(15, 4, m.config.vocab_size)
    local h = r:step { slots = slots, positions = { 0, 0, 0, 0 }, tokens = first }
    local polls, deadline = 0, gptoss.clock() + 30
    while not h:ready() and gptoss.clock() < deadline do polls = polls + 1 end
    assert.is_true(h:ready(), "the step never became ready")
    local ids = h:tokens()
    assert.is_true(h:ready())
    local again = r:step { slots = slots, positions = { 0, 0, 0, 0 }, tokens = first }:tokens()
    assert.are.same(again, ids)
    io.stderr:write(("[gpu-ready] %d polls before the first step was ready\n"):format(polls))
    r:close()
    assert.is_true(h:ready())
  end)

  it("feeds each row from any row of the latest step (from = h), enqueued before it is read", function()
    local m = gptoss.synthetic("20b-2l", { seed = 14 })
    local fed, told = fed_and_told(m, 2, { temperature = 1.5, seed = 6 })
    local prev = { 1, 2, 3, 4 }
    local h = fed:step { slots = prev, positions = { 0, 0, 0, 0 }, tokens = tokens_for(14, 4, m.config.vocab_size) }
    local ids = told:step { slots = prev, positions = { 0, 0, 0, 0 }, tokens = tokens_for(14, 4, m.config.vocab_size) }:tokens()
    -- each step's rows in another order; slot 4 told its id; the last steps leave slot 3 out
    local orders = { { 4, 2, 3, 1 }, { 3, 1, 4, 2 }, { 2, 4, 1, 3 }, { 1, 2, 4 }, { 4, 1, 2 } }
    for pos = 1, 20 do
      local order = pos >= 18 and orders[4 + pos % 2] or orders[(pos - 1) % 3 + 1]
      local bf, bt = helpers.fed_and_told(prev, order, pos, ids, h, 4)
      local nxt = fed:step(bf) -- before h is read
      assert.are.same(ids, h:tokens())
      ids = told:step(bt):tokens()
      h, prev = nxt, order
    end
    assert.are.same(ids, h:tokens())
    fed:close()
    told:close()
  end)

  it("replays captured forward passes with the same results as launching kernel by kernel", function()
    -- profiling launches every kernel itself; plain steps replay graphs
    local m = gptoss.synthetic("20b-2l", { seed = 13 })
    local direct = m:replica { device = 0, slots = 4, ctx = 160, weights = "bf16", kv = "bf16" }
    local graphed = m:replica { device = 0, slots = 4, ctx = 160, weights = "bf16", kv = "bf16" }
    direct:profile(true)
    local toks = { 1, 2, 3, 4 }
    for pos = 0, 140, 7 do -- several attention split counts, and graphs reused
      local b = { slots = { 1, 2, 3, 4 }, positions = {}, tokens = toks, logits = true }
      for s = 1, 4 do b.positions[s] = pos end
      local hd, hg = direct:step(b), graphed:step(b)
      assert.are.equal(0, hd:logits():max_abs_diff(hg:logits()))
      toks = hg:tokens()
      assert.are.same(hd:tokens(), toks)
      if pos + 7 <= 140 then -- the positions in between, as one 24-row step
        local fill = { slots = {}, positions = {}, tokens = {} }
        for s = 1, 4 do
          for p = pos + 1, pos + 6 do
            local i = #fill.slots + 1
            fill.slots[i], fill.positions[i], fill.tokens[i] = s, p, (s * 31 + p) % m.config.vocab_size
          end
        end
        direct:step(fill)
        graphed:step(fill)
      end
    end
    -- more shapes than the 16 graphs a replica keeps: evictions, recaptures
    for _ = 1, 2 do
      for n = 1, 20 do
        local b = { slots = {}, positions = {}, tokens = {}, logits = true }
        for i = 1, n do b.slots[i], b.positions[i], b.tokens[i] = 1, i - 1, (i * 7 + n) % m.config.vocab_size end
        direct:reset(1)
        graphed:reset(1)
        assert.are.equal(0, direct:step(b):logits():max_abs_diff(graphed:step(b):logits()))
      end
    end
    direct:close()
    graphed:close()
  end)

  it("uploads a model file's or a checkpoint's weights to the synthetic model's bits: bf16 tiled or not, MXFP4",
    function()
    -- 8 experts, top 2: replicas of up to 64 slots tile the experts'
    -- weights (gptoss_gpu_tiled), of 65 keep rows of k. An intermediate
    -- width of 100 leaves tiles part empty (mlp1 200 x 256, mlp2 256 x 100,
    -- whose rows are not whole 16-byte pieces either). Two rows make the
    -- upload's staging small, so tensors cross it in many pieces.
    local config = with_heads(18, 6, 2)
    config.intermediate_dim = 100
    local m = gptoss.synthetic(config, { seed = 14 })
    local path = helpers.tmp()
    m:save(path)
    local file = gptoss.load(path)
    local dir = helpers.tmp() .. ".hf"
    m:save(dir, { format = "hf" })
    local checkpoint = gptoss.load(dir)
    local function opts(slots, weights)
      return { device = 0, slots = slots, ctx = 32, rows = 2, weights = weights or "bf16", kv = "bf16" }
    end
    local replicas = { m:replica(opts(2)), file:replica(opts(2)), m:replica(opts(65)), file:replica(opts(65)),
      checkpoint:replica(opts(2)), m:replica(opts(2, "mxfp4")), file:replica(opts(2, "mxfp4")),
      checkpoint:replica(opts(65, "mxfp4")) }
    for pos = 0, 2 do
      local b = { slots = { 1, 2 }, positions = { pos, pos }, tokens = { 3 + pos, 4999 - pos }, logits = true }
      local first = replicas[1]:step(b)
      for i = 2, #replicas do
        local h = replicas[i]:step(b)
        assert.are.equal(0, first:logits():max_abs_diff(h:logits()))
        assert.are.same(first:tokens(), h:tokens())
      end
    end
    for _, r in ipairs(replicas) do r:close() end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("samples on the GPU exactly as gptoss.sampler does on the same logits", function()
    local m = gptoss.synthetic("7m", { seed = 11 })
    local r = m:replica { device = 0, slots = 6, ctx = 64 }
    local settings = {
      false, { temperature = 1.0, seed = 1 }, { temperature = 0.7, top_k = 20, seed = 2 },
      { temperature = 1.3, top_p = 0.9, seed = 3 }, { temperature = 1.0, min_p = 0.05, seed = 4 },
      { temperature = 2.0, top_k = 50, top_p = 0.5, min_p = 0.01, seed = 5 },
    }
    for s, opts in ipairs(settings) do r:sampling(s, opts or nil) end
    local draws = 0
    for pos = 0, 40 do
      local b = { slots = {}, positions = {}, tokens = {}, logits = true }
      for s = 1, #settings do
        b.slots[s], b.positions[s], b.tokens[s] = s, pos, (pos * 31 + s * 17) % 201088
      end
      local h = r:step(b)
      local got, logits = h:tokens(), h:logits()
      for s, opts in ipairs(settings) do
        local want
        if opts then
          local o = helpers.with(opts)
          want = gptoss.sampler(o):sample(logits[s], pos + 1)
        else
          want = logits[s]:argmax() - 1
        end
        assert(got[s] == want, ("slot %d position %d: GPU drew %d, the CPU sampler %d"):format(s, pos,
          got[s], want))
        draws = draws + 1
      end
    end
    note("sampler: %d draws identical to the CPU sampler", draws)
    r:close()
  end)

  it("traces the golden's stages with the golden's values", function()
    local m = gptoss.synthetic("7m", { seed = 12 })
    local gpu = m:replica { device = 0, slots = 1, ctx = 64, weights = "fp32" }
    local cpu = m:replica { slots = 1, ctx = 64 }
    local toks = tokens_for(3, 20, 201088)
    local worst = {}
    for pos = 0, #toks - 1 do
      local tg, tc = gpu:trace(1, toks[pos + 1], pos), cpu:trace(1, toks[pos + 1], pos)
      local function cmp(name, a, b)
        assert(a, "GPU trace lacks " .. name)
        local ok, at = a:allclose(b, 1e-6, 1e-5)
        assert(ok, ("position %d stage %s: element %d (flat) is beyond atol 1e-6 + rtol 1e-5; max |d| %.3g")
          :format(pos, name, at or -1, a:max_abs_diff(b)))
        worst[name] = math.max(worst[name] or 0, a:max_abs_diff(b))
      end
      for name, t in pairs(tc) do
        if name ~= "layers" then cmp(name, tg[name], t) end
      end
      for l, stages in ipairs(tc.layers) do
        for name, t in pairs(stages) do cmp(("layer %d %s"):format(l, name), tg.layers[l][name], t) end
      end
    end
    local names = {}
    for k in pairs(worst) do names[#names + 1] = k end
    table.sort(names, function(a, b) return worst[a] > worst[b] end)
    note("trace 7m fp32, worst stages: %s %.3g, %s %.3g, %s %.3g", names[1], worst[names[1]],
      names[2], worst[names[2]], names[3], worst[names[3]])
    gpu:close()
    cpu:close()
  end)

  describe("r:fork copies a slot on the device as a prefill of the same tokens would, bit for bit", function()
    -- a window of 8 and chunks of 4: windowed layers keep a ring of 11 positions of the ctx of 64
    local RING = mid_with { vocab_size = 1000, sliding_window = 8 }
    local toks = tokens_for(31, 30, 1000)
    local tail = tokens_for(32, 12, 1000)

    -- slot's rows for toks[first..last] at their positions, in steps of at most chunk rows
    local function feed(r, slot, list, first, last, chunk)
      for at = first, last, chunk do
        local b = { slots = {}, positions = {}, tokens = {} }
        for i = at, math.min(at + chunk - 1, last) do
          b.slots[#b.slots + 1], b.positions[#b.positions + 1], b.tokens[#b.tokens + 1] = slot, i - 1, list[i]
        end
        r:step(b)
      end
    end

    -- the logits of slot continuing at position `at` with tail: a chunk of 3 rows, then one a step
    local function continue(r, slot, at)
      local out = {}
      local function step(rows)
        local b = { slots = {}, positions = {}, tokens = {}, logits = true }
        for k, i in ipairs(rows) do b.slots[k], b.positions[k], b.tokens[k] = slot, at + i - 1, tail[i] end
        local lg = r:step(b):logits()
        for k = 1, #rows do out[#out + 1] = lg[k] end
      end
      step { 1, 2, 3 }
      for i = 4, #tail do step { i } end
      return out
    end

    local function same(r, slot, ref, length)
      ref:reset(1)
      feed(ref, 1, toks, 1, length, 4)
      local want = continue(ref, 1, length)
      for i, t in ipairs(continue(r, slot, length)) do
        assert(t:max_abs_diff(want[i]) == 0, ("length %d: row %d differs by %.3g"):format(length, i,
          t:max_abs_diff(want[i])))
      end
    end

    for _, mode in ipairs { "bf16", "fp32" } do
      it(mode .. " weights and KV, across the window's ring", function()
        local m = gptoss.synthetic(RING, { seed = 31 })
        local opts = { device = 0, slots = 3, ctx = 64, rows = 8, chunk = 4, weights = mode, kv = mode }
        local r, ref = m:replica(opts), m:replica(opts)
        -- slot 1 written up to 29, past its ring of 11: it holds positions 19..29, forks of length 26 or
        -- more find the 7 keys before them there
        feed(r, 1, toks, 1, 30, 4)
        for _, length in ipairs { 30, 27, 26 } do
          r:fork(1, 2, length)
          assert.are.equal(length, r:length(2))
          same(r, 2, ref, length)
        end
        -- enqueued in step order: a step of slot 1, the fork, a step of slot 2, nothing waited for
        r:fork(1, 3) -- a copy of the source to restore it from
        local h = r:step { slots = { 1 }, positions = { 30 }, tokens = { tail[1] } }
        r:fork(1, 2)
        local b = { slots = { 2 }, positions = { 31 }, tokens = { tail[2] }, logits = true }
        local got = r:step(b):logits()
        ref:reset(1)
        feed(ref, 1, toks, 1, 30, 4)
        ref:step { slots = { 1 }, positions = { 30 }, tokens = { tail[1] } }
        b.slots = { 1 }
        assert.are.equal(0, got:max_abs_diff(ref:step(b):logits()))
        assert.are.equal(1, #h:tokens())
        -- a slot that went back (to 27: its ring still holds positions from 19 on): lengths from 26
        r:fork(3, 1)
        r:step { slots = { 1 }, positions = { 27 }, tokens = { toks[28] } }
        assert.are.equal(28, r:length(1))
        r:fork(1, 2, 26)
        same(r, 2, ref, 26)
        -- a source still within its ring: any length
        r:reset(3)
        feed(r, 3, toks, 1, 10, 4)
        r:fork(3, 2, 2)
        same(r, 2, ref, 2)
        -- further back than the ring reaches: refused, naming it, nothing changed
        r:fork(1, 2, 28)
        expect_error(function() r:fork(1, 2, 25) end,
          "fork: a fork of length 25 needs the keys of positions 18..24 of slot 1, but its windowed layers keep a "
          .. "ring of the last 11 positions written (sliding_window 8 + chunk 4 - 1), which holds positions from 19 "
          .. "on: forks of length 26 or more (or 0) can be copied")
        assert.are.equal(28, r:length(2))
        -- an empty fork, and the slot filled again from position 0
        r:fork(1, 2, 0)
        assert.are.equal(0, r:length(2))
        feed(r, 2, toks, 1, 5, 4)
        same(r, 2, ref, 5)
        r:close()
        ref:close()
      end)
    end

    it("refuses a step that goes back further than the ring reaches; one within it equals a fresh prefill", function()
      local m = gptoss.synthetic(RING, { seed = 32 })
      local opts = { device = 0, slots = 1, ctx = 64, rows = 8, chunk = 4 }
      local r, ref = m:replica(opts), m:replica(opts)
      feed(r, 1, toks, 1, 30, 4)
      expect_error(function() r:step { slots = { 1 }, positions = { 20 }, tokens = { 5 } } end,
        "step: positions[1] = 20 needs the keys of positions 13..19 of slot 1, but its windowed layers keep a ring of "
        .. "the last 11 positions written (sliding_window 8 + chunk 4 - 1), which holds positions from 19 on: rows "
        .. "can go back to position 26 or start again at 0")
      assert.are.equal(30, r:length(1))
      same(r, 1, ref, 26)
      feed(r, 1, toks, 1, 3, 4) -- starting again at 0, without a reset
      same(r, 1, ref, 3)
      r:close()
      ref:close()
    end)

    it("says how far back a slot can go (r:rewind_limit), the figure its refusals name", function()
      local r <close> = gptoss.synthetic(RING, { seed = 33 }):replica { device = 0, slots = 2, ctx = 64, rows = 8,
        chunk = 4 }
      -- within its ring of 11 positions a slot goes back anywhere
      feed(r, 1, toks, 1, 11, 4)
      assert.are.same({ 0, 0 }, { r:rewind_limit(1), r:rewind_limit(2) })
      -- written up to 29 (steps enqueued, none waited for): the ring holds 19..29, rows may start at 26
      feed(r, 1, toks, 12, 30, 4)
      local limit = r:rewind_limit(1)
      assert.are.equal(19 + 8 - 1, limit)
      expect_error(function() r:step { slots = { 1 }, positions = { limit - 1 }, tokens = { 5 } } end,
        "step: positions[1] = 25 needs the keys of positions 18..24 of slot 1, but its windowed layers keep a ring of "
        .. "the last 11 positions written (sliding_window 8 + chunk 4 - 1), which holds positions from 19 on: rows "
        .. ("can go back to position %d or start again at 0"):format(limit))
      expect_error(function() r:fork(1, 2, limit - 1) end,
        ("forks of length %d or more (or 0) can be copied"):format(limit))
      -- a fork holds the source's ring, and so its limit; one of length 0, or a reset, none
      r:fork(1, 2, limit)
      assert.are.equal(limit, r:rewind_limit(2))
      r:fork(1, 2, 0)
      assert.are.equal(0, r:rewind_limit(2))
      -- going back to the limit keeps it; starting again at 0 clears it
      r:step { slots = { 1 }, positions = { limit }, tokens = { 5 } }
      assert.are.same({ limit + 1, limit }, { r:length(1), r:rewind_limit(1) })
      r:step { slots = { 1 }, positions = { 0 }, tokens = { 5 } }
      assert.are.same({ 1, 0 }, { r:length(1), r:rewind_limit(1) })
      feed(r, 1, toks, 1, 30, 4)
      r:reset(1)
      assert.are.equal(0, r:rewind_limit(1))
      expect_error(function() r:rewind_limit(3) end, "rewind_limit: slot 3 is out of range 1..2")
    end)
  end)

  describe("per-slot sampling controls on the device", function()
    local INF = math.huge
    -- ids 0..9 banned, 77 lifted: what a greedy slot chooses changes
    local bias = { [77] = 8, [1000] = -1.5 }
    for id = 0, 9 do bias[id] = -INF end
    local settings = {
      false, { temperature = 0, logit_bias = bias }, { temperature = 1.0, seed = 1, logit_bias = bias },
      { temperature = 0.7, top_k = 20, seed = 2, logit_bias = bias },
      { temperature = 1.3, top_p = 0.9, min_p = 0.02, seed = 3, logit_bias = { [5] = 3, [6] = -INF } },
      { temperature = 0, logprobs = 5 }, { temperature = 1.0, seed = 4, logprobs = 20, logit_bias = bias },
      { temperature = 0.8, top_k = 50, seed = 5, logprobs = 0 },
    }

    -- steps of every slot at positions 0..40 on r, and on plain (the same slots, no settings)
    local function run_both(r, plain, visit)
      for pos = 0, 40 do
        local b = { slots = {}, positions = {}, tokens = {}, logits = true }
        for s = 1, #settings do b.slots[s], b.positions[s], b.tokens[s] = s, pos, (pos * 31 + s * 17) % 201088 end
        visit(pos, r:step(b), plain:step(b))
      end
    end

    it("draws as gptoss.sampler does with the same logit_bias, restores the logits, leaves other slots alone",
      function()
      local m = gptoss.synthetic("7m", { seed = 11 })
      local r = m:replica { device = 0, slots = #settings, ctx = 64 }
      local plain = m:replica { device = 0, slots = #settings, ctx = 64 }
      for s, opts in ipairs(settings) do r:sampling(s, opts or nil) end
      local draws, changed = 0, 0
      run_both(r, plain, function(pos, h, hp)
        local got, logits = h:tokens(), h:logits()
        assert.are.equal(0, logits:max_abs_diff(hp:logits())) -- the model's logits, bias taken back
        for s, opts in ipairs(settings) do
          local want = opts and gptoss.sampler(opts):sample(logits[s], pos + 1) or logits[s]:argmax() - 1
          assert(got[s] == want, ("slot %d position %d: GPU drew %d, the CPU sampler %d"):format(s, pos, got[s], want))
          draws = draws + 1
        end
        assert.are.equal(hp:tokens()[1], got[1]) -- the plain slot, beside biased ones
        if got[2] ~= hp:tokens()[2] then changed = changed + 1 end -- the greedy slot's bias at work
      end)
      assert.is_true(changed > 0)
      note("sampler with logit_bias: %d draws identical to the CPU sampler; the bias changed %d greedy draws",
        draws, changed)
      r:close()
      plain:close()
    end)

    it("computes logprobs as gptoss.sampler does: within 1e-9, the same top ids", function()
      local m = gptoss.synthetic("7m", { seed = 12 })
      local r = m:replica { device = 0, slots = #settings, ctx = 64 }
      local plain = m:replica { device = 0, slots = #settings, ctx = 64 }
      for s, opts in ipairs(settings) do r:sampling(s, opts or nil) end
      local worst, rows = 0, 0
      run_both(r, plain, function(pos, h)
        local lps, logits = h:logprobs(), h:logits()
        for s, opts in ipairs(settings) do
          if not (opts and opts.logprobs) then
            assert.are.equal(false, lps[s])
          else
            local id, lp, top = gptoss.sampler(opts):sample(logits[s], pos + 1)
            local got = lps[s]
            assert.are.equal(id, got.id)
            assert.are.equal(#top, #got.top)
            worst = math.max(worst, math.abs(got.logprob - lp))
            for k, t in ipairs(top) do
              assert(t.id == got.top[k].id, ("slot %d position %d: top %d is %d on the GPU, %d on the CPU")
                :format(s, pos, k, got.top[k].id, t.id))
              worst = math.max(worst, math.abs(got.top[k].logprob - t.logprob))
            end
            rows = rows + 1
          end
        end
      end)
      assert(worst <= 1e-9, ("logprobs differ by %.3g"):format(worst))
      note("logprobs: %d rows, max |dlogprob| %.3g against the CPU sampler", rows, worst)
      r:close()
      plain:close()
    end)

    it("says when a slot's bias bans every token, and stays usable", function()
      local m = gptoss.synthetic(mid_with { vocab_size = 1000 }, { seed = 13 })
      local r = m:replica { device = 0, slots = 2, ctx = 8 }
      local all = {}
      for id = 0, 999 do all[id] = -INF end
      for _, t in ipairs { 0, 1 } do
        r:sampling(2, { temperature = t, seed = 1, logit_bias = all })
        local h = r:step { slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 3, 3 } }
        expect_error(function() h:tokens() end, "step:tokens: row 2: ", "logit_bias bans every token that could be chosen")
        r:sampling(2)
        assert.are.equal(2, #r:step({ slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 3, 3 } }):tokens())
      end
      r:close()
    end)

    it("copies back the logits of chosen rows only, in the order given", function()
      local m = gptoss.synthetic(mid_with { vocab_size = 1000 }, { seed = 14 })
      local b = { slots = { 1, 1, 2, 2, 3 }, positions = { 0, 1, 0, 1, 0 }, tokens = { 5, 6, 7, 8, 9 } }
      local r = m:replica { device = 0, slots = 3, ctx = 8 }
      local all = r:step(helpers.with(b, { logits = true })):logits()
      for _, rows in ipairs { { 3, 1 }, { 2, 3, 4 }, { 5, 4, 3, 2, 1 }, { 4 } } do -- the same step again
        local kept = r:step(helpers.with(b, { logits = rows })):logits()
        assert.are.same({ #rows, 1000 }, kept.shape)
        for i, row in ipairs(rows) do assert.are.equal(0, kept[i]:max_abs_diff(all[row])) end
      end
      expect_error(function() r:step(helpers.with(b, { logits = { 6 } })) end,
        "step: logits[1] = 6 is out of range 1..5 (the step's rows)")
      r:close()
    end)
  end)

  describe("bad input", function()
    local m = gptoss.synthetic("7m", { seed = 1 })

    it("refuses malformed steps with clear errors and stays usable", function()
      local r = m:replica { device = 0, slots = 2, ctx = 16, rows = 4, chunk = 3 }
      expect_error(function() r:step { slots = {}, positions = {}, tokens = {} } end, "step: empty batch")
      expect_error(function() r:step { slots = { 3 }, positions = { 0 }, tokens = { 1 } } end,
        "slots[1] = 3 is out of range 1..2")
      expect_error(function() r:step { slots = { 1 }, positions = { 2 }, tokens = { 1 } } end, "leaves a gap")
      expect_error(function() r:step { slots = { 1 }, positions = { 16 }, tokens = { 1 } } end,
        "past the context")
      expect_error(function() r:step { slots = { 1 }, positions = { 0 }, tokens = { 201088 } } end,
        "tokens[1] = 201088 is out of range")
      expect_error(function()
        r:step { slots = { 1, 1, 1, 2, 2 }, positions = { 0, 1, 2, 0, 1 }, tokens = { 1, 2, 3, 4, 5 } }
      end, "at most rows = 4")
      expect_error(function()
        r:step { slots = { 1, 1, 1, 1 }, positions = { 0, 1, 2, 3 }, tokens = { 1, 2, 3, 4 } }
      end, "at most chunk = 3")
      local h = r:step { slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 5, 6 } }
      assert.are.equal(2, #h:tokens())
      assert.are.equal(1, r:length(1))
      local later = r:step { slots = { 1 }, positions = { 1 }, tokens = { 7 } }
      expect_error(function() h:logits() end, "a later step on this replica has replaced these logits")
      assert.are.same({ 1, 201088 }, later:logits().shape)
      r:close()
      expect_error(function() r:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } } end,
        "replica: used after close")
      assert.are.equal(1, #later:tokens())
    end)

    it("refuses options that do not apply and sizes it cannot hold", function()
      expect_error(function() m:replica { device = 0, threads = 4 } end, "threads applies to CPU replicas only")
      expect_error(function() m:replica { device = 0, rows = 4, chunk = 5 } end, "chunk = 5 must be in 1..rows")
      local big = gptoss.synthetic("20b")
      local err = expect_error(function() big:replica { device = 0, slots = 4096, ctx = 131072 } end,
        "device 0: need", "GiB free")
      note("memory refusal: %s", err)
      local r = m:replica { device = 0, slots = 1, ctx = 8 } -- still usable
      assert.are.equal(1, #r:step({ slots = { 1 }, positions = { 0 }, tokens = { 1 } }):tokens())
      local mem = r.memory
      assert.is_true(mem.weights_fp32 > 0 and mem.weights_mxfp4 > 0 and mem.kv > 0 and mem.scratch > 0)
      assert.are.equal(mem.weights, mem.weights_fp32 + mem.weights_bf16 + mem.weights_mxfp4)
      assert.are.equal(mem.total, mem.weights + mem.kv + mem.scratch)
      r:close()
    end)

    it("refuses shapes its kernels cannot take, naming the limits", function()
      local function shape(changes) return gptoss.synthetic(mid_with(changes)) end
      -- 64 query heads per KV head: attention takes 32 at most
      expect_error(function() shape({ n_attn_heads = 64, n_kv_heads = 1 }):replica { device = 0 } end,
        "up to 32 query heads per KV head", "this model: 64 heads, 1 KV heads")
      -- the router keeps a normalized row in shared memory: 48 KiB less its
      -- 256 logits and 16 warps' scratch, 12000 floats
      expect_error(function() shape({ hidden_dim = 12032, n_layers = 1 }):replica { device = 0 } end,
        "hidden size 12000", "hidden size 12032")
      local r = m:replica { device = 0, slots = 1, ctx = 8 } -- still usable
      assert.are.equal(1, #r:step({ slots = { 1 }, positions = { 0 }, tokens = { 1 } }):tokens())
      r:close()
    end)

    it("keeps only a window's ring for windowed layers", function()
      local full = m:replica { device = 0, slots = 2, ctx = 1024, chunk = 1, rows = 2, kv = "bf16" }
      -- 7m: layer 1 windowed (128 + chunk - 1 positions), layer 2 full (1024); keys and values, 2 bytes
      local kvd = m.config.head_dim * m.config.n_kv_heads
      assert.are.equal(2 * 2 * (128 + 1024) * kvd * 2, full.memory.kv)
      full:close()
    end)
  end)
end)

describe("GPU engine bad input, everywhere", function()
  local m = gptoss.synthetic("7m", { seed = 1 })
  after_each(helpers.cleanup)

  it("refuses GPU-only options and calls on a CPU replica", function()
    expect_error(function() m:replica { rows = 4 } end, "rows and chunk size a GPU replica's buffers")
    local r = m:replica { slots = 1, ctx = 4 }
    expect_error(function() r:profile(true) end, "profile: per-kernel timing is for GPU replicas")
    r:close()
  end)

  it("raises, naming the row, when a row holds a NaN logit, sampled or greedy, and stays usable", function()
    -- a model file whose unembedding row of token 7 is NaN
    local bad = helpers.nan_row_model(m, 7)
    local engines = { { slots = 2, ctx = 8 } }
    if #gptoss.devices() > 0 then engines[2] = { device = 0, slots = 2, ctx = 8 } end
    for _, opts in ipairs(engines) do
      local r = bad:replica(opts)
      r:sampling(1, { temperature = 1, seed = 3 })
      -- row 1 (slot 2) is greedy and refuses as the sampled row 2 does (greedy once chose a
      -- token past the NaN)
      local h = r:step { slots = { 2, 1 }, positions = { 0, 0 }, tokens = { 1, 1 } }
      expect_error(function() h:tokens() end, "step:tokens: row 1: ", "NaN")
      -- a step fed by it fails too: the CPU when it reads the tokens, the GPU (whose
      -- embedding makes the row NaN) when it samples
      expect_error(function() r:step({ slots = { 2, 1 }, positions = { 1, 1 }, tokens = h }):tokens() end,
        "step:tokens: row 1: ", "NaN")
      expect_error(function() r:step({ slots = { 1 }, positions = { 1 }, tokens = { 1 } }):tokens() end,
        "step:tokens: row 1: ", "NaN")
      -- and stays usable: a model without the NaN on the same replica options
      local fine = m:replica(opts)
      assert.are.equal(1, #fine:step({ slots = { 1 }, positions = { 0 }, tokens = { 1 } }):tokens())
      fine:close()
      r:close()
    end
  end)

  it("refuses a copy bandwidth measurement on a device that is not there", function()
    local device, want = helpers.absent_device()
    expect_error(function() gptoss.copy_bandwidth(device) end, "copy_bandwidth", want)
  end)
end)
