-- The weights a CPU replica reads as the model holds them (docs/numerics.md#the-golden-engine):
-- a checkpoint's bf16 and MXFP4 tensors mapped from its files, a synthetic model's matrices made
-- in the weight format's own form, each widened to fp32 a few rows at a time as the golden's
-- matmul uses them. The logits are bit for bit those of the same values widened whole (the
-- model's course file, fp32 mapped), in every weight format, and the memory is the narrow form's.
local gptoss = require "gptoss"
local H = require "helpers"

local GiB = 1 << 30

-- m's 7m values as a course file whose dense tensors are cut to bf16 (the experts are MXFP4
-- already), so that a checkpoint saved from it holds every tensor in its narrow form
local function bf16_course_file(m)
  local bin = H.tmp()
  m:save(bin)
  local raw = H.read_file(bin)
  local pieces, at = { raw:sub(1, 60) }, 61
  for _, d in ipairs(m.tensors) do
    local body = raw:sub(at, at + d.bytes - 1)
    pieces[#pieces + 1] = d.name:match("^w_mlp") and body or body:gsub("..(..)", "\0\0%1")
    at = at + d.bytes
  end
  H.write_file(bin, table.concat(pieces))
  return bin
end

-- Host bytes of m's weights with dense matrices in bf16, experts in MXFP4 when mxfp4 (17 bytes
-- per row's 32 inputs) else bf16, and the rest (norm scales, biases, sinks) in fp32.
local function narrow_bytes(m, mxfp4)
  local total = 0
  for _, t in ipairs(m.tensors) do
    local values, row = t.bytes // 4, t.shape[#t.shape]
    if mxfp4 and t.name:match("^w_mlp") then
      total = total + values // row * ((row + 31) // 32) * 17
    else
      total = total + (t.matrix and 2 or 4) * values
    end
  end
  return total
end

-- The logits of every step of two slots, prefilled together then decoded a few steps, as bytes.
local function logits_of(m, weights)
  local r <close> = m:replica { slots = 2, ctx = 12, weights = weights }
  local h = r:step { slots = { 1, 1, 1, 1, 2, 2, 2 }, positions = { 0, 1, 2, 3, 0, 1, 2 },
    tokens = { 7, 200000, 3, 99, 5, 1234, 42 } }
  local out, last = { H.tensor_bytes(h:logits()) }, h:tokens()
  local tokens = { last[4], last[7] }
  for step = 0, 3 do
    h = r:step { slots = { 1, 2 }, positions = { 4 + step, 3 + step }, tokens = tokens }
    out[#out + 1] = H.tensor_bytes(h:logits())
    tokens = h:tokens()
  end
  return table.concat(out), r.memory.weights
end

describe("a CPU replica's weights as the model holds them", function()
  after_each(H.cleanup)

  it("reads a bf16 and MXFP4 7m checkpoint mapped, with the logits of its values widened whole", function()
    local dir = H.tmpdir() .. "/ckpt"
    gptoss.load(bf16_course_file(gptoss.synthetic("7m", { seed = 4 }))):save(dir, { format = "hf" })
    local st = H.read_safetensors(dir .. "/model.safetensors")
    local dtypes = {}
    for _, t in ipairs(st.tensors) do dtypes[t.name] = t.dtype end
    assert.are.same({ "BF16", "BF16", "U8" }, { dtypes["model.embed_tokens.weight"], dtypes["lm_head.weight"],
      dtypes["model.layers.1.mlp.experts.down_proj_blocks"] })
    local ckpt = gptoss.load(dir)
    local widened = H.tmp()
    ckpt:save(widened) -- the course file: every value in fp32
    for _, weights in ipairs(gptoss.weight_format_names()) do
      local want = logits_of(gptoss.load(widened), weights)
      local got, bytes = logits_of(ckpt, weights)
      assert.is_true(got == want, weights)
      assert.are.equal(narrow_bytes(ckpt, true), bytes, weights)
    end
  end)

  it("makes a synthetic model's matrices in bf16 and its experts in MXFP4, with its course file's logits", function()
    local m = gptoss.synthetic("7m", { seed = 6 })
    local course = H.tmp()
    m:save(course)
    for _, case in ipairs { { "bf16", false }, { "mxfp4", true } } do
      local got, bytes = logits_of(m, case[1])
      assert.is_true(got == logits_of(gptoss.load(course), case[1]), case[1])
      assert.are.equal(narrow_bytes(m, case[2]), bytes, case[1])
    end
    local _, fp32 = logits_of(m, "fp32")
    assert.are.equal(m.bytes - 60, fp32)
  end)

  it("plans the 20b's MXFP4 weights under 16 GiB of host memory, the 120b's under 70 GiB", function()
    for _, case in ipairs { { "20b", 16 }, { "120b", 70 } } do
      local m = gptoss.synthetic(case[1])
      local plan = m:replica_bytes { slots = 1, ctx = 1024, weights = "mxfp4" }
      assert.are.equal(narrow_bytes(m, true), plan.weights)
      assert.is_true(plan.total < case[2] * GiB, ("%s: %.2f GiB"):format(case[1], plan.total / GiB))
    end
  end)

  it("refuses weights past host memory, naming a format that holds them in less, and stays usable", function()
    -- an embedding of 2^30 x 4096 values: 16 TiB in fp32
    local m = gptoss.synthetic({ vocab_size = 1 << 30, hidden_dim = 4096 }, { seed = 1 })
    H.expect_error(function() m:replica { slots = 1, ctx = 4 } end,
      ("replica: the fp32 weights of a synthetic model need %.2f GiB of host memory, "):format((m.bytes - 60) / GiB),
      ("GiB available; weights = \"mxfp4\" holds them in %.2f GiB"):format(narrow_bytes(m, true) / GiB))
    H.expect_error(function() m:replica { slots = 1, ctx = 4, weights = "mxfp4" } end,
      "replica: the MXFP4 weights of a synthetic model need")
    local r <close> = gptoss.synthetic("7m"):replica { slots = 1, ctx = 4, weights = "mxfp4" }
    assert.are.equal(1, #r:step { slots = { 1 }, positions = { 0 }, tokens = { 1 } }:tokens())
  end)
end)
