-- GPU checks (tag: gpu). They run on a machine with a GPU and are reported
-- as pending elsewhere; the bad-input checks run everywhere.
local gptoss = require "gptoss"

local has_gpu = #gptoss.devices() > 0

describe("GPU synthetic weights #gpu", function()
  if not has_gpu then
    pending("no GPU visible to this build (gptoss.devices() is empty)")
    return
  end

  it("lists devices with the fields users need", function()
    for i, d in ipairs(gptoss.devices()) do
      assert.are.equal(i - 1, d.id) -- GPUs count from 0, as CUDA and HIP do
      assert.is_string(d.name)
      assert.is_true(d.memory > 0)
      assert.is_true(d.warp == 32 or d.warp == 64)
      assert.is_string(d.arch)
    end
  end)

  it("generates every tensor of a 7m model bit-identically to the CPU", function()
    local m = gptoss.synthetic("7m", { seed = 12345 })
    for _, t in ipairs(m.tensors) do
      assert.are.equal(0, m:gpu_tensor(0, t.name):max_abs_diff(m:tensor(t.name)), t.name)
    end
  end)

  it("generates 20b-sized slices (MXFP4 experts, norms, embeddings) identically", function()
    local m = gptoss.synthetic("20b", { seed = 7 })
    local picks = { { "w_mlp1", 24, 32 }, { "w_mlp2", 3, 17 }, { "rms_ffn_w", 5 }, { "w_qkv", 12 },
      { "attn_sinks", 24 }, { "b_mlp1", 1, 1 } }
    for _, p in ipairs(picks) do
      local cpu = m:tensor(table.unpack(p))
      local gpu = m:gpu_tensor(0, table.unpack(p))
      assert.are.equal(0, gpu:max_abs_diff(cpu), p[1])
    end
  end)
end)

describe("GPU bad input", function()
  it("refuses devices out of range and file models", function()
    local m = gptoss.synthetic("7m")
    local n = #gptoss.devices()
    local ok, err = pcall(m.gpu_tensor, m, n, "b_o")
    assert.is_false(ok)
    if n == 0 then
      assert.truthy(err:find("device 0: no GPU is available", 1, true), err)
    else
      assert.truthy(err:find(("device %d is out of range 0..%d"):format(n, n - 1), 1, true), err)
    end
    assert.has_error(function() m:gpu_tensor(0, "nope") end, "gpu_tensor: unknown tensor 'nope'")
  end)
end)
