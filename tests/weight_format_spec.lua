-- The weight formats' one table (src/core/weight_format.c) as Lua sees it:
-- gptoss.weight_formats(), the names every weights option takes, the KV formats
-- (gptoss.kv_formats()), and the memory plan,
-- which reads the table for each format's share and for a block format's tile bytes.
-- CPU only; the GPU plan needs no device.
local gptoss = require "gptoss"
local H = require "helpers"

local tiny = {
  vocab_size = 97, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
  n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64, sliding_window = 4,
}

-- A replica's option takes each of names and reports it back, and refuses another.
local function takes_and_reports(option, names, other)
  local m = gptoss.synthetic(tiny, { seed = 3 })
  H.expect_error(function() m:replica { [option] = other } end,
    ("%s must be one of %s (got %s)"):format(option, table.concat(names, ", "), other))
  for _, name in ipairs(names) do
    local r = m:replica { slots = 1, ctx = 8, [option] = name }
    assert.are.equal(name, r[option])
    r:close()
  end
end

describe("gptoss.weight_formats", function()
  it("lists fp32, bf16 and mxfp4 with their bits, blocks and exactness against bf16", function()
    local by_name = {}
    for _, f in ipairs(gptoss.weight_formats()) do by_name[f.name] = f end
    assert.are.same({ 32, 1, false, false },
      { by_name.fp32.bits, by_name.fp32.block, by_name.fp32.exact_against_bf16, by_name.fp32.bf16_arithmetic })
    assert.are.same({ 16, 1, true, true },
      { by_name.bf16.bits, by_name.bf16.block, by_name.bf16.exact_against_bf16, by_name.bf16.bf16_arithmetic })
    assert.are.same({ 4.25, 32, true, true },
      { by_name.mxfp4.bits, by_name.mxfp4.block, by_name.mxfp4.exact_against_bf16, by_name.mxfp4.bf16_arithmetic })
    for _, f in pairs(by_name) do assert.is_true(#f.summary > 0, f.name) end
  end)

  it("returns a fresh table each call, the names in the same order", function()
    local formats = gptoss.weight_formats()
    local names = gptoss.weight_format_names()
    assert.are.equal(#formats, #names)
    for i, f in ipairs(formats) do assert.are.equal(f.name, names[i]) end
    formats[1].name = "changed"
    assert.are_not.equal("changed", gptoss.weight_formats()[1].name)
  end)

  it("is what the weights option takes and what a replica reports", function()
    takes_and_reports("weights", gptoss.weight_format_names(), "fp16")
  end)
end)

describe("gptoss.kv_formats", function()
  it("is what the kv option takes and what a replica reports", function()
    assert.are.same({ "fp32", "bf16" }, gptoss.kv_formats())
    takes_and_reports("kv", gptoss.kv_formats(), "fp8")
  end)
end)

describe("the GPU memory plan by weight format", function()
  local m = gptoss.synthetic(tiny, { seed = 3 })
  local function plan(weights)
    return m:replica_bytes { device = 0, slots = 2, ctx = 32, chunk = 1, rows = 2, weights = weights }
  end

  it("reports every format's share, summed as the weights", function()
    for _, name in ipairs(gptoss.weight_format_names()) do
      local p = plan(name)
      local sum = 0
      for _, f in ipairs(gptoss.weight_formats()) do
        assert.is_not_nil(p["weights_" .. f.name], name .. ": weights_" .. f.name)
        sum = sum + p["weights_" .. f.name]
      end
      assert.are.equal(p.weights, sum, name)
      assert.is_true(p["weights_" .. name] > 0, name)
    end
  end)

  it("holds a block format's experts at its bits a weight, in tiles of 16 rows by 32 inputs", function()
    local c = m.config
    local function rounded(bytes) return (bytes + 255) // 256 * 256 end
    local function tiles(n, k) return ((n + 15) // 16) * ((k + 31) // 32) end
    local matrices = c.n_experts * c.n_layers
    for _, f in ipairs(gptoss.weight_formats()) do
      if f.block > 1 then
        local tile_bytes = 16 * 32 * f.bits / 8
        assert.are.equal(rounded(matrices * tiles(2 * c.intermediate_dim, c.hidden_dim) * tile_bytes)
          + rounded(matrices * tiles(c.hidden_dim, c.intermediate_dim) * tile_bytes), plan(f.name)["weights_" .. f.name],
          f.name)
      end
    end
  end)
end)
