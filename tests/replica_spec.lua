-- The CPU replica's contract: ragged batches, slot independence, batch
-- invariance, truncation, traces, numeric modes, and clear errors that leave
-- the replica usable.
local gptoss = require "gptoss"
local H = require "helpers"

-- small but complete: GQA, a window shorter than the sequences, 8 experts
local tiny = {
  vocab_size = 97, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
  n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64, sliding_window = 4,
}

local function model(seed) return gptoss.synthetic(tiny, { seed = seed or 11 }) end

local function run(r, slot, tokens, first_pos)
  local n = #tokens
  local slots, positions = {}, {}
  for i = 1, n do
    slots[i], positions[i] = slot, (first_pos or 0) + i - 1
  end
  return r:step { slots = slots, positions = positions, tokens = tokens }:logits()
end

local seq = { 5, 17, 3, 88, 42, 42, 7, 60, 1, 96 }

describe("CPU replica", function()
  local m = model()

  it("decoding token by token equals one prefill step, bit for bit", function()
    local a = m:replica { slots = 1, ctx = 32 }
    local b = m:replica { slots = 1, ctx = 32 }
    local prefill = run(a, 1, seq)
    for i, tok in ipairs(seq) do
      local row = b:step { slots = { 1 }, positions = { i - 1 }, tokens = { tok } }:logits()[1]
      assert.are.equal(0, row:max_abs_diff(prefill[i]))
    end
    assert.are.equal(#seq, a:length(1))
  end)

  it("keeps slots independent and a row's result independent of its batch", function()
    local alone = m:replica { slots = 1, ctx = 32 }
    local other = { 9, 8, 7, 6, 5, 4 }
    local ref_seq = run(alone, 1, seq)
    alone:reset(1)
    local ref_other = run(alone, 1, other)

    local r = m:replica { slots = 3, ctx = 32 }
    -- slot 2 prefills 4 tokens while slot 3 prefills all of `other` in the same step
    local h = r:step { slots = { 2, 2, 2, 2, 3, 3, 3, 3, 3, 3 }, positions = { 0, 1, 2, 3, 0, 1, 2, 3, 4, 5 },
      tokens = { seq[1], seq[2], seq[3], seq[4], table.unpack(other) } }
    local lg = h:logits()
    for i = 1, 4 do assert.are.equal(0, lg[i]:max_abs_diff(ref_seq[i])) end
    for i = 1, 6 do assert.are.equal(0, lg[4 + i]:max_abs_diff(ref_other[i])) end
    -- then decode rows of slot 2 mixed with a new sequence in slot 1
    for i = 5, #seq do
      local d = r:step { slots = { 1, 2 }, positions = { i - 5, i - 1 }, tokens = { 33, seq[i] } }:logits()
      assert.are.equal(0, d[2]:max_abs_diff(ref_seq[i]))
    end
  end)

  it("truncates a sequence when a position is written again", function()
    local r = m:replica { slots = 1, ctx = 32 }
    run(r, 1, seq)
    local edited = { seq[1], seq[2], seq[3], 50, 51, 52 }
    local tail = run(r, 1, { 50, 51, 52 }, 3)
    assert.are.equal(6, r:length(1))
    local fresh = run(m:replica { slots = 1, ctx = 32 }, 1, edited)
    for i = 1, 3 do assert.are.equal(0, tail[i]:max_abs_diff(fresh[3 + i])) end
  end)

  it("can go back anywhere: rewind_limit is 0 past the window and after going back", function()
    local r = m:replica { slots = 2, ctx = 32 }
    run(r, 1, seq) -- 10 positions, past the window of 4
    assert.are.same({ 0, 0 }, { r:rewind_limit(1), r:rewind_limit(2) })
    run(r, 1, { 50 }, 1)
    assert.are.same({ 2, 0 }, { r:length(1), r:rewind_limit(1) })
  end)

  it("reset empties a slot", function()
    local r = m:replica { slots = 2, ctx = 16 }
    run(r, 2, { 1, 2, 3 })
    r:reset(2)
    assert.are.equal(0, r:length(2))
    assert.has_error(function() r:step { slots = { 2 }, positions = { 1 }, tokens = { 1 } } end,
      "step: positions[1] = 1 leaves a gap: slot 2 holds 0 positions, so the next one is 0")
  end)

  it("gives the same logits with one thread and with several", function()
    local one = run(m:replica { slots = 1, ctx = 16, threads = 1 }, 1, seq)
    local many = run(m:replica { slots = 1, ctx = 16, threads = 3 }, 1, seq)
    assert.are.equal(0, one:max_abs_diff(many))
  end)

  it("greedy tokens are the first maximum of each row", function()
    local r = m:replica { slots = 1, ctx = 16 }
    local h = r:step { slots = { 1, 1 }, positions = { 0, 1 }, tokens = { 4, 5 } }
    local tokens, lg = h:tokens(), h:logits()
    assert.are.equal(2, h.rows)
    for i = 1, 2 do assert.are.equal(lg[i]:argmax() - 1, tokens[i]) end
  end)

  it("reports its settings and memory", function()
    local r <close> = m:replica { slots = 3, ctx = 20, weights = "bf16", kv = "bf16" }
    assert.are.same({ "cpu", 3, 20, "bf16", "bf16" }, { r.device, r.slots, r.ctx, r.weights, r.kv })
    -- K and V: slots * layers * ctx * kv_heads * head_dim floats each
    assert.are.equal(2 * 3 * 2 * 20 * 2 * 8 * 4, r.memory.kv)
    -- the weights as a bf16 replica holds them: matrices in bf16, the rest in fp32
    local held = 0
    for _, t in ipairs(m.tensors) do held = held + (t.matrix and t.bytes // 2 or t.bytes) end
    assert.are.equal(held, r.memory.weights)
    assert.truthy(tostring(r):find("3 slots x 20 positions", 1, true))
  end)
end)

describe("trace", function()
  local m = model(5)
  local stages = { "attn_norm", "qkv", "q_rope", "k_rope", "scores", "probs", "attn_out", "attn_proj",
    "resid_attn", "ffn_norm", "router", "topk_idx", "topk_w", "mlp1", "swiglu", "mlp2", "moe_out", "resid_ffn" }

  it("records every stage with its shape and matches the step's logits", function()
    local r = m:replica { slots = 2, ctx = 16 }
    local t = m:replica { slots = 2, ctx = 16 }
    local lg = run(r, 2, { 3, 4, 5, 6, 7 })
    run(t, 2, { 3, 4, 5, 6 })
    local tr = t:trace(2, 7, 4)
    assert.are.equal(5, t:length(2))
    assert.are.equal(0, tr.logits:max_abs_diff(lg[5]))
    assert.are.same({ 16 }, tr.embedding.shape)
    assert.are.same({ 16 }, tr.final_norm.shape)
    assert.are.equal(2, #tr.layers)
    local sizes = {
      attn_norm = { 16 }, qkv = { 64 }, q_rope = { 32 }, k_rope = { 16 }, scores = { 4, 6 }, probs = { 4, 6 },
      attn_out = { 32 }, attn_proj = { 16 }, resid_attn = { 16 }, ffn_norm = { 16 }, router = { 8 },
      topk_idx = { 4 }, topk_w = { 4 }, mlp1 = { 4, 24 }, swiglu = { 4, 12 }, mlp2 = { 4, 16 },
      moe_out = { 16 }, resid_ffn = { 16 },
    }
    for _, layer in ipairs(tr.layers) do
      for _, name in ipairs(stages) do
        assert.are.same(sizes[name], layer[name].shape, name)
      end
      assert.are.equal("i32", layer.topk_idx.dtype)
    end
  end)

  it("is internally consistent: probabilities, routing, residuals", function()
    local r = m:replica { slots = 1, ctx = 16 }
    run(r, 1, { 1, 2, 3, 4, 5, 6 })
    local tr = r:trace(1, 9, 6)
    local L1 = tr.layers[1]
    -- layer 1 is course layer 0: windowed; with window 4 at position 6, keys 0..2 are masked
    local scores, probs = L1.scores:totable(), L1.probs:totable()
    for h = 1, 4 do
      local sum = 0
      for t = 1, 8 do sum = sum + probs[h][t] end
      assert.is_true(math.abs(sum - 1) < 1e-6)
      for t = 1, 3 do
        assert.are.equal(-math.huge, scores[h][t])
        assert.are.equal(0, probs[h][t])
      end
      assert.is_true(scores[h][4] > -math.huge)
    end
    -- odd course layer: nothing masked
    for _, row in ipairs(tr.layers[2].scores:totable()) do
      for t = 1, 8 do assert.is_true(row[t] > -math.huge) end
    end
    -- top-k: the k largest router logits, descending, weights a softmax over them
    local router, idx, w = L1.router:totable(), L1.topk_idx:totable(), L1.topk_w:totable()
    local order = {}
    for e = 1, 8 do order[e] = e - 1 end
    table.sort(order, function(a, b)
      if router[a + 1] ~= router[b + 1] then return router[a + 1] > router[b + 1] end
      return a < b
    end)
    local wsum = 0
    for k = 1, 4 do
      assert.are.equal(order[k], idx[k])
      wsum = wsum + w[k]
    end
    assert.is_true(math.abs(wsum - 1) < 1e-6)
    -- residuals: resid_attn = embedding + attn_proj (float adds)
    local e, p, ra = tr.embedding:totable(), L1.attn_proj:totable(), L1.resid_attn:totable()
    for i = 1, 16 do
      assert.are.equal(string.unpack("<f", string.pack("<f", e[i] + p[i])), ra[i])
    end
  end)
end)

describe("numeric modes", function()
  local m = model(3)

  it("bf16 weights and kv stay close to fp32 but are not identical", function()
    local ref = run(m:replica { slots = 1, ctx = 16 }, 1, seq)
    for _, opts in ipairs { { weights = "bf16" }, { kv = "bf16" }, { weights = "bf16", kv = "bf16" } } do
      opts.slots, opts.ctx = 1, 16
      local lg = run(m:replica(opts), 1, seq)
      local diff = lg:max_abs_diff(ref)
      assert.is_true(diff > 0, "bf16 mode changed nothing")
      for i = 1, #seq do
        local row_max = 0
        for _, v in ipairs(ref[i]:totable()) do row_max = math.max(row_max, math.abs(v)) end
        assert.is_true(lg[i]:max_abs_diff(ref[i]) / row_max < 0.05)
      end
    end
  end)

  it("bf16 mode rounds weight matrices: a model saved with bf16-rounded weights gives the same logits", function()
    -- Round every matrix of a model file to bf16 ourselves; the bf16 replica
    -- of the original and of the rounded file must then agree exactly.
    local path = os.tmpname()
    m:save(path)
    local f = assert(io.open(path, "rb"))
    local bytes = f:read("a")
    f:close()
    local loaded = gptoss.load(path)
    local parts, cursor = {}, 1
    for _, t in ipairs(loaded.tensors) do
      local first, last = t.offset + 1, t.offset + t.bytes
      parts[#parts + 1] = bytes:sub(cursor, first - 1)
      local chunk = bytes:sub(first, last)
      if t.matrix then
        local out = {}
        for i = 1, #chunk, 4 do
          local u = string.unpack("<I4", chunk, i)
          out[#out + 1] = string.pack("<I4", H.bf16_bits(u)) -- no NaNs in synthetic weights
        end
        chunk = table.concat(out)
      end
      parts[#parts + 1] = chunk
      cursor = last + 1
    end
    local g = assert(io.open(path, "wb"))
    g:write(table.concat(parts))
    g:close()
    local rounded = gptoss.load(path)
    local a = run(m:replica { slots = 1, ctx = 16, weights = "bf16" }, 1, seq)
    local b = run(rounded:replica { slots = 1, ctx = 16, weights = "bf16" }, 1, seq)
    local c = run(rounded:replica { slots = 1, ctx = 16 }, 1, seq)
    os.remove(path)
    assert.are.equal(0, a:max_abs_diff(b))
    -- and the fp32 replica of the rounded file differs (activations are not rounded there)
    assert.is_true(c:max_abs_diff(b) > 0)
  end)
end)

describe("mxfp4 weights", function()
  local m = model()

  it("compute as the bf16 replica: the experts' MXFP4 values are exact in bf16", function()
    local mx = m:replica { slots = 1, ctx = 16, weights = "mxfp4" }
    assert.are.equal("mxfp4", mx.weights)
    assert.matches("weights mxfp4", tostring(mx), 1, true)
    local a = run(mx, 1, seq)
    local b = run(m:replica { slots = 1, ctx = 16, weights = "bf16" }, 1, seq)
    assert.are.equal(0, a:max_abs_diff(b))
  end)

  it("are refused, naming the weight, when an expert weight is not MXFP4; the model stays usable", function()
    local path = H.tmp()
    m:save(path)
    local w = m.tensors.w_mlp1
    local data = H.read_file(path)
    local at = w.offset + 5 * 4 -- input 5 of expert 0's row 0 in layer 0
    H.write_file(path, data:sub(1, at) .. string.pack("<f", 0.3) .. data:sub(at + 5))
    local odd = gptoss.load(path)
    H.expect_error(function() odd:replica { slots = 1, ctx = 4, weights = "mxfp4" } end,
      "replica: weights = \"mxfp4\" needs experts exactly in MXFP4", "w_mlp1")
    assert.are.equal("bf16", odd:replica { slots = 1, ctx = 4, weights = "bf16" }.weights)
    assert.are.equal("fp32", odd:replica { slots = 1, ctx = 4 }.weights) -- the CPU's default
  end)
end)

describe("bad input", function()
  local m = model()
  local r = m:replica { slots = 2, ctx = 8 }

  local function usable()
    r:reset(1)
    local lg = r:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } }:logits()
    assert.are.same({ 1, 97 }, lg.shape)
  end

  local cases = {
    { "empty batch", { slots = {}, positions = {}, tokens = {} }, "step: empty batch" },
    { "slot 0", { slots = { 0 }, positions = { 0 }, tokens = { 1 } }, "slots[1] = 0 is out of range 1..2" },
    { "the least 32-bit slot", { slots = { 1, -2147483648 }, positions = { 0, 0 }, tokens = { 1, 1 } },
      "slots[2] = -2147483648 is out of range 1..2" },
    { "slot too big", { slots = { 1, 3 }, positions = { 0, 0 }, tokens = { 1, 1 } }, "slots[2] = 3 is out of range 1..2" },
    { "token = vocab", { slots = { 1 }, positions = { 0 }, tokens = { 97 } }, "tokens[1] = 97 is out of range 0..96" },
    { "negative token", { slots = { 1 }, positions = { 0 }, tokens = { -1 } }, "tokens[1] = -1 is out of range" },
    { "negative position", { slots = { 1 }, positions = { -1 }, tokens = { 1 } }, "positions[1] = -1 is negative" },
    { "gap", { slots = { 2 }, positions = { 3 }, tokens = { 1 } }, "positions[1] = 3 leaves a gap" },
    { "ctx exhausted", { slots = { 1 }, positions = { 8 }, tokens = { 1 } }, "positions[1] = 8 is past the context" },
    { "rows of a slot not consecutive", { slots = { 1, 1 }, positions = { 0, 2 }, tokens = { 1, 1 } },
      "positions[2] = 2 does not follow positions[1] = 0 of slot 1" },
    { "lengths differ", { slots = { 1, 1 }, positions = { 0 }, tokens = { 1, 1 } }, "must have the same length" },
    { "non-integer token", { slots = { 1 }, positions = { 0 }, tokens = { 1.5 } }, "tokens[1] must be an integer" },
    { "string slot", { slots = { "a" }, positions = { 0 }, tokens = { 1 } }, "slots[1] must be an integer" },
    { "missing tokens", { slots = { 1 }, positions = { 0 } }, "tokens must be a table" },
    { "a misspelt key", { slots = { 1 }, positions = { 0 }, tokens = { 1 }, logit = true },
      "step: unknown option 'logit' (known: slots, positions, tokens, from, logits, draw, constraint)" },
    -- lengths from __len: 2^32 + 1 once ran as 1 row, -1 as a row of an unread slot
    { "a length past 32 bits", { slots = setmetatable({ 1 }, { __len = function() return (1 << 32) + 1 end }),
      positions = { 0 }, tokens = { 1 } }, "step: slots has length 4294967297, outside 0..2147483647" },
    { "a negative length", { slots = setmetatable({}, { __len = function() return -1 end }),
      positions = { 0 }, tokens = { 1 } }, "step: slots has length -1, outside 0..2147483647" },
  }
  for _, case in ipairs(cases) do
    it("rejects " .. case[1] .. " and stays usable", function()
      local ok, err = pcall(r.step, r, case[2])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(case[3], 1, true), err)
      usable()
    end)
  end

  it("does not change a slot when a batch is rejected", function()
    r:reset(2)
    r:step { slots = { 2, 2 }, positions = { 0, 1 }, tokens = { 1, 2 } }
    assert.has_error(function()
      r:step { slots = { 2, 1 }, positions = { 0, 5 }, tokens = { 3, 3 } }
    end)
    assert.are.equal(2, r:length(2))
  end)

  it("rejects bad replica options", function()
    local function fails(opts, msg)
      local ok, err = pcall(m.replica, m, opts)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(msg, 1, true), err)
    end
    fails({ slots = 0 }, "slots = 0 must be in 1..")
    fails({ ctx = -1 }, "ctx = -1 must be in 1..")
    fails({ ctx = 1 << 31 }, "ctx = 2147483648 must be in 1..")
    fails({ ctx = 2.5 }, "ctx must be an integer")
    fails({ weights = "fp16" }, "weights must be one of fp32, bf16, mxfp4 (got fp16)")
    fails({ kv = 1 }, "kv must be one of fp32, bf16")
    fails({ device = "gpu" }, "device must be \"cpu\" or a GPU number")
    fails({ slot = 2 }, "unknown option 'slot'")
    fails({ threads = -2 }, "threads = -2 must be in 0..1024")
    fails({ threads = -1 }, "threads = -1 must be in 0..1024")
    fails({ ctx = 1 << 29, slots = 1 << 20 }, "GiB available")
  end)

  it("says there is no GPU when a device number is asked for on a machine without one", function()
    if #gptoss.devices() > 0 then pending("a GPU is visible: device 0 exists") end
    local ok, err = pcall(m.replica, m, { device = 0 })
    assert.is_false(ok)
    assert.truthy(err:find("device 0: no GPU is available", 1, true), err)
  end)

  it("rejects slots out of range in trace, reset, length and rewind_limit", function()
    assert.has_error(function() r:trace(3, 1, 0) end, "trace: slot 3 is out of range 1..2")
    assert.has_error(function() r:reset(0) end, "reset: slot 0 is out of range 1..2")
    assert.has_error(function() r:length(9) end, "length: slot 9 is out of range 1..2")
    assert.has_error(function() r:rewind_limit(0) end, "rewind_limit: slot 0 is out of range 1..2")
    assert.has_error(function() r:rewind_limit(3) end, "rewind_limit: slot 3 is out of range 1..2")
    assert.has_error(function() r:trace(1, 97, 0) end, "trace: tokens[1] = 97 is out of range 0..96")
    -- integers past 32 bits are refused as they are, not wrapped (2^32 + 5 was token 5)
    assert.has_error(function() r:trace(1, 2 ^ 32 + 5, 0) end, "trace: token 4294967301 is out of range (a 32-bit integer)")
    assert.has_error(function() r:trace(1, 5, 1 << 32) end, "trace: position 4294967296 is out of range (a 32-bit integer)")
    assert.has_error(function() r:length(1 << 40) end, "length: slot 1099511627776 is out of range 1..2")
    assert.has_error(function() r:rewind_limit(1 << 40) end, "rewind_limit: slot 1099511627776 is out of range 1..2")
    H.expect_error(function() r:length() end, "bad argument #1 to 'length' (number expected, got no value)")
    H.expect_error(function() r:rewind_limit() end, "bad argument #1 to 'rewind_limit' (number expected, got no value)")
    H.expect_error(function() r:rewind_limit(1.5) end, "bad argument #1 to 'rewind_limit' (number has no integer")
    usable()
  end)

  it("refuses a closed replica", function()
    local c = m:replica { slots = 1, ctx = 4 }
    c:close()
    assert.is_true(c.closed)
    assert.has_error(function() c:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } } end,
      "replica: used after close")
    assert.has_error(function() c:rewind_limit(1) end, "replica: used after close")
    c:close() -- closing twice is harmless
    do
      local scoped <close> = m:replica { slots = 1, ctx = 4 }
      c = scoped
    end
    assert.is_true(c.closed)
  end)

  it("keeps its model alive", function()
    local kept = gptoss.synthetic(tiny, { seed = 2 }):replica { slots = 1, ctx = 4 }
    collectgarbage()
    collectgarbage()
    assert.are.equal(97, kept.model.config.vocab_size)
    assert.are.same({ 1, 97 }, kept:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } }:logits().shape)
  end)
