-- gptoss.json_order: the key order of a cjson-decoded text's objects, read from the text
-- (what keeps a request's schema in its order: tests/serve_structured_spec.lua).
local ok_cjson, cjson = pcall(require, "cjson")

describe("gptoss.json_order", function()
  if not ok_cjson then
    pending("lua-cjson is missing (make setup)")
    return
  end
  local json_order = require "gptoss.json_order"

  local function noted(text)
    local value = cjson.decode(text)
    json_order.note(text, value)
    return value
  end

  it("gives each object's keys in its text's order, nested in objects and lists", function()
    local v = noted(' { "z" : 1, "a": {"q": [1, {"y": 2, "b": null}], "x": "}\\"{["}, "m": [[{"k": 1, "j": 2}]] } ')
    assert.are.same({ "z", "a", "m" }, json_order.keys(v))
    assert.are.same({ "q", "x" }, json_order.keys(v.a))
    assert.are.same({ "y", "b" }, json_order.keys(v.a.q[2]))
    assert.are.same({ "k", "j" }, json_order.keys(v.m[1][1]))
    assert.are.same({}, json_order.keys(noted("{}")))
  end)

  it("reads escaped keys as the decoder does, and a key given twice at its first place", function()
    local v = noted('{"\\u00e9t\\u00e9":1,"b\\"c":2,"d":{"y":1},"b":3,"d":{"x":1,"w":2}}')
    assert.are.same({ "été", 'b"c', "d", "b" }, json_order.keys(v))
    assert.are.same({ "x", "w" }, json_order.keys(v.d)) -- the value decoded last
  end)

  it("keeps no order an earlier text of a key given twice gave an object its last text lacks", function()
    -- d's first text writes an object where its last (kept) writes a list: the list knows no keys
    local v = noted('{"d":{"p":{"k":1}},"d":{"p":[1]}}')
    assert.are.same({ "p" }, json_order.keys(v.d))
    assert.is_nil(json_order.keys(v.d.p))
  end)

  it("knows no order for a table of no noted text", function()
    noted('{"a":1}')
    assert.is_nil(json_order.keys({ a = 1 }))
    assert.is_nil(json_order.keys(cjson.decode('{"a":1}')))
  end)
end)
