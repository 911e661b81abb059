-- Objects' lives against a hostile script (issue 45). So far: tensor.from of a table that
-- contains itself, or of one nested without end, must end in a clear error, never in a
-- recursion that runs until memory does.
local gptoss = require "gptoss"
local H = require "helpers"
local expect_error = H.expect_error

describe("tensor.from", function()
  local from = gptoss.tensor.from

  it("refuses a table that contains itself", function()
    local t = {}
    t[1] = t
    expect_error(function() from(t) end, "tensor: the nested table contains itself")
    local u = { { 1 }, { 2 } }
    u[2][1] = u
    expect_error(function() from(u) end, "tensor: the nested table contains itself")
    local v = { { 1 }, { 2 } }
    v[2] = v
    expect_error(function() from(v) end, "tensor: the nested table contains itself")
  end)

  it("refuses tables nested deeper than a tensor's dimensions, endless ones too", function()
    local deep = 1
    for _ = 1, 9 do deep = { deep } end
    expect_error(function() from(deep) end, "tensor: nested deeper than 8 tables")
    assert.are.equal(8, from(deep[1]).ndim)
    local endless = setmetatable({}, { __len = function() return 1 end,
      __index = function(t) return setmetatable({}, getmetatable(t)) end })
    expect_error(function() from(endless) end, "tensor: nested deeper than 8 tables")
  end)
end)
