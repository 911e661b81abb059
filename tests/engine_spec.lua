-- The engine interface as Lua sees it: memory plans before a replica exists
-- (model:replica_bytes), the trace stages' one table, bf16 rounding, and the
-- handles' descriptions. CPU only; the GPU plan needs no device.
local gptoss = require "gptoss"
local H = require "helpers"

local expect_error = H.expect_error

local tiny = {
  vocab_size = 97, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
  n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64, sliding_window = 4,
}

describe("model:replica_bytes", function()
  local m = gptoss.synthetic(tiny, { seed = 3 })

  it("plans a CPU replica as the replica then reports its memory", function()
    local opts = { slots = 3, ctx = 20 }
    local plan = m:replica_bytes(opts)
    local r = m:replica(opts)
    local mem = r.memory
    for k, v in pairs(mem) do assert.are.equal(v, plan[k], k) end
    assert.are.equal(0, plan.headroom)
    assert.are.equal(2 * 3 * 2 * 20 * 2 * 8 * 4, plan.kv)
    r:close()
  end)

  it("plans a GPU replica without a device: weights by type, KV rings, scratch, headroom", function()
    local fp32 = m:replica_bytes { device = 0, slots = 2, ctx = 32, chunk = 1, rows = 2, weights = "fp32" }
    local bf16 = m:replica_bytes { device = 0, slots = 2, ctx = 32, chunk = 1, rows = 2, weights = "bf16" }
    assert.are.equal(0, fp32.weights_bf16)
    assert.are.equal(0, bf16.weights_mxfp4)
    assert.is_true(bf16.weights_bf16 > 0 and bf16.weights_fp32 < fp32.weights_fp32)
    assert.are.equal(fp32.weights, fp32.weights_fp32)
    assert.are.equal(fp32.total, fp32.weights + fp32.kv + fp32.scratch)
    -- layer 1 is windowed: a ring of window + chunk - 1 positions; layer 2 holds ctx
    local kvd = tiny.head_dim * tiny.n_kv_heads
    local function rounded(bytes) return (bytes + 255) // 256 * 256 end
    assert.are.equal(2 * (rounded(2 * 4 * kvd * 4) + rounded(2 * 32 * kvd * 4)), fp32.kv)
    assert.are.equal(256 << 20, fp32.headroom)
    -- more rows a step, more scratch; the defaults are the replica's (rows 256, chunk 128)
    local defaults = m:replica_bytes { device = 0, slots = 2, ctx = 32 }
    assert.is_true(defaults.scratch > fp32.scratch)
  end)

  it("plans the experts of an mxfp4 replica in tiles of 16 rows by 32 inputs, 272 bytes each", function()
    local opts = { device = 0, slots = 2, ctx = 32, chunk = 1, rows = 2 }
    local function with(weights)
      local o = { weights = weights }
      for k, v in pairs(opts) do o[k] = v end
      return m:replica_bytes(o)
    end
    local bf16, mxfp4 = with "bf16", with "mxfp4"
    local c = m.config
    local function tiles(n, k) return ((n + 15) // 16) * ((k + 31) // 32) * 272 end
    local function rounded(bytes) return (bytes + 255) // 256 * 256 end
    local per_layer = c.n_experts * c.n_layers
    assert.are.equal(rounded(per_layer * tiles(2 * c.intermediate_dim, c.hidden_dim))
      + rounded(per_layer * tiles(c.hidden_dim, c.intermediate_dim)), mxfp4.weights_mxfp4)
    assert.are.equal(bf16.weights_fp32, mxfp4.weights_fp32)
    assert.is_true(mxfp4.weights_bf16 < bf16.weights_bf16)
    assert.are.equal(mxfp4.weights, mxfp4.weights_fp32 + mxfp4.weights_bf16 + mxfp4.weights_mxfp4)
    -- a synthetic model's experts are MXFP4, so a GPU replica takes mxfp4 unless told otherwise
    assert.are.same(mxfp4, m:replica_bytes(opts))
  end)

  it("refuses sizes that leave 64 bits instead of wrapping to a small plan", function()
    local wide = gptoss.synthetic({ head_dim = 2048, n_attn_heads = 1, n_kv_heads = 1, vocab_size = 1000 },
      { seed = 1 })
    local huge = { slots = 1 << 20, ctx = 1 << 29 }
    expect_error(function() wide:replica_bytes(huge) end,
      "replica_bytes: the KV cache for 1048576 slots of 536870912 positions needs more than 2^64 bytes")
    expect_error(function() wide:replica(huge) end, "replica: the KV cache for 1048576 slots", "2^64")
    local wider = gptoss.synthetic({ head_dim = 4096, n_attn_heads = 2, n_kv_heads = 2, vocab_size = 1000,
      sliding_window = 0 }, { seed = 1 })
    expect_error(function() wider:replica_bytes { device = 0, slots = 1 << 20, ctx = 1 << 29, kv = "fp32" } end,
      "replica_bytes: 1048576 slots of 536870912 positions with 1048576 rows a step need more than 2^64 bytes")
    -- tiles pad each [2][1] expert matrix to 16 x 32 bf16: 2^54 of them once took 2^64 bytes, wrapped to 0
    local many = gptoss.synthetic({ vocab_size = 8, hidden_dim = 1, n_experts = 1 << 30, experts_per_token = 1,
      intermediate_dim = 1, n_layers = 1 << 24, head_dim = 2, n_attn_heads = 1, n_kv_heads = 1, seq_len = 16,
      rope_scaling_factor = 1 }, { seed = 1 })
    expect_error(function() many:replica_bytes { device = 0, slots = 1, ctx = 16, weights = "bf16" } end,
      "replica_bytes: 1 slots of 16 positions with 256 rows a step need more than 2^64 bytes")
    assert.are.equal(1, wide:replica { slots = 1, ctx = 4 }.slots) -- still usable
    -- below 2^64 but past what a Lua integer holds
    expect_error(function()
      gptoss.synthetic("20b"):replica_bytes { device = 0, slots = 1 << 20, ctx = 1 << 28, rows = 1 << 20, kv = "fp32" }
    end, "replica_bytes: these options need more than 2^63 bytes")
  end)

  it("keeps the KV cache in the weights' precision unless kv is given: fp32 with fp32, else bf16", function()
    assert.are.same({ "fp32", "fp32" }, { m:replica { ctx = 4 }.weights, m:replica { ctx = 4 }.kv })
    assert.are.equal("bf16", m:replica { ctx = 4, weights = "bf16" }.kv)
    assert.are.equal("fp32", m:replica { ctx = 4, weights = "bf16", kv = "fp32" }.kv)
    local gpu = { device = 0, slots = 2, ctx = 32, chunk = 1, rows = 2 }
    local function kv_bytes(extra)
      local o = {}
      for k, v in pairs(gpu) do o[k] = v end
      for k, v in pairs(extra) do o[k] = v end
      return m:replica_bytes(o).kv
    end
    assert.are.equal(kv_bytes { kv = "bf16" }, kv_bytes {})                      -- mxfp4 weights
    assert.are.equal(kv_bytes { kv = "fp32" }, kv_bytes { weights = "fp32" })
    assert.are.equal(kv_bytes { kv = "fp32" }, 2 * kv_bytes {})
  end)

  it("refuses options as model:replica does, naming replica_bytes", function()
    expect_error(function() m:replica_bytes { device = 0, threads = 2 } end,
      "replica_bytes: threads applies to CPU replicas only")
    expect_error(function() m:replica_bytes { rows = 8 } end,
      "replica_bytes: rows and chunk size a GPU replica's buffers")
    expect_error(function() m:replica_bytes { device = 0, rows = 4, chunk = 5 } end,
      "replica_bytes: chunk = 5 must be in 1..rows (4)")
    expect_error(function() m:replica_bytes { device = -1 } end,
      "replica_bytes: device -1 is not a GPU number (they count from 0)")
    expect_error(function() m:replica_bytes { slots = 0 } end, "replica_bytes: slots = 0 must be in 1..")
    expect_error(function() m:replica_bytes { slot = 2 } end, "replica_bytes: unknown option 'slot'")
  end)
end)

describe("a row no token can be drawn for", function()
  it("fails its step's tokens and a step fed by it, greedy rows as sampled ones", function()
    -- token 7's unembedding row is NaN: every row's logits hold a NaN
    local r = H.nan_row_model(gptoss.synthetic(tiny, { seed = 3 }), 7):replica { slots = 3, ctx = 8 }
    r:sampling(1, { temperature = 1, seed = 3 })
    local h = r:step { slots = { 2, 1, 3 }, positions = { 0, 0, 0 }, tokens = { 1, 1, 1 } }
    -- row 1 is greedy: it refuses as row 2, the sampled one, does (greedy once chose token 0)
    expect_error(function() h:tokens() end, "step:tokens: row 1: sampler: the logit of token 7 is NaN")
    -- a step fed by it runs, its rows failing in turn
    local fed = r:step { slots = { 2, 1, 3 }, positions = { 1, 1, 1 }, tokens = h }
    expect_error(function() fed:tokens() end, "step:tokens: row 1: the token fed to it could not be drawn (row 1 of "
      .. "the step before: sampler: the logit of token 7 is NaN)")
    local sampled = r:step { slots = { 1 }, positions = { 2 }, tokens = { 2 } }
    expect_error(function() sampled:tokens() end, "step:tokens: row 1: sampler: the logit of token 7 is NaN")
    assert.are.equal(3, r:length(1))
    H.cleanup()
  end)
end)

describe("a step handle", function()
  it("refuses to be used once collected, even when a later finaliser reaches it", function()
    local r = gptoss.synthetic(tiny, { seed = 3 }):replica { slots = 1, ctx = 4 }
    local reached
    do
      -- marked for finalisation before the step, so finalised after it
      local keeper = setmetatable({}, { __gc = function(t) reached = t.step end })
      keeper.step = r:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } }
    end
    collectgarbage()
    collectgarbage()
    assert.is_not_nil(reached)
    expect_error(function() reached:tokens() end, "step: used after it was garbage-collected")
    expect_error(function() reached:logits() end, "step: used after it was garbage-collected")
    assert.are.equal(1, #r:step({ slots = { 1 }, positions = { 1 }, tokens = { 2 } }):tokens())
  end)
end)