end)

describe("on_progress (a CPU replica materialising its weights)", function()
  -- the model's weight values: what the counts count
  local function values(m)
    local n = 0
    for _, t in ipairs(m.tensors) do
      local numel = 1
      for _, d in ipairs(t.shape) do numel = numel * d end
      n = n + numel
    end
    return n
  end
  after_each(H.cleanup)

  it("is called with rising counts from 0 to the total, once per model", function()
    local m = gptoss.synthetic("7m", { seed = 3 })
    local total, seen = values(m), {}
    local r = m:replica { slots = 1, ctx = 4, on_progress = function(done, n) seen[#seen + 1] = { done, n } end }
    assert.is_true(#seen > 2, #seen) -- 13 million values: reported in several pieces
    assert.are.same({ 0, total }, seen[1])
    assert.are.same({ total, total }, seen[#seen])
    for i = 2, #seen do
      assert.is_true(seen[i][1] > seen[i - 1][1] and seen[i][2] == total)
    end
    -- the weights are the model's now: another replica has nothing to report
    local again = 0
    m:replica { slots = 1, ctx = 4, on_progress = function() again = again + 1 end }
    assert.are.equal(0, again)
    local expected = gptoss.synthetic("7m", { seed = 3 }):replica { slots = 1, ctx = 4 }
    local step = { slots = { 1 }, positions = { 0 }, tokens = { 5 } }
    assert.are.equal(0, r:step(step):logits()[1]:max_abs_diff(expected:step(step):logits()[1]))
  end)

  it("is not called for a course file, whose weights are mapped", function()
    local path = H.tmp()
    model():save(path)
    local calls = 0
    gptoss.load(path):replica { slots = 1, ctx = 4, on_progress = function() calls = calls + 1 end }
    assert.are.equal(0, calls)
  end)

  it("stops on an error raised inside it, which the replica call raises as it was", function()
    local m = model(5)
    local raised = { "a table error" }
    local ok, err = pcall(m.replica, m, { on_progress = function(done) if done > 0 then error(raised) end end })
    assert.is_false(ok)
    assert.are.equal(raised, err)
    H.expect_error(function() m:replica { on_progress = function() error("stop here", 0) end } end, "stop here")
    -- nothing was kept: the next replica materialises from the start, and runs
    local seen = {}
    local r = m:replica { slots = 1, ctx = 4, on_progress = function(done) seen[#seen + 1] = done end }
    assert.are.equal(0, seen[1])
    assert.are.same({ 1, 97 }, r:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } }:logits().shape)
  end)

  it("may make a replica of the same model inside it", function()
    local m = model(6)
    local inner
    local outer = m:replica { slots = 1, ctx = 4, on_progress = function()
      inner = inner or m:replica { slots = 1, ctx = 4 }
    end }
    local step = { slots = { 1 }, positions = { 0 }, tokens = { 9 } }
    assert.are.equal(0, outer:step(step):logits()[1]:max_abs_diff(inner:step(step):logits()[1]))
  end)

  it("must be a function", function()
    H.expect_error(function() model():replica { on_progress = 5 } end,
      "replica: on_progress must be a function(done, total) (got number)")
    H.expect_error(function() model():replica_bytes { on_progress = "x" } end,
      "replica_bytes: on_progress must be a function(done, total) (got string)")
  end)
end)

describe("module", function()
  it("has a version and lists devices as a table", function()
    assert.is_string(gptoss.VERSION)
    assert.is_table(gptoss.devices())
    assert.truthy(({ cpu = true, nvidia = true, amd = true })[gptoss.platform])
  end)

  it("defaults to every GPU's number, else the CPU", function()
    local devices = gptoss.devices
    finally(function() gptoss.devices = devices end)
    gptoss.devices = function() return {} end
    assert.are.same({ "cpu" }, gptoss.default_devices())
    gptoss.devices = function() return { { id = 0, name = "a" }, { id = 1, name = "b" } } end
    assert.are.same({ 0, 1 }, gptoss.default_devices())
  end)
end)

describe("per-slot sampling (r:sampling)", function()
  -- a sequence of ids from one slot's rows: prompt prefilled, then n tokens fed back
  local function generate(r, slot, prompt, n, others)
    local slots, positions, tokens = {}, {}, {}
    for i, t in ipairs(prompt) do slots[i], positions[i], tokens[i] = slot, i - 1, t end
    for _, o in ipairs(others or {}) do -- unrelated rows in other slots, same step
      slots[#slots + 1], positions[#positions + 1], tokens[#tokens + 1] = o, 0, 3
    end
    local ids = r:step { slots = slots, positions = positions, tokens = tokens }:tokens()
    local out = { ids[#prompt] }
    for k = 1, n - 1 do
      out[#out + 1] = r:step { slots = { slot }, positions = { #prompt + k - 1 }, tokens = { out[#out] } }:tokens()[1]
    end
    return out
  end

  it("is greedy by default and draws as gptoss.sampler would, keyed by the next position", function()
    local r = model():replica { slots = 3, ctx = 16 }
    local opts = { temperature = 1.5, top_p = 0.9, seed = 21 }
    r:sampling(2, opts)
    local h = r:step { slots = { 1, 2, 2, 3 }, positions = { 0, 0, 1, 0 }, tokens = { 5, 5, 17, 5 } }
    local ids, logits = h:tokens(), h:logits()
    local s = gptoss.sampler(opts)
    assert.are.equal(logits[1]:argmax() - 1, ids[1])
    assert.are.equal(s:sample(logits[2], 1), ids[2])
    assert.are.equal(s:sample(logits[3], 2), ids[3])
    assert.are.equal(logits[4]:argmax() - 1, ids[4])
    -- sampling really changes the outcome here (the test could fail the other way)
    local differ = false
    for pos = 0, 40 do differ = differ or s:sample(logits[2], pos) ~= logits[2]:argmax() - 1 end
    assert.is_true(differ)
  end)

  it("gives a slot the same tokens whatever else is in the batch", function()
    local opts = { temperature = 2, seed = 3 }
    local a = model():replica { slots = 4, ctx = 16 }
    a:sampling(1, opts)
    local alone = generate(a, 1, { 5, 17, 3 }, 8)
    local b = model():replica { slots = 4, ctx = 16 }
    b:sampling(3, opts)
    assert.are.same(alone, generate(b, 3, { 5, 17, 3 }, 8, { 1, 2, 4 }))
  end)

  it("applies the settings a step saw, and r:sampling(slot) returns to greedy", function()
    local r = model():replica { slots = 1, ctx = 8 }
    r:sampling(1, { temperature = 3, seed = 8 })
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 5 } }
    r:sampling(1)
    local row = h:logits()[1]
    assert.are.equal(gptoss.sampler { temperature = 3, seed = 8 }:sample(row, 1), h:tokens()[1])
    r:reset(1)
    local g = r:step { slots = { 1 }, positions = { 0 }, tokens = { 5 } }
    assert.are.equal(g:logits()[1]:argmax() - 1, g:tokens()[1])
  end)

  it("rejects bad slots and settings, leaving the replica usable", function()
    local r = model():replica { slots = 2, ctx = 8 }
    H.expect_error(function() r:sampling(3, { temperature = 1 }) end, "sampling: slot 3 is out of range 1..2")
    H.expect_error(function() r:sampling(2 ^ 40, { temperature = 1 }) end, "sampling: slot 1099511627776 is out of range 1..2")
    H.expect_error(function() r:sampling(1, { temperature = -1 }) end,
      "replica:sampling: temperature must be a finite number >= 0")
    H.expect_error(function() r:sampling(1, { top_p = "x" }) end, "replica:sampling: top_p must be a number")
    H.expect_error(function() r:sampling(1, { mode = "course" }) end, "per-slot sampling has the default mode only")
    H.expect_error(function() r:sampling(1, 0.5) end, "table expected")
    -- a misspelt setting is an error, not greedy or a default in disguise
    H.expect_error(function() r:sampling(1, { temprature = 1 }) end,
      "replica:sampling: unknown option 'temprature' (known: mode, temperature, top_k, top_p, min_p, seed, "
      .. "logit_bias, logprobs, presence_penalty, frequency_penalty)")
    local g = r:step { slots = { 1 }, positions = { 0 }, tokens = { 5 } }
    assert.are.equal(g:logits()[1]:argmax() - 1, g:tokens()[1]) -- still greedy
    r:close()
    H.expect_error(function() r:sampling(1, { temperature = 1 }) end, "replica: used after close")
  end)
end)

describe("a step fed by the latest one (tokens = h, or from = h)", function()
  local slots, first = { 1, 2, 3 }, { 5, 17, 3 }
  local function at(pos) return { pos, pos, pos } end

  it("runs each row on the token the latest step chose for it, sampled slots included", function()
    local fed, told = model():replica { slots = 3, ctx = 16 }, model():replica { slots = 3, ctx = 16 }
    for _, r in ipairs { fed, told } do r:sampling(2, { temperature = 2, seed = 5 }) end
    local hf = fed:step { slots = slots, positions = at(0), tokens = first }
    local ht = told:step { slots = slots, positions = at(0), tokens = first }
    for pos = 1, 8 do
      local nf = fed:step { slots = slots, positions = at(pos), tokens = hf }
      local ids = ht:tokens()
      local nt = told:step { slots = slots, positions = at(pos), tokens = ids }
      assert.are.same(ids, hf:tokens())
      assert.are.equal(0, nf:logits():max_abs_diff(nt:logits()))
      hf, ht = nf, nt
    end
    assert.are.same(ht:tokens(), hf:tokens())
    assert.are.equal(9, fed:length(2))
  end)

  it("h:ready() is true as soon as a CPU step returns, before and after its tokens are read", function()
    local r = model():replica { slots = 3, ctx = 16 }
    local h = r:step { slots = slots, positions = at(0), tokens = first }
    assert.are.equal(true, h:ready())
    local fed = r:step { slots = slots, positions = at(1), tokens = h }
    assert.are.equal(true, fed:ready())
    assert.are.equal(3, #fed:tokens())
    r:close()
    assert.are.equal(true, h:ready())
    H.expect_error(function() h.ready(r) end, "step")
  end)

  -- a replica r with two steps (old, latest) and a step of another replica (foreign)
  local function two_steps_and_a_foreign()
    local r, other = model():replica { slots = 3, ctx = 16 }, model():replica { slots = 3, ctx = 16 }
    local old = r:step { slots = slots, positions = at(0), tokens = first }
    local latest = r:step { slots = slots, positions = at(1), tokens = old }
    return r, old, latest, other:step { slots = slots, positions = at(0), tokens = first }
  end

  it("refuses a step of another replica, an older step, a batch of another size, leaving the replica usable", function()
    local r, old, latest, foreign = two_steps_and_a_foreign()
    H.expect_error(function() r:step { slots = slots, positions = at(2), tokens = foreign } end,
      "step: tokens is a step of another replica")
    H.expect_error(function() r:step { slots = slots, positions = at(2), tokens = old } end,
      "step: tokens is step 1 of this replica, not its latest (2): only the latest feeds the next")
    H.expect_error(function() r:step { slots = { 1, 2 }, positions = { 2, 2 }, tokens = latest } end,
      "step: tokens is a step of 3 rows; this batch has 2")
    H.expect_error(function() r:step { slots = slots, positions = at(2), tokens = "latest" } end,
      "step: tokens must be a table of integers or the replica's latest step (got string)")
    assert.are.same({ 2, 2, 2 }, { r:length(1), r:length(2), r:length(3) })
    local ids = latest:tokens()
    local next_ids = r:step { slots = slots, positions = at(2), tokens = latest }:tokens()
    assert.are.equal(3, #next_ids)
    assert.are.same(ids, latest:tokens())
  end)

  it("feeds a row from any row of the latest step (from = h, token -j: its row j), beside told ids", function()
    local fed, told = model():replica { slots = 3, ctx = 16 }, model():replica { slots = 3, ctx = 16 }
    for _, r in ipairs { fed, told } do r:sampling(1, { temperature = 2, seed = 9 }) end
    local hf = fed:step { slots = slots, positions = at(0), tokens = first }
    local ht = told:step { slots = slots, positions = at(0), tokens = first }
    -- the rows in another order each step, slot 2 told its id; the last step leaves slot 2 out
    local prev, orders = slots, { { 3, 1, 2 }, { 2, 3, 1 }, { 1, 3, 2 }, { 2, 1, 3 }, { 3, 2, 1 }, { 1, 3 } }
    for pos, order in ipairs(orders) do
      local ids = ht:tokens()
      local bf, bt = H.fed_and_told(prev, order, pos, ids, hf, 2)
      local nf, nt = fed:step(bf), told:step(bt)
      assert.are.same(ids, hf:tokens())
      assert.are.equal(0, nf:logits():max_abs_diff(nt:logits()))
      hf, ht, prev = nf, nt, order
    end
    assert.are.same(ht:tokens(), hf:tokens())
    assert.are.same({ 7, 6, 7 }, { fed:length(1), fed:length(2), fed:length(3) })
  end)

  it("refuses a bad from, leaving the replica usable", function()
    local r, old, latest, foreign = two_steps_and_a_foreign()
    local function batch(tokens, from) return { slots = slots, positions = at(2), tokens = tokens, from = from } end
    H.expect_error(function() r:step(batch({ -1, -2, -3 }, "latest")) end,
      "step: from must be a step of this replica (got string)")
    H.expect_error(function() r:step(batch({ -1, -2, -3 }, foreign)) end, "step: from is a step of another replica")
    H.expect_error(function() r:step(batch({ -1, -2, -3 }, old)) end,
      "step: from is step 1 of this replica, not its latest (2): only the latest feeds the next")
    H.expect_error(function() r:step(batch({ -1, -4, 5 }, latest)) end,
      "step: tokens[2] = -4 refers to row 4 of from, a step of 3 rows")
    H.expect_error(function() r:step(batch({ -1, -2, -2147483648 }, latest)) end,
      "step: tokens[3] = -2147483648 refers to row 2147483648 of from, a step of 3 rows")
    H.expect_error(function() r:step(batch(latest, latest)) end,
      "step: from is for a table of tokens; tokens = h already names the feeding step")
    H.expect_error(function() r:step(batch({ -1, -2, -3 })) end, "step: tokens[1] = -1 is out of range 0..")
    assert.are.same({ 2, 2, 2 }, { r:length(1), r:length(2), r:length(3) })
    local ids = latest:tokens()
    assert.are.equal(3, #r:step(batch({ -3, 4, -1 }, latest)):tokens())
    assert.are.same(ids, latest:tokens())
    assert.are.same({ 3, 3, 3 }, { r:length(1), r:length(2), r:length(3) })
  end)
end)

describe("r:fork", function()
  local tail = { 11, 12, 13, 14, 15, 16, 17 }

  -- slot's logits continuing from position at: a chunk of 3 rows, then one row a step
  local function continue(r, slot, at)
    local out = { run(r, slot, { tail[1], tail[2], tail[3] }, at) }
    for i = 4, #tail do out[#out + 1] = run(r, slot, { tail[i] }, at + i - 1) end
    return out
  end

  for _, mode in ipairs { "fp32", "bf16" } do
    it("gives the destination what a prefill of the same tokens gives, bit for bit, across the window (" .. mode
      .. " weights and KV)", function()
      local opts = { slots = 3, ctx = 32, weights = mode, kv = mode }
      local r, ref = model():replica(opts), model():replica(opts)
      run(r, 1, seq) -- 10 positions, past the window of 4
      run(r, 2, { 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9 }) -- what the fork replaces
      for _, length in ipairs { 10, 7, 4, 3, 1, 0 } do
        r:fork(1, 2, length)
        assert.are.equal(length, r:length(2))
        ref:reset(1)
        if length > 0 then run(ref, 1, { table.unpack(seq, 1, length) }) end
        local got, want = continue(r, 2, length), continue(ref, 1, length)
        for i, t in ipairs(want) do assert.are.equal(0, got[i]:max_abs_diff(t)) end
      end
      -- the whole sequence by default; the source is untouched
      r:fork(1, 3)
      assert.are.equal(10, r:length(3))
      ref:reset(1)
      run(ref, 1, seq)
      local want = continue(ref, 1, 10)
      for _, slot in ipairs { 1, 3 } do
        for i, t in ipairs(continue(r, slot, 10)) do assert.are.equal(0, t:max_abs_diff(want[i])) end
      end
    end)
  end

  it("leaves the destination's sampling as it was", function()
    local r = model():replica { slots = 2, ctx = 16 }
    r:sampling(1, { temperature = 2, seed = 4 })
    run(r, 1, seq)
    r:fork(1, 2)
    local h = r:step { slots = { 2 }, positions = { 10 }, tokens = { 5 } }
    assert.are.equal(h:logits()[1]:argmax() - 1, h:tokens()[1])
  end)

  it("refuses bad slots and lengths, changing nothing", function()
    local r = model():replica { slots = 3, ctx = 16 }
    run(r, 1, seq)
    run(r, 2, { 1, 2, 3 })
    H.expect_error(function() r:fork(1, 1) end, "fork: from and to are both slot 1")
    H.expect_error(function() r:fork(0, 2) end, "fork: slot 0 is out of range 1..3")
    H.expect_error(function() r:fork(1, 4) end, "fork: slot 4 is out of range 1..3")
    H.expect_error(function() r:fork(1, 2, 11) end, "fork: length 11 is more than slot 1 holds (10 positions)")
    H.expect_error(function() r:fork(3, 2, 1) end, "fork: length 1 is more than slot 3 holds (0 positions)")
    H.expect_error(function() r:fork(1, 2, -1) end, "fork: length -1 must be >= 0")
    H.expect_error(function() r:fork(1, 2, "all") end, "bad argument #3 to 'fork'")
    H.expect_error(function() r:fork(1) end, "bad argument #2 to 'fork'")
    assert.are.same({ 10, 3, 0 }, { r:length(1), r:length(2), r:length(3) })
    local fresh = run(model():replica { slots = 1, ctx = 16 }, 1, { 1, 2, 3, 4 })[4]
    assert.are.equal(0, run(r, 2, { 4 }, 3)[1]:max_abs_diff(fresh))
    r:close()
    H.expect_error(function() r:fork(1, 2) end, "replica: used after close")
  end)
end)

describe("per-slot logit_bias and logprobs (r:sampling)", function()
  local INF = math.huge

  it("biases a slot's draws as gptoss.sampler does, greedy included, and no other slot's", function()
    local plain, r = model():replica { slots = 3, ctx = 16 }, model():replica { slots = 3, ctx = 16 }
    local b = { slots = { 1, 2, 2, 3 }, positions = { 0, 0, 1, 0 }, tokens = { 5, 5, 17, 5 } }
    local want = plain:step(b)
    local top = want:tokens()[1] -- slot 1's greedy choice, banned below
    local greedy = { temperature = 0, logit_bias = { [top] = -INF, [3] = 0.5 } }
    local sampled = { temperature = 1.5, top_p = 0.9, seed = 21, logit_bias = { [top] = -INF, [40] = 2 } }
    r:sampling(1, greedy)
    r:sampling(2, sampled)
    local h = r:step(b)
    local ids, logits = h:tokens(), h:logits()
    assert.are.equal(0, logits:max_abs_diff(want:logits())) -- the model's logits, unbiased
    assert.are.equal(gptoss.sampler(greedy):sample(logits[1]), ids[1])
    assert.is_true(ids[1] ~= top)
    local s = gptoss.sampler(sampled)
    assert.are.equal(s:sample(logits[2], 1), ids[2])
    assert.are.equal(s:sample(logits[3], 2), ids[3])
    assert.are.equal(want:tokens()[4], ids[4]) -- slot 3: greedy, unbiased
    -- r:sampling(slot) drops the bias with the rest
    r:sampling(1)
    r:reset(1)
    assert.are.equal(top, r:step({ slots = { 1 }, positions = { 0 }, tokens = { 5 } }):tokens()[1])
  end)

  it("reports each asking row's logprobs as gptoss.sampler does, false for the others", function()
    local r = model():replica { slots = 3, ctx = 16 }
    local settings = { { temperature = 0, logprobs = 3 }, { temperature = 2, seed = 7, logprobs = 0 },
      { temperature = 0, logprobs = 20, logit_bias = { [4] = -INF, [9] = 3 } } }
    for s, opts in ipairs(settings) do r:sampling(s, opts) end
    local b = { slots = { 1, 2, 2, 3, 1 }, positions = { 0, 0, 1, 0, 1 }, tokens = { 5, 5, 17, 5, 8 } }
    local h = r:step(b)
    local lps, ids, logits = h:logprobs(), h:tokens(), h:logits()
    for row = 1, #b.slots do
      local opts = settings[b.slots[row]]
      local id, lp, top = gptoss.sampler(opts):sample(logits[row], b.positions[row] + 1)
      assert.are.same({ id = id, logprob = lp, top = top }, lps[row])
      assert.are.equal(ids[row], lps[row].id)
    end
    assert.are.equal(20, #lps[4].top)
    -- a slot without logprobs gives false; a step where no row asks refuses
    r:sampling(1, { temperature = 0 })
    local mixed = r:step { slots = { 1, 3 }, positions = { 2, 1 }, tokens = { 1, 2 } }:logprobs()
    assert.are.equal(false, mixed[1])
    assert.are.equal(20, #mixed[2].top)
    H.expect_error(function() r:step({ slots = { 1 }, positions = { 3 }, tokens = { 1 } }):logprobs() end,
      "step:logprobs: no row of this step asked for logprobs")
  end)

  it("refuses bad biases and logprobs, changing nothing", function()
    local r = model():replica { slots = 2, ctx = 8 }
    r:sampling(1, { temperature = 0, logit_bias = { [5] = 1 } })
    local function bad(opts, ...) H.expect_error(function() r:sampling(1, opts) end, "replica:sampling: ", ...) end
    bad({ logit_bias = { [97] = 1 } }, "logit_bias: token 97 is out of range 0..96")
    bad({ logit_bias = { [-1] = 1 } }, "logit_bias: token -1 is out of range 0..96")
    bad({ logit_bias = { [1] = INF } }, "logit_bias[1] = inf: a bias is a finite float or -math.huge")
    bad({ logit_bias = { [1] = 0 / 0 } }, "a bias is a finite float or -math.huge")
    bad({ logit_bias = { [1] = "x" } }, "logit_bias[1] must be a number (got x)")
    bad({ logit_bias = { x = 1 } }, "logit_bias keys must be token ids (got x)")
    bad({ logit_bias = true }, "logit_bias must be a table {[token id] = bias} (got boolean)")
    bad({ logprobs = 21 }, "logprobs must be within 0..20 (got 21)")
    bad({ logprobs = -1 }, "logprobs must be within 0..20 (got -1)")
    bad({ logprobs = 0.5 }, "logprobs must be an integer")
    local h = r:step { slots = { 1 }, positions = { 0 }, tokens = { 3 } }
    local row = h:logits()[1]
    assert.are.equal(gptoss.sampler({ temperature = 0, logit_bias = { [5] = 1 } }):sample(row), h:tokens()[1])
  end)

  it("says when a slot's bias bans every token, and stays usable", function()
    local r = model():replica { slots = 2, ctx = 8 }
    local all = {}
    for id = 0, 96 do all[id] = -INF end
    for _, t in ipairs { 0, 1 } do
      r:sampling(2, { temperature = t, seed = 1, logit_bias = all })
      local h = r:step { slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 3, 3 } }
      H.expect_error(function() h:tokens() end,
        "step:tokens: row 2: sampler: logit_bias bans every token that could be chosen")
      r:sampling(2)
      r:reset(2)
      assert.are.equal(2, #r:step({ slots = { 1, 2 }, positions = { 1, 0 }, tokens = { 3, 3 } }):tokens())
    end
  end)
end)

describe("logits of chosen rows (r:step{..., logits = {rows}})", function()
  local b = { slots = { 1, 1, 2, 2 }, positions = { 0, 1, 0, 1 }, tokens = { 5, 6, 7, 8 } }

  it("keeps those rows in the order given", function()
    local all = model():replica({ slots = 2, ctx = 8 }):step(b):logits()
    local r = model():replica { slots = 2, ctx = 8 }
    local kept = r:step(H.with(b, { logits = { 4, 1, 2 } })):logits()
    assert.are.same({ 3, 97 }, kept.shape)
    for i, row in ipairs { 4, 1, 2 } do assert.are.equal(0, kept[i]:max_abs_diff(all[row])) end
    r:reset(1)
    r:reset(2)
    assert.are.same({ 4, 97 }, r:step(H.with(b, { logits = true })):logits().shape)
  end)

  it("refuses rows outside the step, repeated rows, an empty list and other values, changing nothing", function()
    local r = model():replica { slots = 2, ctx = 8 }
    local function bad(rows, ...) H.expect_error(function() r:step(H.with(b, { logits = rows })) end, ...) end
    bad({ 5 }, "step: logits[1] = 5 is out of range 1..4 (the step's rows)")
    bad({ 2, 0 }, "step: logits[2] = 0 is out of range 1..4")
    bad({ 2, 3, 2 }, "step: logits[3] = 2 repeats logits[1]")
    bad({}, "step: logits names no row (keep none with logits = false)")
    bad({ "a" }, "step: logits[1] must be a row number (got a)")
    bad({ 2 ^ 40 }, "step: logits[1] must be a row number (got 1099511627776.0)")
    bad(3, "step: logits must be true, false or a table of row numbers (got number)")
    -- a length from __len: -1 once asked Lua for a userdata of 2^64 - 4 bytes
    bad(setmetatable({}, { __len = function() return -1 end }), "step: logits has length -1, outside 0..2147483647")
    assert.are.same({ 0, 0 }, { r:length(1), r:length(2) })
    assert.are.same({ 1, 97 }, r:step(H.with(b, { logits = { 3 } })):logits().shape)
  end)
end)
