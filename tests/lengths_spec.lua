-- gptoss.lengths: the ShareGPT-like lengths gptoss bench_serve and tests/serve_host_bench.lua
-- draw: within their bounds, the same for the same seed, and of about the means they name.
local lengths = require "gptoss.lengths"

describe("lengths", function()
  it("draws ShareGPT's input and output lengths, each in 4..max_len, the same for one seed", function()
    local function draws(seed, n, max_len)
      math.randomseed(seed)
      local list = {}
      for i = 1, n do list[i] = { lengths.draw_sharegpt(max_len) } end
      return list
    end
    local list = draws(7, 4000, 1024)
    assert.are.same(list, draws(7, 4000, 1024))
    local sums = { 0, 0 }
    for _, d in ipairs(list) do
      for k = 1, 2 do
        assert.is_true(math.type(d[k]) == "integer" and d[k] >= 4 and d[k] <= 1024)
        sums[k] = sums[k] + d[k]
      end
    end
    -- the means of the distributions, within a few percent over 4000 draws (clamping and
    -- rounding shift them a little)
    assert.is_true(math.abs(sums[1] / #list - lengths.sharegpt.input.mean) < 15, sums[1] / #list)
    assert.is_true(math.abs(sums[2] / #list - lengths.sharegpt.output.mean) < 15, sums[2] / #list)
    for _, d in ipairs(draws(7, 200, 16)) do
      assert.is_true(d[1] >= 4 and d[1] <= 16 and d[2] >= 4 and d[2] <= 16)
    end
  end)
end)