describe("trace stages", function()
  it("come from one table, in the order a trace records them", function()
    local stages = gptoss.trace_stages()
    assert.are.equal("embedding", stages[1].name)
    assert.is_false(stages[1].per_layer)
    assert.are.same({ "final_norm", "logits" }, { stages[#stages - 1].name, stages[#stages].name })
    local m = gptoss.synthetic(tiny, { seed = 3 })
    local tr = m:replica { slots = 1, ctx = 8 }:trace(1, 5, 0)
    for _, s in ipairs(stages) do
      local t = s.per_layer and tr.layers[1][s.name] or tr[s.name]
      assert.are.equal("gptoss.tensor", getmetatable(t).__name, s.name)
    end
    local per_layer = 0
    for _ in pairs(tr.layers[1]) do per_layer = per_layer + 1 end
    assert.are.equal(#stages - 3, per_layer)
    assert.are.equal("i32", tr.layers[1].topk_idx.dtype)
  end)
end)

describe("bf16 rounding", function()
  it("rounds a float to the nearest bf16, ties to even, as the engines do", function()
    assert.are.equal(1.0, gptoss.bf16_round(1.0))
    assert.are.equal(1.0, gptoss.bf16_round(1 + 2 ^ -8))              -- a tie: to even
    assert.are.equal(1 + 2 ^ -6, gptoss.bf16_round(1 + 3 * 2 ^ -8))   -- a tie: to even, upwards
    assert.are.equal(1 + 2 ^ -7, gptoss.bf16_round(1 + 2 ^ -8 + 2 ^ -20))
    assert.are.equal(math.huge, gptoss.bf16_round(math.huge))
    local nan = gptoss.bf16_round(0 / 0)
    assert.is_true(nan ~= nan)
  end)
end)

describe("descriptions", function()
  local m = gptoss.synthetic(tiny, { seed = 3 })

  it("names a step's rows, number and state", function()
    local r = m:replica { slots = 2, ctx = 8 }
    r:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } }
    local h = r:step { slots = { 1, 2 }, positions = { 1, 0 }, tokens = { 2, 3 } }
    assert.are.equal("gptoss.step(2 rows, step 2 of its replica, tokens ready)", tostring(h))
    h:logits()
    assert.are.equal("gptoss.step(2 rows, step 2 of its replica, tokens ready, logits on the host)", tostring(h))
  end)

  it("names a decoder's pending bytes", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local d = tok:decoder()
    assert.are.equal("", d:add(tok:id("\xc3")))
    assert.are.equal("gptoss.decoder(1 byte of a character pending)", tostring(d))
    assert.are.equal("é", d:add(tok:id("\xa9")))
    assert.are.equal("gptoss.decoder(0 bytes of a character pending)", tostring(d))
  end)

  it("marks the tensors a bf16 replica holds in bf16", function()
    local matrix = {}
    for _, t in ipairs(m.tensors) do matrix[t.name] = t.matrix end
    assert.is_true(matrix.w_qkv and matrix.token_embedding_table and matrix.w_mlp2)
    assert.is_false(matrix.b_qkv or matrix.rms_attn_w or matrix.attn_sinks)
  end)
end)

describe("gptoss.device_memory", function()
  it("refuses a device that is not there", function()
    local device, want = H.absent_device()
    expect_error(function() gptoss.device_memory(device) end, "device_memory", want)
  end)
end)
