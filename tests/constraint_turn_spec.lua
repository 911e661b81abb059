-- gptoss.constraint_turn's tracker asks its harmony parser only about the ids that can change
-- the turn (a header's, a special's): a message's text ids go to its matcher alone, and the
-- turn still follows every message's start and end.
local constraint = require "gptoss.constraint"
local H = require "helpers"

local function tok() return H.tokenizer(pending) end
-- ids of harmony text, specials spelled
local function ids(text) return tok():encode(text, { special = true, mode = "o200k" }) end

local POINT = { type = "object", additionalProperties = false, required = { "x" },
  properties = { x = { type = "integer", minimum = 0, maximum = 9 } } }
local RF = { type = "json_schema", json_schema = { name = "point", schema = POINT } }

-- A tracker of plan whose parser counts the ids pushed into it (t.parsed).
local function counted(plan)
  local t = plan:new()
  local push = t.parser.push
  t.parsed = 0
  t.parser.push = function(p, id)
    t.parsed = t.parsed + 1
    return push(p, id)
  end
  return t
end

describe("constraint_turn's tracker", function()
  it("leaves a message's text ids out of its parser, the final channel's under the format", function()
    local t = counted(constraint.for_turn(tok(), { response_format = RF, reasoning_effort = "none" }))
    local doc = ids('{"x":7}')
    for _, id in ipairs(doc) do assert.are.same({}, t:push(id)) end
    assert.are.equal(#doc, t:matcher().tokens)
    assert.are.equal(0, t.parsed)
    assert.is_false(t.finished)
    t:push(ids("<|return|>")[1])
    assert.are.equal(1, t.parsed)
    assert.is_true(t.finished)
  end)

  it("still sees the analysis end and the final channel open after it, and refuses text outside the format", function()
    local t = counted(constraint.for_turn(tok(), { response_format = RF }))
    local analysis = ids("<|channel|>analysis<|message|>")
    for _, id in ipairs(analysis) do t:push(id) end
    for _, id in ipairs(ids("thinking it over")) do t:push(id) end
    assert.is_nil(t:matcher())
    local header = ids("<|end|><|start|>assistant<|channel|>final<|message|>")
    for _, id in ipairs(header) do t:push(id) end
    assert.is_not_nil(t:matcher())
    assert.are.equal(#analysis + #header, t.parsed) -- the headers' ids, not the analysis text
    H.expect_error(function() t:push(ids("hello")[1]) end, "the reply's final does not fit its constraint")
  end)
end)
