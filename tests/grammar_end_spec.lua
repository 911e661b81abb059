-- A matcher's end tokens in its masks (docs/structured.md, "End tokens"): set only where the
-- output may end, whichever words of the mask they fall in, in a fork's masks as in its
-- matcher's, and none for a matcher given no end tokens; every other bit as m:allows says.
local gptoss = require "gptoss"
local H = require "helpers"

local function tok() return H.tokenizer(pending) end

-- whether id's bit is set in mask (an i32 tensor of words, bit id % 32 of word id // 32)
local function has(mask, id)
  return mask[id // 32 + 1] & (1 << (id % 32)) ~= 0
end

describe("a matcher's end tokens in its masks", function()
  it("are set only at the end, in any word, in a fork's masks too", function()
    local t = tok()
    local ends = { t.special["endoftext"], t.special["return"] } -- in two words of the mask
    assert.are_not.equal(ends[1] // 32, ends[2] // 32)
    local g = gptoss.grammar.regex("[0-9]{1,2}")
    local m = g:matcher(t, { end_ids = ends })
    local mask = m:mask()
    for _, id in ipairs(ends) do assert.is_false(has(mask, id), id) end
    assert(m:accept(t:encode("7", { mode = "o200k" })[1]))
    for _, matcher in ipairs { m, m:fork() } do
      mask = matcher:mask()
      for _, id in ipairs(ends) do assert.is_true(has(mask, id), id) end
      for id = 0, t.vocab_size - 1 do
        if not has(mask, id) == matcher:allows(id) and not (id == ends[1] or id == ends[2]) then
          error(("token %d: mask %s, allows %s"):format(id, tostring(has(mask, id)), tostring(matcher:allows(id))))
        end
      end
    end
    local plain = g:matcher(t)
    assert(plain:accept(t:encode("7", { mode = "o200k" })[1]))
    mask = plain:mask()
    for _, id in ipairs(ends) do assert.is_false(has(mask, id), id) end
  end)
end)
