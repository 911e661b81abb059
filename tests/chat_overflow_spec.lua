-- gptoss.chat's on_overflow = "drop_oldest" on a synthetic model's CPU replica: the oldest
-- turns go whole (a tool call's messages with their user message) when the next reply would
-- not fit, the session goes on turn after turn in a context that holds one, and a question
-- too long for the context is refused with the history as it was.
local gptoss = require "gptoss"
local chat = require "gptoss.chat"
local harmony = require "gptoss.harmony"
local H = require "helpers"

describe("gptoss.chat when the context fills", function()
  local tok
  local function session(ctx)
    tok = tok or gptoss.tokenizer(H.need_tokenizer(pending))
    local r = gptoss.synthetic("7m", { seed = 1 }):replica { device = "cpu", slots = 1, ctx = ctx }
    return chat.new { replica = r, tokenizer = tok, sampling = { seed = 5 }, max_tokens = 8,
      on_overflow = "drop_oldest" }, r
  end

  it("drops the oldest turns whole on overflow drop_oldest, and says so", function()
    local s, r <close> = session(96)
    local call = harmony.assistant("{}", { channel = "commentary", recipient = "functions.add" })
    local older = { harmony.user("One"), call, harmony.tool("functions.add", "2"), harmony.assistant("Two.") }
    local kept = { harmony.user("Three"), harmony.assistant("Four.", { channel = "final" }) }
    table.move(older, 1, #older, 2, s.messages)
    table.move(kept, 1, #kept, #s.messages + 1, s.messages)
    local expected = harmony.render_ids({ s.messages[1], kept[1], kept[2], harmony.user("Five") }, tok)
    assert.is_true(#harmony.render_ids(s.messages, tok) + 8 > 96 and #expected + 8 <= 96)
    local drops = {}
    local _, stats = s:ask("Five", { on_drop = function(...) drops[#drops + 1] = { ... } end })
    assert.are.same({ { 1, #expected } }, drops) -- the tool call's turn went whole
    assert.are.equal(1, stats.dropped)
    assert.are.same({ "system", "user", "assistant", "user" },
      { s.messages[1].role, s.messages[2].role, s.messages[3].role, s.messages[4].role })
    assert.are.equal("Three", s.messages[2].content)
    assert.are.equal(r:length(1), #s.held)
  end)

  it("goes on turn after turn in a context that holds one, and refuses a question too long for it", function()
    local s, r <close> = session(64)
    for turn = 1, 4 do
      local _, stats = s:ask("Hi")
      assert.are.equal(turn > 1 and 1 or 0, stats.dropped)
      assert.are.equal("system", s.messages[1].role)
      assert.are.equal(r:length(1), #s.held)
    end
    local before = harmony.render(s.messages, { completion = false })
    H.expect_error(function() s:ask(("word "):rep(40)) end,
      "session:ask: the conversation is", "tokens with no older turn left to drop, the replica's context 64")
    assert.are.equal(before, harmony.render(s.messages, { completion = false })) -- dropped turns are back
  end)
end)
