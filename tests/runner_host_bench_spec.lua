-- tests/runner_host_bench.lua (the host work of a step around a CPU replica) runs its
-- sequences to their end and counts every id.
local dkjson = require "dkjson"
local H = require "helpers"

describe("runner host bench", function()
  it("generates every sequence's ids and times each host part", function()
    if not H.TREE.root then
      pending("gptoss was not loaded from a source tree")
      return
    end
    local code, out, err = H.run_in(H.TREE.root, {}, { H.TREE.lua, "tests/runner_host_bench.lua", "--slots", "6",
      "--output", "3" })
    assert.are.equal(0, code, err)
    local line = dkjson.decode(out:match("\n(%b{})\n") or "null")
    assert.is_table(line, out)
    assert.are.equal(18, line.ids, out)
    for _, part in ipairs { "build", "step", "tokens", "apply" } do assert.is_number(line.us_per_id[part], out) end
  end)
end)
