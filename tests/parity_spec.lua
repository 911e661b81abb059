-- The parity tracer (gptoss.parity) on CPU replicas: identical replicas agree to the bit,
-- fp32 against bf16 differs where the numerics say and first where they say, routing and
-- bf16 rounding flips are found in hand-modified traces, causes are traced through the
-- stored KV, every bad input is refused with a clear error, and the command line's exit
-- statuses.
local gptoss = require "gptoss"
local parity = require "gptoss.parity"
local H = require "helpers"
local expect_error, tmp, cleanup = H.expect_error, H.tmp, H.cleanup

-- small but complete (as in replica_spec): GQA, a window, 8 experts of which 4 are chosen
local TINY = {
  vocab_size = 97, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
  n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64, sliding_window = 4,
}
local SEQ = { 5, 17, 3, 88, 42, 42, 7, 60 }
local N_KEYS = 1 + #parity.STAGES * TINY.n_layers + 2 -- embedding, every layer's stages, final_norm, logits

local function quiet(opts)
  opts.print = false
  return opts
end

local function routing_flips(report)
  local out = {}
  for _, f in ipairs(report.flips) do
    if f.kind == "routing" then out[#out + 1] = f end
  end
  return out
end

describe("parity helpers", function()
  it("rounds to bf16 to nearest, ties to even, as helpers.bf16_bits does", function()
    local r = parity.bf16_round
    assert.are.equal(1.0, r(1.0))
    assert.are.equal(1.0, r(1 + 2 ^ -8))                -- halfway, 1 is even
    assert.are.equal(1 + 2 ^ -6, r(1 + 3 * 2 ^ -8))     -- halfway, 1 + 2^-6 is even
    assert.are.equal(1 + 2 ^ -7, r(1 + 2 ^ -8 + 2 ^ -20)) -- past halfway
    assert.are.equal(-(1 + 2 ^ -7), r(-(1 + 2 ^ -8 + 2 ^ -20)))
    assert.are.equal(math.huge, r(0x1.fffffep127))     -- rounds past bf16's largest
    assert.are.equal(-math.huge, r(-math.huge))
    assert.is_true(r(0 / 0) ~= r(0 / 0))
    local x = 0x12345
    for _ = 1, 500 do
      x = (x * 1103515245 + 12345) % 2147483648
      local u = (x << 1) & 0x7f7fffff | ((x & 1) << 31) -- finite floats of both signs
      local f = string.unpack("<f", string.pack("<I4", u))
      local want = string.unpack("<f", string.pack("<I4", H.bf16_bits(u) & 0xffffffff))
      assert.are.equal(want, r(f))
    end
  end)

  it("measures divergence against the reference's largest value", function()
    local rel, abs, at, scale = parity.divergence({ 1, 2, -math.huge }, { 1, 2.5, -math.huge })
    assert.are.same({ 0.2, 0.5, 2, 2.5 }, { rel, abs, at, scale })
    rel, abs, at = parity.divergence({ 3, 4 }, { 3, 4 })
    assert.are.same({ 0.0, 0.0 }, { rel, abs })
    assert.is_nil(at)
    rel, abs, at = parity.divergence({ 1, -math.huge }, { 1, 0 })
    assert.are.same({ math.huge, math.huge, 2 }, { rel, abs, at })
    rel, abs, at = parity.divergence({ 1e-3 }, { 0 }) -- nothing to scale by
    assert.are.equal(math.huge, rel)
    rel, abs, at = parity.divergence({ 1, 0 / 0, 5 }, { 1, 2, 3 })
    assert.is_true(rel ~= rel and abs ~= abs)
    assert.are.equal(2, at)
    -- a range of elements: qkv's value part
    rel, abs, at, scale = parity.divergence({ 9, 1, 2 }, { 0, 1, 4 }, 2, 3)
    assert.are.same({ 0.5, 2, 3, 4 }, { rel, abs, at, scale })
    assert.are.equal(3, parity.rounds_apart({ 1, 1 + 2 ^ -8, 1 + 2 ^ -8 + 2 ^ -20 }, { 1, 1, 1 + 2 ^ -8 }))
    assert.is_nil(parity.rounds_apart({ 1, 1 + 2 ^ -9 }, { 1, 1 }))
    assert.is_nil(parity.rounds_apart({ 9, 1 }, { 1, 1 }, 2))
  end)

  it("picks the tolerance from the numeric modes of both replicas", function()
    local fp32, bf16 = { weights = "fp32", kv = "fp32" }, { weights = "bf16", kv = "fp32" }
    local t = parity.tolerance(fp32, fp32)
    assert.are.same({ abs = 0, rel = 1e-5, mode = "fp32" }, t)
    assert.are.equal("bf16", parity.tolerance(fp32, bf16).mode)
    assert.are.equal("bf16", parity.tolerance({ weights = "fp32", kv = "bf16" }, fp32).mode)
    assert.are.equal(parity.TOLERANCES.bf16.rel, parity.tolerance(bf16, bf16).rel)
    assert.is_true(parity.TOLERANCES.bf16.rel > parity.TOLERANCES.fp32.rel)
    t.rel = 1 -- a fresh table: the defaults stay
    assert.are.equal(1e-5, parity.TOLERANCES.fp32.rel)
    local m = gptoss.synthetic(TINY, { seed = 1 })
    assert.are.equal("bf16", parity.tolerance(m:replica { ctx = 4, kv = "bf16" }, m:replica { ctx = 4 }).mode)
    -- every weight format of the core's table, by its arithmetic: mxfp4 computes as bf16
    for _, f in ipairs(gptoss.weight_formats()) do
      local mode = parity.tolerance({ weights = f.name, kv = "fp32" }, fp32).mode
      assert.are.equal(f.bf16_arithmetic and "bf16" or "fp32", mode, f.name)
    end
    assert.are.equal("bf16", parity.tolerance({ weights = "mxfp4", kv = "bf16" }, bf16).mode)
    expect_error(function() parity.tolerance({ weights = "fp16", kv = "fp32" }, fp32) end,
      "parity.tolerance: a must be a replica or a table {weights =")
    expect_error(function() parity.tolerance(fp32, 3) end, "parity.tolerance: b must be a replica")
  end)
end)

describe("parity.compare of identical numerics", function()
  it("finds no difference at all between two fp32 replicas of the tiny model", function()
    local m = gptoss.synthetic(TINY, { seed = 3 })
    -- one thread against several: the golden's rows do not depend on it
    -- (docs/numerics.md#batch-invariance)
    local a, b = m:replica { slots = 2, ctx = 16, threads = 1 }, m:replica { slots = 2, ctx = 16, threads = 3 }
    local lines = {}
    local report = parity.compare(a, b, { tokens = SEQ, slot = 2, print = function(l) lines[#lines + 1] = l end })
    assert.is_true(report.ok)
    assert.is_nil(report.first)
    assert.are.same({}, report.flips)
    assert.are.equal("fp32", report.tolerance.mode)
    assert.are.equal(N_KEYS, #report.order)
    assert.are.equal("embedding", report.order[1])
    assert.are.equal("layer 1 attn_norm", report.order[2])
    assert.are.equal("logits", report.order[N_KEYS])
    for _, key in ipairs(report.order) do
      local e = report.stages[key]
      assert.are.equal(key, e.key)
      assert.is_true(e.ok, key)
      assert.are.equal(#SEQ, e.compared, key)
      assert.are.equal(0, e.not_compared, key)
      if e.stage == "topk_idx" then
        assert.are.equal(0, e.flips)
      else
        assert.are.equal(0, e.max_abs, key)
        assert.are.equal(0, e.max_rel, key)
      end
    end
    assert.are.equal(#SEQ, b:length(2))
    assert.are.equal(0, a:length(1))
    assert.are.equal(#SEQ, #report.rows)
    for i, row in ipairs(report.rows) do
      assert.are.same({ i - 1, SEQ[i], {} }, { row.position, row.token, row.kv_apart })
    end
    -- the printed table: header, tolerance, column titles, one line per stage name, verdict
    assert.truthy(lines[1]:find("^parity: a = cpu weights fp32 kv fp32, b = cpu weights fp32 kv fp32 %(reference%); "
      .. "slot 2, 8 positions %(0%.%.7%), 2 layers$"), lines[1])
    assert.are.equal(3 + 1 + #parity.STAGES + 2 + 1, #lines)
    assert.truthy(lines[4]:find("^embedding "), lines[4])
    assert.truthy(lines[#lines - 1]:find("^logits "), lines[#lines - 1])
    assert.are.equal("all stages within tolerance", lines[#lines])
    assert.are.same(lines, parity.format(report))
    expect_error(function() parity.format(report, { layer = true }) end,
      "parity.format: unknown option 'layer' (known: layers)")
  end)

  it("continues a slot's sequence, and truncates it where a position is traced again", function()
    local m = gptoss.synthetic("7m", { seed = 3 })
    local a, b = m:replica { ctx = 8 }, m:replica { ctx = 8 }
    assert.is_true(parity.compare(a, b, quiet { tokens = { 200006, 17, 13225 } }).ok)
    local r = parity.compare(a, b, quiet { tokens = { 2375, 11 }, positions = { 3, 4 } })
    assert.is_true(r.ok)
    assert.are.same({ 3, 4 }, r.positions)
    assert.are.equal(5, a:length(1))
    r = parity.compare(a, b, quiet { tokens = { 5, 6, 7 }, positions = { 1, 2, 1 } })
    assert.is_true(r.ok)
    assert.are.equal(2, a:length(1))
    assert.are.equal(2, b:length(1))
  end)
end)

describe("parity.compare of fp32 against bf16", function()
  local m = gptoss.synthetic("7m", { seed = 3 })
  local tokens = { 200006, 1428, 200008, 12194, 200007, 13225 }

  local function pair(mode)
    return m:replica { ctx = 8, weights = mode.weights, kv = mode.kv }, m:replica { ctx = 8 }
  end

  it("differs first in the embedding when the weights are bf16, by at most half a bf16 step", function()
    local a, b = pair { weights = "bf16", kv = "bf16" }
    local lines = {}
    local r = parity.compare(a, b, { tokens = tokens, tolerance = { rel = 0 },
      print = function(l) lines[#lines + 1] = l end })
    assert.is_false(r.ok)
    -- the bf16 replica reads the embedding row rounded to bf16: |e - bf16(e)| <= 2^-8 |e|
    assert.are.same({ 0, "embedding" }, { r.first.position, r.first.key })
    local e = r.stages.embedding
    assert.is_true(e.max_rel > 0 and e.max_rel <= 2 ^ -8, tostring(e.max_rel))
    -- every GEMM reads rounded weights and inputs
    for _, key in ipairs { "layer 1 qkv", "layer 1 attn_proj", "layer 1 router", "layer 2 qkv", "layer 2 attn_proj",
      "layer 2 router", "logits" } do
      assert.is_true(r.stages[key].max_abs > 0, key)
    end
    for _, name in ipairs { "mlp1", "mlp2" } do
      local s
      for _, x in ipairs(r.summary) do
        if x.stage == name then s = x end
      end
      -- compared wherever routing agreed: at some layer of some position unless every one flipped
      if s.compared > 0 then assert.is_true(s.max_abs > 0, name) end
    end
    local verdict
    for _, l in ipairs(lines) do
      if l:find("^first stage over tolerance") then verdict = l end
    end
    assert.are.equal(("first stage over tolerance: position 0, embedding (rel %.2e > 0)"):format(r.first.max_rel), verdict)
  end)

  it("differs first in layer 1's scores when only the KV cache is bf16", function()
    local a, b = pair { weights = "fp32", kv = "bf16" }
    local r = parity.compare(a, b, quiet { tokens = tokens, tolerance = { rel = 0 } })
    -- the same float operations up to the key the cache stores rounded (k_rope is
    -- traced before the rounding), so position 0 agrees bit for bit until the score of
    -- that key
    assert.are.same({ 0, "layer 1 scores" }, { r.first.position, r.first.key })
    local row0 = r.rows[1]
    assert.are.equal(row0.first, r.first)
    for _, key in ipairs { "embedding", "layer 1 attn_norm", "layer 1 qkv", "layer 1 q_rope", "layer 1 k_rope" } do
      assert.are.equal(0, r.stages[key].max_abs, key)
    end
    -- one cache rounds, the other does not: the stored keys differ at every layer
    assert.are.same({ 1, 2 }, row0.kv_apart)
  end)

  it("stays within the bf16 tolerance unless routing flips, and reports each flip as one", function()
    local a, b = pair { weights = "bf16", kv = "bf16" }
    local long = {}
    for i = 1, 8 do long[i] = (i * 7919) % m.config.vocab_size end
    local r = parity.compare(a, b, quiet { tokens = long })
    assert.are.equal("bf16", r.tolerance.mode)
    assert.are.equal(parity.TOLERANCES.bf16.rel, r.tolerance.rel)
    -- the embedding's rounding is far inside it
    assert.is_true(r.stages.embedding.ok)
    local flips = routing_flips(r)
    -- a routing flip always fails, and fails at or before the first flip
    if #flips == 0 then
      assert.is_true(r.ok == (r.first == nil))
    else
      assert.is_false(r.ok)
      local f1 = flips[1]
      local first_pos_index, flip_pos_index
      for i, p in ipairs(r.positions) do
        if p == r.first.position and not first_pos_index then first_pos_index = i end
        if p == f1.position and not flip_pos_index then flip_pos_index = i end
      end
      assert.is_true(first_pos_index < flip_pos_index
        or (first_pos_index == flip_pos_index and (r.first.layer or 0) <= f1.layer))
    end
    local per_layer = {}
    for _, f in ipairs(flips) do
      -- each side ranks its own expert first, so both margins are >= 0, and
      -- a_margin + b_margin = (ra[ea] - rb[ea]) + (rb[eb] - ra[eb]) <= 2 * router_diff
      assert.is_true(f.a_margin >= 0 and f.b_margin >= 0)
      assert.is_true(f.a_margin + f.b_margin <= 2 * f.router_diff + 1e-12)
      assert.are_not.equal(f.a_expert, f.b_expert)
      assert.are.equal(f.a_expert, f.a_ids[f.rank])
      assert.are.equal(f.b_expert, f.b_ids[f.rank])
      per_layer[f.layer] = (per_layer[f.layer] or 0) + 1
    end
    -- exactly the rows at a flip are left out of the per-expert stages
    for l = 1, m.config.n_layers do
      for _, name in ipairs { "topk_w", "mlp1", "swiglu", "mlp2" } do
        local e = r.stages[("layer %d %s"):format(l, name)]
        assert.are.equal(per_layer[l] or 0, e.not_compared, e.key)
        assert.are.equal(#long, e.compared + e.not_compared)
      end
      assert.are.equal(per_layer[l] or 0, r.stages[("layer %d topk_idx"):format(l)].flips)
    end
  end)
end)

-- A trace whose tensors can be replaced: a table like r:trace's, sharing every tensor
-- except those that changes[layer or "top"][stage] gives as nested tables.
local function altered(trace, changes)
  local out = { layers = {} }
  for k, v in pairs(trace) do
    if k ~= "layers" then out[k] = v end
  end
  for l, layer in ipairs(trace.layers) do
    out.layers[l] = {}
    for k, v in pairs(layer) do out.layers[l][k] = v end
  end
  for where, stages in pairs(changes) do
    local target = where == "top" and out or out.layers[where]
    for name, values in pairs(stages) do
      target[name] = gptoss.tensor.from(values, name == "topk_idx" and "i32" or "f32")
    end
  end
  return out
end

describe("parity.compare_traces on hand-modified traces", function()
  local m = gptoss.synthetic(TINY, { seed = 9 })
  local c = m.config
  local function two_traces()
    return m:replica { ctx = 4 }:trace(1, 42, 0), m:replica { ctx = 4 }:trace(1, 42, 0)
  end

  it("detects a routing flip, with both margins, and leaves the experts' rows out", function()
    local ta, tb = two_traces()
    local router = tb.layers[2].router:totable()
    local order = {}
    for e = 1, c.n_experts do order[e] = e - 1 end
    table.sort(order, function(x, y) return router[x + 1] > router[y + 1] end)
    assert.are.same({ order[1], order[2], order[3], order[4] }, tb.layers[2].topk_idx:totable())
    -- a swaps the router logits of the 4th and 5th experts and so picks the 5th
    local e4, e5 = order[4], order[5]
    local swapped = {}
    for i, v in ipairs(router) do swapped[i] = v end
    swapped[e4 + 1], swapped[e5 + 1] = router[e5 + 1], router[e4 + 1]
    local gap = router[e4 + 1] - router[e5 + 1]
    local a = altered(ta, { [2] = { router = swapped, topk_idx = { order[1], order[2], order[3], e5 } } })
    -- the router's own difference would come first: let it pass
    local row = parity.compare_traces(a, tb, c, { stages = { router = { rel = 1 } } })
    assert.are.equal("layer 2 topk_idx", row.first.key)
    local f = row.first.flip
    assert.are.equal(f, row.flips[1])
    assert.are.equal(1, #row.flips)
    assert.are.same({ "routing", 2, 4, e5, e4 }, { f.kind, f.layer, f.rank, f.a_expert, f.b_expert })
    assert.are.same({ gap, gap, gap }, { f.a_margin, f.b_margin, f.router_diff })
    for _, name in ipairs { "topk_w", "mlp1", "swiglu", "mlp2" } do
      assert.are.equal("routing flip", row.stages["layer 2 " .. name].not_compared, name)
      assert.is_nil(row.stages["layer 1 " .. name].not_compared, name)
      assert.are.equal(0, row.stages["layer 1 " .. name].max_abs, name)
    end
    -- moe_out is compared as usual (untouched here, so it agrees)
    assert.are.equal(0, row.stages["layer 2 moe_out"].max_abs)
    assert.truthy(parity.describe_flip(f):find(("layer 2 topk_idx: routing flip at rank 4: a picks expert %d, b expert %d")
      :format(e5, e4), 1, true))
    -- a reordering within the same four experts is a flip too
    local ids = tb.layers[1].topk_idx:totable()
    local b2 = altered(tb, { [1] = { topk_idx = { ids[2], ids[1], ids[3], ids[4] } } })
    row = parity.compare_traces(ta, b2, c)
    assert.are.same({ "layer 1 topk_idx", 1, ids[1], ids[2] },
      { row.first.key, row.first.flip.rank, row.first.flip.a_expert, row.first.flip.b_expert })
    assert.is_true(row.first.flip.a_margin >= 0)
  end)

  it("detects a bf16 rounding flip within the noise, and names it as the cause of what follows", function()
    local ta, tb = two_traces()
    local norm = tb.layers[1].attn_norm:totable()
    local na, nb = {}, {}
    for i, v in ipairs(norm) do na[i], nb[i] = v, v end
    -- 1 + 2^-8 is halfway between two bf16 values and rounds to 1 (even); 2^-20 more
    -- rounds up, while the stage still agrees within 2^-20 / max, far inside the noise
    nb[1], na[1] = 1 + 2 ^ -8, 1 + 2 ^ -8 + 2 ^ -20
    local a, b = altered(ta, { [1] = { attn_norm = na } }), altered(tb, { [1] = { attn_norm = nb } })
    local bf16 = { weights = "bf16", kv = "bf16" }
    local row = parity.compare_traces(a, b, c, nil, { a = bf16, b = bf16 })
    assert.is_nil(row.first)
    assert.are.equal(1, #row.flips)
    local f = row.flips[1]
    assert.are.same({ "rounding", 1, "attn_norm", 1, 1 + 2 ^ -7, 1.0 }, { f.kind, f.layer, f.stage, f.index, f.a_bf16, f.b_bf16 })
    assert.are.equal("layer 1 attn_norm: bf16 rounding flip at element 1: a 1.0039072 rounds to 1.0078125, b 1.00390625 to 1",
      parity.describe_flip(f))
    -- fp32 replicas round nothing: no flip
    assert.are.same({}, parity.compare_traces(a, b, c).flips)
    -- only one side reading bf16 weights: not a flip either (that side always rounds)
    assert.are.same({}, parity.compare_traces(a, b, c, nil, { a = bf16 }).flips)
    -- beyond the noise, different roundings are drift, not a flip
    assert.are.same({}, parity.compare_traces(a, b, c, nil, { a = bf16, b = bf16, noise = 2 ^ -30 }).flips)
    -- a divergence after it: the flip is its cause
    local qkv = ta.layers[1].qkv:totable()
    qkv[3] = qkv[3] + 1
    local a2 = altered(ta, { [1] = { attn_norm = na, qkv = qkv } })
    row = parity.compare_traces(a2, b, c, nil, { a = bf16, b = bf16 })
    assert.are.equal("layer 1 qkv", row.first.key)
    assert.are.equal(3, row.first.index)
    assert.are.equal(parity.describe_flip(row.flips[1]), row.first.cause)
  end)

  it("finds the stored keys or values that differ, and explains attention through them", function()
    local ta, tb = two_traces()
    local kv_dim = c.n_kv_heads * c.head_dim
    local v_first = c.n_attn_heads * c.head_dim + kv_dim + 1
    local qkv = ta.layers[2].qkv:totable()
    qkv[v_first] = qkv[v_first] * 1.5 + 1 -- a stored value of layer 2
    local row = parity.compare_traces(altered(ta, { [2] = { qkv = qkv } }), tb, c, { rel = 1 })
    assert.are.same({ 2 }, row.kv_apart)
    assert.is_nil(row.first)
    local k = ta.layers[1].k_rope:totable()
    k[kv_dim] = k[kv_dim] + 1
    row = parity.compare_traces(altered(ta, { [1] = { k_rope = k } }), tb, c, { rel = 1 })
    assert.are.same({ 1 }, row.kv_apart)
    -- explain: attention of layer 2 at position 2 after layer 2's KV of position 0 differed
    local rows = parity.explain {
      { position = 0, kv_apart = { 2 } },
      { position = 1, kv_apart = {} },
      { position = 2, kv_apart = {}, first = { stage = "probs", layer = 2 } },
      { position = 3, kv_apart = {}, first = { stage = "probs", layer = 1 } },
      { position = 4, kv_apart = {}, first = { stage = "mlp1", layer = 2 } },
    }
    assert.are.equal("layer 2's stored keys or values of position 0 differ", rows[3].first.cause)
    assert.is_nil(rows[4].first.cause)
    assert.is_nil(rows[5].first.cause)
    -- position 0 traced again, agreeing this time: the slot no longer holds the old one
    rows = parity.explain {
      { position = 0, kv_apart = { 2 } },
      { position = 0, kv_apart = {} },
      { position = 1, kv_apart = {}, first = { stage = "scores", layer = 2 } },
    }
    assert.is_nil(rows[3].first.cause)
  end)

  it("reports missing stages and shape mismatches", function()
    local ta, tb = two_traces()
    local a = altered(ta, {})
    a.layers[2].probs = nil
    expect_error(function() parity.compare_traces(a, tb, c) end,
      "parity.compare_traces: layer 2 probs is missing from trace a")
    expect_error(function() parity.compare_traces(ta, altered(tb, { top = { final_norm = { 1, 2 } } }), c) end,
      "parity.compare_traces: final_norm has shape {16} on a, {2} on b")
    expect_error(function() parity.compare_traces(ta, nil, c) end,
      "parity.compare_traces: expected two traces (tables from r:trace), got table and nil")
    expect_error(function() parity.compare_traces(ta, tb, {}) end,
      "parity.compare_traces: config must be a model's config table")
    expect_error(function() parity.compare_traces(ta, tb, c, nil, 5) end,
      "parity.compare_traces: options must be a table (got number)")
    expect_error(function() parity.compare_traces(ta, tb, c, nil, { nosie = 1 }) end,
      "parity.compare_traces: unknown option 'nosie' (known: a, b, noise)")
    expect_error(function() parity.compare_traces(ta, tb, c, nil, { noise = -1 }) end,
      "parity.compare_traces: opts.noise must be a non-negative number (got -1)")
    expect_error(function() parity.compare_traces(ta, tb, c, nil, { a = { weights = "int8", kv = "fp32" } }) end,
      "parity.compare_traces: opts.a must be a replica or a table")
  end)
end)

describe("parity.compare bad input", function()
  local m = gptoss.synthetic(TINY, { seed = 4 })
  local a, b = m:replica { slots = 2, ctx = 8 }, m:replica { slots = 2, ctx = 8 }
  local function usable()
    a:reset(1)
    b:reset(1)
    assert.is_true(parity.compare(a, b, quiet { tokens = { 1, 2 } }).ok)
  end
  local function fails(opts, ...)
    expect_error(function() parity.compare(a, b, opts) end, ...)
    usable()
  end

  it("refuses what is not an open replica of the same shape", function()
    expect_error(function() parity.compare({}, b, { tokens = { 1 } }) end,
      "parity.compare: replica a must be a gptoss replica (got table)")
    expect_error(function() parity.compare(a, m, { tokens = { 1 } }) end,
      "parity.compare: replica b must be a gptoss replica (got userdata)")
    local closed = m:replica { ctx = 4 }
    closed:close()
    expect_error(function() parity.compare(a, closed, { tokens = { 1 } }) end, "parity.compare: replica b is closed")
    local other = gptoss.synthetic(H.with(TINY, { n_layers = 3 }), { seed = 4 }):replica { ctx = 4 }
    expect_error(function() parity.compare(other, b, { tokens = { 1 } }) end,
      "parity.compare: the replicas hold models of different shapes: n_layers is 3 on a, 2 on b")
    local wider = gptoss.synthetic(H.with(TINY, { swiglu_limit = 5.0 }), { seed = 4 }):replica { ctx = 4 }
    expect_error(function() parity.compare(a, wider, { tokens = { 1 } }) end,
      "parity.compare: the replicas hold models of different shapes: swiglu_limit is 7.0 on a, 5.0 on b")
    usable()
  end)

  it("refuses bad token and position lists", function()
    fails(nil, "parity.compare: options must be a table {tokens =, positions =, ...} (got nil)")
    fails({ tokens = { 1 }, position = { 0 } }, "parity.compare: unknown option 'position'")
    fails({}, "parity.compare: tokens must be a list of integers (got nil)")
    fails({ tokens = {} }, "parity.compare: tokens is empty: nothing to compare")
    fails({ tokens = { 1, 2.5 } }, "parity.compare: tokens[2] must be an integer (got 2.5)")
    fails({ tokens = { 1, 2 }, positions = { 0 } },
      "parity.compare: tokens and positions must have the same length (got 2 and 1)")
    fails({ tokens = { 1 }, positions = {} }, "parity.compare: positions is empty")
    fails({ tokens = { 1 }, positions = { "0" } }, "parity.compare: positions[1] must be an integer (got 0)")
    fails({ tokens = { 1 }, slot = 1.5 }, "parity.compare: slot must be an integer (got 1.5)")
  end)

  it("passes the replica's own errors on, naming the replica and the entry", function()
    fails(quiet { tokens = { 1 }, slot = 3 },
      "parity.compare: replica a at tokens[1] (position 0): trace: slot 3 is out of range 1..2")
    fails(quiet { tokens = { 1, 97 } },
      "parity.compare: replica a at tokens[2] (position 1): trace: tokens[1] = 97 is out of range 0..96")
    -- usable() leaves 2 positions in slot 1
    fails(quiet { tokens = { 1 }, positions = { 5 } },
      "parity.compare: replica a at tokens[1] (position 5): trace: positions[1] = 5 leaves a gap: slot 1 holds 2 positions")
    fails(quiet { tokens = { 1 }, positions = { 8 } }, "parity.compare: replica a at tokens[1] (position 8)",
      "is past the context")
    -- b's content differs from a's: b refuses to continue
    a:reset(1)
    b:reset(1)
    a:step { slots = { 1 }, positions = { 0 }, tokens = { 4 } }
    expect_error(function() parity.compare(a, b, quiet { tokens = { 1 }, positions = { 1 } }) end,
      "parity.compare: replica b at tokens[1] (position 1): trace: positions[1] = 1 leaves a gap")
    usable()
  end)

  it("refuses bad tolerances and options", function()
    fails({ tokens = { 1 }, tolerance = 1e-3 }, "parity.compare: tolerance must be a table {abs =, rel =, stages =} (got number)")
    fails({ tokens = { 1 }, tolerance = { rtol = 1 } },
      "parity.compare: tolerance: unknown field 'rtol' (known: abs, rel, stages, mode)")
    fails({ tokens = { 1 }, tolerance = { rel = -1 } }, "parity.compare: tolerance.rel must be a non-negative number (got -1)")
    fails({ tokens = { 1 }, tolerance = { abs = 0 / 0 } }, "parity.compare: tolerance.abs must be a non-negative number")
    fails({ tokens = { 1 }, tolerance = { stages = 1 } }, "parity.compare: tolerance.stages must be a table (got number)")
    fails({ tokens = { 1 }, tolerance = { stages = { qvk = { rel = 1 } } } },
      "parity.compare: tolerance.stages: unknown stage 'qvk'", "'layer L NAME' with L in 1..2")
    fails({ tokens = { 1 }, tolerance = { stages = { ["layer 3 qkv"] = { rel = 1 } } } },
      "parity.compare: tolerance.stages: unknown stage 'layer 3 qkv'")
    fails({ tokens = { 1 }, tolerance = { stages = { ["layer 1 logits"] = { rel = 1 } } } },
      "parity.compare: tolerance.stages: unknown stage 'layer 1 logits'")
    fails({ tokens = { 1 }, tolerance = { stages = { ["layer 1 topk_idx"] = { rel = 1 } } } },
      "parity.compare: tolerance.stages: layer 1 topk_idx has no tolerance: routing must be identical")
    fails({ tokens = { 1 }, tolerance = { stages = { logits = 1 } } },
      "parity.compare: tolerance.stages['logits'] must be a table {abs =, rel =} (got number)")
    fails({ tokens = { 1 }, tolerance = { stages = { logits = { atol = 1 } } } },
      "parity.compare: tolerance.stages['logits']: unknown field 'atol' (known: abs, rel)")
    fails({ tokens = { 1 }, tolerance = { stages = { logits = { rel = -2 } } } },
      "parity.compare: tolerance.stages['logits'].rel must be a non-negative number (got -2)")
    fails({ tokens = { 1 }, noise = -1 }, "parity.compare: noise must be a non-negative number (got -1)")
    fails({ tokens = { 1 }, print = "yes" }, "parity.compare: print must be a boolean or a function(line) (got string)")
  end)

  it("applies tolerance overrides per stage name and per layer", function()
    local bf = m:replica { slots = 2, ctx = 8, weights = "bf16" }
    a:reset(1)
    local base = { tokens = { 1, 2 } }
    -- a tight global tolerance fails at the embedding; loosened there, the next stage fails
    local r = parity.compare(bf, a, quiet { tokens = base.tokens, tolerance = { rel = 0 } })
    assert.are.equal("embedding", r.first.key)
    r = parity.compare(bf, a, quiet { tokens = base.tokens, tolerance = { rel = 0, stages = { embedding = { rel = 1 } } } })
    assert.are.equal("layer 1 attn_norm", r.first.key)
    r = parity.compare(bf, a, quiet { tokens = base.tokens,
      tolerance = { rel = 0, stages = { embedding = { rel = 1 }, attn_norm = { rel = 1 }, ["layer 1 attn_norm"] = { rel = 0 } } } })
    assert.are.equal("layer 1 attn_norm", r.first.key)
    assert.are.equal(0, r.stages["layer 1 attn_norm"].rel)
    assert.are.equal(1, r.stages["layer 2 attn_norm"].rel)
    assert.are.equal(0, r.stages["layer 2 qkv"].rel)
    -- abs alone: everything within 1 of a value of a few units
    r = parity.compare(bf, a, quiet { tokens = base.tokens, tolerance = { abs = 1, rel = 0 } })
    assert.are.equal(1, r.tolerance.abs)
    for _, key in ipairs(r.order) do
      local e = r.stages[key]
      if e.stage ~= "topk_idx" and e.max_abs > 1 then assert.is_false(e.ok, key) end
      if e.stage ~= "topk_idx" and e.max_abs <= 1 then assert.is_true(e.ok, key) end
    end
  end)
end)

describe("examples/parity.lua", function()
  after_each(cleanup)

  local function runner() return H.runner("examples/parity.lua", pending) end
  local base = { "7m", "--seed-weights", "3", "--tokens", "200006,17, 13225" }
  local function with(...)
    local t = { table.unpack(base) }
    for _, v in ipairs { ... } do t[#t + 1] = v end
    return t
  end

  it("exits 0 and prints the table when the replicas agree", function()
    local run = runner()
    local code, out, err = run(with("--a", "cpu:fp32", "--b", "cpu:fp32"))
    assert.are.equal(0, code, err)
    assert.are.equal("", err)
    assert.truthy(out:find("^parity: a = cpu weights fp32 kv fp32, b = cpu weights fp32 kv fp32"), out)
    assert.truthy(out:find("\nall stages within tolerance\n$"), out)
  end)

  it("exits 1 over tolerance, naming the first stage over it and the differing modes", function()
    local run = runner()
    -- the bf16 side reads its embedding rounded: over any tolerance below its rounding
    local code, out = run(with("--a", "cpu:fp32", "--b", "cpu:bf16", "--rtol", "1e-6"))
    assert.are.equal(1, code)
    assert.truthy(out:find("\nfirst stage over tolerance: position 0, embedding %(rel [%d.e+-]+ > 1e%-06%)\n"), out)
    assert.truthy(out:find("the replicas' numeric modes differ", 1, true), out)
  end)

  it("writes the report as one JSON line with --json, with the same verdict", function()
    local run = runner()
    local code, out = run(with("--a", "cpu:fp32", "--b", "cpu:bf16/fp32", "--rtol", "0", "--json"))
    assert.are.equal(1, code)
    local report = require("dkjson").decode(out)
    assert.are.same({ false, "embedding", 0, "bf16", "fp32" },
      { report.ok, report.first.key, report.first.position, report.b.weights, report.b.kv })
    assert.are.equal(1, select(2, out:gsub("\n", "")))
    code, out = run(with("--a", "cpu:bf16", "--b", "cpu:bf16", "--json", "--layers"))
    assert.are.equal(0, code)
    report = require("dkjson").decode(out)
    assert.is_true(report.ok)
    assert.are.equal(1 + 18 * 2 + 2, #report.order)
  end)

  it("prints a line per layer and stage as well with --layers", function()
    local run = runner()
    local _, short = run(with("--a", "cpu:fp32", "--b", "cpu:fp32"))
    local _, long = run(with("--a", "cpu:fp32", "--b", "cpu:fp32", "--layers"))
    assert.are.equal(select(2, short:gsub("\n", "")) + 2 + 1 + 18 * 2 + 2, select(2, long:gsub("\n", "")))
  end)

  -- docs/parity.md#examplesparitylua, run as shown (the seed the default), with the verdicts
  -- it gives: the first holds by the bf16 tolerance's reasoning, the second is one case of
  -- the routing flips that mixing modes can cause (parity.TOLERANCES)
  it("gives the documented verdicts: bf16 weights pass, a routing flip fails diagnosed", function()
    local run = runner()
    local tokenizer = H.need_tokenizer(pending)
    local code, out, err = run { "7m", "--prompt", "Hello world", "--tokenizer", tokenizer }
    assert.are.equal(0, code, err)
    assert.truthy(out:find("^parity: a = cpu weights bf16 kv fp32, b = cpu weights fp32 kv fp32 %(reference%)"), out)
    assert.truthy(out:find("\ntolerance %(bf16 mode%)"), out)
    code, out, err = run { "7m", "--prompt", "Hello world", "--tokenizer", tokenizer, "--json" }
    assert.are.equal(0, code, err)
    assert.is_true(require("dkjson").decode(out).ok)
    code, out, err = run { "7m", "--tokens", "1,2,3", "--a", "cpu:bf16", "--b", "cpu:fp32" }
    assert.are.same({ 1, "" }, { code, err })
    assert.truthy(out:find("\nfirst stage over tolerance: position %d, layer 2 topk_idx %(routing flip at rank %d"), out)
    assert.truthy(out:find("\nflips: 1 routing, 0 bf16 rounding\n"), out)
  end)

  it("encodes --prompt with the tokenizer", function()
    local run = runner()
    local tokenizer = H.need_tokenizer(pending)
    local code, out, err = run { "7m", "--prompt", "Hello world", "--tokenizer", tokenizer,
      "--a", "cpu:fp32" }
    assert.are.equal(0, code, err)
    assert.truthy(out:find("2 positions (0..1)", 1, true), out) -- {13225, 2375}
  end)

  it("takes every weight format of the format table (an mxfp4 replica against the golden)", function()
    local run = runner()
    local code, out, err = run { "7m", "--tokens", "1,2", "--a", "cpu:mxfp4/bf16" }
    assert.are.equal(0, code, err)
    assert.truthy(out:find("all stages within tolerance", 1, true), out)
  end)

  it("exits 2 with the usage on bad arguments", function()
    local run = runner()
    local missing = tmp() .. ".bin"
    H.expect_exits(run, 2, {
      { {}, "parity.lua: missing argument 'model'" },
      { { missing, "7m", "--tokens", "1" }, "parity.lua: too many arguments" },
      { { "--synthetic", "7m", "--tokens", "1" }, "parity.lua: --synthetic 7m is now written 7m" },
      { { "7m", "--tokens", "1", "--seed", "3" }, "parity.lua: --seed 3 is now written --seed-weights 3" },
      { { "7m" }, "give --tokens or --prompt" },
      { { "7m", "--tokens", "1", "--prompt", "x" }, "give --tokens or --prompt" },
      { { "7m", "--tokens", "1,,2" }, "'1,,2' is not a comma-separated list of token ids" },
      { { "7m", "--tokens", "1", "--a", "gpu:fp32" }, "'gpu:fp32' is not a replica DEVICE:WEIGHTS[/KV]" },
      { { "7m", "--tokens", "1", "--b", "cpu:fp16" }, "'cpu:fp16' is not a replica" },
      { { "7m", "--tokens", "1", "--b", "2.5:bf16" }, "'2.5:bf16' is not a replica" },
      { { "7m", "--tokens", "1", "--rtol=-1" }, "parity.lua: --rtol: '-1' is not a non-negative number" },
      { { "7m", "--tokens", "1", "--seed-weights", "x" }, "--seed-weights: 'x' is not an integer" },
    }, "Usage: parity.lua")
  end)

  it("exits 2 with the error on bad input", function()
    local run = runner()
    local missing = tmp() .. ".bin"
    H.expect_exits(run, 2, {
      { { "7m", "--tokens", "1,201088" },
        "parity.lua: parity.compare: replica a at tokens[2] (position 1): trace: tokens[1] = 201088 is out of range" },
      { { "9m", "--tokens", "1" }, "parity.lua: '9m' is neither a file, a directory nor a synthetic shape" },
      { { missing, "--tokens", "1" }, "parity.lua: " },
      { { "7m", "--prompt", "x", "--tokenizer", missing }, "parity.lua: " },
    })
  end)
end)
