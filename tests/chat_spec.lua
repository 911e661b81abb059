-- gptoss.chat: whole conversations driven by a scripted model (a step that plays back
-- harmony completions and keeps the slot a replica would: what was fed, truncated where
-- a position below its length is written), so the loop's streaming, stop ids,
-- max_tokens, tool calls and the KV reuse across turns (fed past the common prefix,
-- rewound where harmony drops analysis from history) are checked id by id, and so are
-- scripts that misbehave (arguments no tool should get, asks from inside an ask, an ask
-- that raises, a reply cancelled or not in harmony); then a synthetic model on a CPU replica
-- (its slot disturbed between turns too, or made unable to go back to the common prefix as a
-- GPU's can be), and every refused option. When the context fills:
-- chat_overflow_spec.lua; examples/chat.lua: chat_terminal_spec.lua.
local gptoss = require "gptoss"
local chat = require "gptoss.chat"
local harmony = require "gptoss.harmony"
local H = require "helpers"

local tok -- loaded by the first test that needs it

local function tokenizer(pending)
  tok = tok or gptoss.tokenizer(H.need_tokenizer(pending))
  return tok
end

-- A model that answers with the given harmony completions (specials spelled), one id per
-- step. m.slot is what the slot holds; m.calls lists each step's {ids =, pos =}.
local function scripted(...)
  local m, queue, played = { slot = {}, calls = {} }, {}, 0
  for _, text in ipairs { ... } do
    local ids = tok:encode(text, { special = true, mode = "o200k" })
    table.move(ids, 1, #ids, #queue + 1, queue)
  end
  function m.step(ids, pos)
    assert(pos <= #m.slot, "a gap after the slot's length")
    for i = #m.slot, pos + 1, -1 do m.slot[i] = nil end
    table.move(ids, 1, #ids, pos + 1, m.slot)
    m.calls[#m.calls + 1] = { ids = ids, pos = pos }
    played = played + 1 -- not table.remove: a script may be a hundred thousand ids
    return assert(queue[played], "the script is over")
  end
  return m
end

-- The ids a slot holds after a reply: the conversation as harmony renders it, but for the
-- <|end|> in place of the reply's stop id, which is chosen, never fed.
local function history(s)
  local ids = harmony.render_ids(s.messages, tok, { completion = false })
  ids[#ids] = nil
  return ids
end

local ADD = {
  description = "Adds two numbers.",
  parameters = { type = "object", properties = { a = { type = "number" }, b = { type = "number" } } },
  fn = function(args) return args.a + args.b end,
}

describe("gptoss.chat with a scripted model", function()
  it("streams the analysis and final channels and returns the answer with its stats", function()
    tokenizer(pending)
    local m = scripted("<|channel|>analysis<|message|>Simple sum.<|end|>"
      .. "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step, system = { reasoning = "low" } }
    local streamed = {}
    local answer, stats = s:ask("What is 2 + 2?", {
      on_text = function(delta, channel) streamed[channel] = (streamed[channel] or "") .. delta end })
    assert.are.equal("2 + 2 = 4.", answer)
    assert.are.same({ analysis = "Simple sum.", final = "2 + 2 = 4." }, streamed)
    local prompt = harmony.render_ids({ harmony.system{ reasoning = "low" }, harmony.user("What is 2 + 2?") }, tok)
    assert.are.same(prompt, m.calls[1].ids) -- the first ask prefills the whole rendering
    assert.are.equal("return", stats.finish)
    assert.are.equal(#m.calls, stats.tokens) -- one step per id, the stop id included
    assert.are.equal(#prompt, stats.prefilled)
    assert.is_true(stats.seconds >= 0 and stats.tok_per_s >= 0)
    assert.are.same({ "analysis", "final" }, { s.messages[3].channel, s.messages[4].channel })
  end)

  it("feeds only what follows the slot's contents on the next turn", function()
    tokenizer(pending)
    local m = scripted("<|channel|>final<|message|>Hi!<|return|>", "<|channel|>final<|message|>Bye.<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step }
    s:ask("Hello")
    local held = #m.slot
    local _, stats = s:ask("Goodbye")
    local second = m.calls[#m.calls - #tok:encode("<|channel|>final<|message|>Bye.<|return|>",
      { special = true, mode = "o200k" }) + 1]
    assert.are.equal(held, second.pos)
    assert.are.equal(harmony.special["end"], second.ids[1]) -- what replaced the <|return|>
    assert.are.equal(#second.ids, stats.prefilled)
    assert.are.same(history(s), m.slot)
    assert.are.same(s.held, m.slot)
  end)

  it("rewinds to the common prefix where harmony drops the analysis from history", function()
    tokenizer(pending)
    local m = scripted("<|channel|>analysis<|message|>Greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hi!<|return|>",
      "<|channel|>final<|message|>Bye.<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step }
    s:ask("Hello")
    local prompt = harmony.render_ids({ harmony.system{}, harmony.user("Hello") }, tok)
    local n = #m.calls
    s:ask("Goodbye")
    -- <|start|>assistant<|channel|> is shared; "analysis" was the first id to differ
    assert.are.equal(#prompt + 1, m.calls[n + 1].pos)
    assert.are.same(history(s), m.slot)
  end)

  it("calls function tools and feeds their answers back until the final answer", function()
    tokenizer(pending)
    local m = scripted(
      '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 2, "b": 3}<|call|>',
      "<|channel|>final<|message|>5<|return|>")
    local got, seen = nil, {}
    local tools = { add = { description = ADD.description, parameters = ADD.parameters,
      fn = function(args) got = args return args.a + args.b end } }
    local s = chat.new { tokenizer = tok, step = m.step, tools = tools }
    assert.truthy(harmony.render(s.messages):find("type add = (_: {", 1, true))
    local answer, stats = s:ask("2 + 3?", { on_tool = function(...) seen[#seen + 1] = { ... } end })
    assert.are.equal("5", answer)
    assert.are.same({ a = 2, b = 3 }, got)
    assert.are.same({ { "functions.add", '{"a": 2, "b": 3}', "5" } }, seen)
    assert.are.equal("return", stats.finish)
    local tool = s.messages[#s.messages - 1]
    assert.are.same({ role = "tool", name = "functions.add", content = "5", channel = "commentary",
      recipient = "assistant" }, tool)
    assert.are.same(history(s), m.slot)
  end)

  it("turns a tool's error, bad arguments and an unknown tool into the tool's message", function()
    tokenizer(pending)
    local m = scripted(
      '<|channel|>commentary to=functions.fail<|message|>{}<|call|>',
      '<|channel|>commentary to=functions.add<|message|>{"a": 2,<|call|>',
      '<|channel|>commentary to=functions.nope<|message|>{}<|call|>',
      '<|channel|>commentary to=functions.add<|message|>7<|call|>',
      '<|channel|>commentary to=functions.odd<|message|><|call|>',
      "<|channel|>final<|message|>Sorry.<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step, tools = {
      add = ADD, fail = { fn = function() error("no luck") end }, odd = { fn = function() return print end } } }
    local results = {}
    local answer = s:ask("Try.", { on_tool = function(_, _, result) results[#results + 1] = result end })
    assert.are.equal("Sorry.", answer)
    assert.are.equal("error: no luck", results[1])
    assert.truthy(results[2]:find("^error: the arguments are not a JSON object %("))
    assert.are.equal("error: unknown tool 'functions.nope'", results[3])
    assert.are.equal("error: the arguments are not a JSON object (got number)", results[4])
    assert.are.equal("error: type 'function' is not supported by JSON.", results[5])
  end)

  it("stops at <|endoftext|> and at max_tokens, the ask's limit over the session's", function()
    tokenizer(pending)
    local m = scripted("<|channel|>final<|message|>Done<|endoftext|>", "<|channel|>final<|message|>one two three four")
    local s = chat.new { tokenizer = tok, step = m.step, max_tokens = 100 }
    local answer, stats = s:ask("a")
    assert.are.same({ "Done", "endoftext" }, { answer, stats.finish })
    answer, stats = s:ask("b", { max_tokens = 5 })
    -- <|channel|> final <|message|> one " two"
    assert.are.same({ "one two", "length", 5 }, { answer, stats.finish, stats.tokens })
    -- the cut reply stays in history as far as it went
    assert.are.same({ role = "assistant", channel = "final", content = "one two" },
      { role = s.messages[#s.messages].role, channel = s.messages[#s.messages].channel,
        content = s.messages[#s.messages].content })
  end)

  it("ends a reply when cancel() says so, keeping it as far as it went", function()
    tokenizer(pending)
    local m = scripted("<|channel|>final<|message|>one two three four<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step }
    local polls = 0
    local answer, stats = s:ask("Count", { cancel = function() polls = polls + 1 return polls == 5 end })
    -- <|channel|> final <|message|> one " two", then no more steps
    assert.are.same({ "one two", "cancelled", 5, 5 }, { answer, stats.finish, stats.tokens, #m.calls })
    assert.are.same({ "assistant", "one two" }, { s.messages[3].role, s.messages[3].content })
  end)

  it("streams a reply that is not harmony as it comes, telling once", function()
    tokenizer(pending)
    local m = scripted("Ünïcode wörds, no header at all<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step }
    local told, streamed = 0, {}
    local answer, stats = s:ask("Hi", { on_not_harmony = function() told = told + 1 end,
      on_text = function(delta, channel)
        assert.is_nil(channel)
        streamed[#streamed + 1] = delta
      end })
    assert.are.same({ 1, "return" }, { told, stats.finish })
    assert.is_nil(answer) -- no final channel
    assert.is_true(#streamed > 1) -- token by token, not at the end
    assert.are.same({ role = "assistant", content = "Ünïcode wörds, no header at all" }, s.messages[3])
    assert.are.equal(s.messages[3].content, table.concat(streamed))
  end)

  it("ends with length when max_tokens runs out at a tool call, the tool's answer kept", function()
    tokenizer(pending)
    local call = '<|channel|>commentary to=functions.add<|message|>{"a": 1, "b": 1}<|call|>'
    local m = scripted(call)
    local s = chat.new { tokenizer = tok, step = m.step, tools = { add = ADD } }
    local answer, stats = s:ask("1 + 1?", { max_tokens = #tok:encode(call, { special = true, mode = "o200k" }) })
    assert.is_nil(answer)
    assert.are.equal("length", stats.finish)
    assert.are.equal("2", s.messages[#s.messages].content)
  end)
end)

describe("gptoss.chat against scripts that misbehave", function()
  -- a tool call to functions.NAME with these arguments, as the model writes it
  local function call(name, arguments)
    return ("<|channel|>commentary to=functions.%s<|message|>%s<|call|>"):format(name, arguments)
  end
  local function nested(n) return ('{"a": '):rep(n) .. "1" .. ("}"):rep(n) end

  it("turns arguments too deep, malformed or not an object into the tool's message, and goes on", function()
    tokenizer(pending)
    local cases = {
      { ("["):rep(200000), "error: the arguments nest deeper than 100 levels" }, -- a stack overflow in dkjson
      { nested(101), "error: the arguments nest deeper than 100 levels" },
      { nested(100), "100" },
      -- brackets in strings, after an escaped quote too, are no nesting
      { '{"a": "\\" ' .. ("["):rep(150) .. '"}', "1" },
      { "[1, 2]", "error: the arguments are not a JSON object (got array)" },
      { '"2"', "error: the arguments are not a JSON object (got string)" },
      { "null", "error: the arguments are not a JSON object (got null)" },
      { '{"a": 1} }', "error: the arguments are not a JSON object (text after it at character 10)" },
      -- an error that tostring cannot print
      { "{}", "error: (a table error object that cannot be shown)", "unprintable" },
    }
    local script = {}
    for i, case in ipairs(cases) do script[i] = call(case[3] or "depth", case[1]) end
    script[#script + 1] = "<|channel|>final<|message|>Done.<|return|>"
    local m = scripted(table.unpack(script))
    -- how deep {"a": ...} objects nest
    local function depth(args)
      local n = 0
      while type(args) == "table" do args, n = args.a, n + 1 end
      return n
    end
    local unprintable = setmetatable({}, { __tostring = function() error("no") end })
    local s = chat.new { tokenizer = tok, step = m.step, tools = { depth = { fn = depth },
      unprintable = { fn = function() error(unprintable) end } } }
    local results = {}
    local answer = s:ask("Try.", { on_tool = function(_, _, result) results[#results + 1] = result end })
    assert.are.equal("Done.", answer)
    for i, case in ipairs(cases) do assert.are.equal(case[2], results[i]) end
    -- the model read each answer: the slot holds them in order
    assert.are.equal(cases[#cases][2], s.messages[#s.messages - 1].content)
    assert.are.same(history(s), m.slot)
  end)

  it("refuses an ask from a tool, a callback or the step while answering, changing nothing", function()
    tokenizer(pending)
    local m = scripted(call("again", "{}"), "<|channel|>final<|message|>Done.<|return|>")
    local s, refused
    -- what an ask could change: the history and what the slot holds
    local function state() return { harmony.render(s.messages, { completion = false }), table.concat(s.held, " ") } end
    local function again(from)
      local before = state()
      local ok, err = pcall(s.ask, s, "And again?")
      assert.are.same({ false, before }, { ok, state() })
      refused[from] = err
    end
    local function step(ids, pos)
      if not refused.step then again("step") end
      return m.step(ids, pos)
    end
    s = chat.new { tokenizer = tok, step = step, tools = { again = { fn = function() return s:ask("Nested?") end } } }
    refused = {}
    local answer = s:ask("Go.", { on_text = function() again("on_text") end, on_tool = function() again("on_tool") end })
    assert.are.equal("Done.", answer)
    local refusal = "session:ask: this session is already answering (called from a tool or callback?)"
    assert.are.same({ step = refusal, on_text = refusal, on_tool = refusal }, refused)
    local roles = {}
    for i, msg in ipairs(s.messages) do roles[i] = msg.name or msg.recipient or msg.channel or msg.role end
    assert.are.same({ "system", "developer", "user", "functions.again", "functions.again", "final" }, roles)
    assert.are.equal("error: " .. refusal, s.messages[5].content)
    assert.are.same(history(s), m.slot)
    -- ask is a session's only method: a tool has nothing else to call into mid-answer
    for _, k in ipairs { "feed", "reply", "call" } do assert.is_nil(s[k], k) end
  end)

  it("leaves the history as it was when an ask raises, and answers again after", function()
    tokenizer(pending)
    local m = scripted("<|channel|>final<|message|>Hi!<|return|>", "<|channel|>final<|message|>Again",
      "<|channel|>final<|message|>Bye.<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step }
    s:ask("Hello")
    local before = harmony.render(s.messages, { completion = false })
    H.expect_error(function() s:ask("Again", { on_text = function() error("stop here", 0) end }) end, "stop here")
    assert.are.equal(before, harmony.render(s.messages, { completion = false }))
    assert.are.same(s.held, m.slot) -- what the slot holds, the cut reply included
    assert.are.equal("Bye.", s:ask("Goodbye"))
    assert.are.equal(before .. "<|start|>user<|message|>Goodbye<|end|><|start|>assistant<|channel|>final<|message|>Bye.<|end|>",
      harmony.render(s.messages, { completion = false }))
    assert.are.same(history(s), m.slot)
  end)

  it("streams invalid bytes as U+FFFD and refuses a step's id past the vocabulary", function()
    tokenizer(pending)
    local m = scripted("<|channel|>final<|message|>\xFF\xF0\x9F<|return|>")
    local s = chat.new { tokenizer = tok, step = m.step }
    local streamed = {}
    local answer = s:ask("Bytes?", { on_text = function(delta) streamed[#streamed + 1] = delta end })
    assert.are.equal("\u{FFFD}\u{FFFD}\u{FFFD}", answer)
    assert.are.equal(answer, table.concat(streamed))
    local far = chat.new { tokenizer = tok, step = function() return tok.vocab_size end, max_tokens = 5 }
    H.expect_error(function() far:ask("hi") end, ("session:ask: step returned %d, not a token id"):format(tok.vocab_size))
  end)
end)

describe("gptoss.chat on a synthetic model", function()
  it("runs the loop on a CPU replica, reusing the slot, up to max_tokens and the context", function()
    tokenizer(pending)
    local r <close> = gptoss.synthetic("7m", { seed = 1 }):replica { device = "cpu", slots = 2, ctx = 96 }
    local s = chat.new { replica = r, tokenizer = tok, slot = 2, sampling = { seed = 5 }, max_tokens = 6 }
    local _, stats = s:ask("Hello")
    local first = stats.prefilled
    assert.are.same({ "length", 6 }, { stats.finish, stats.tokens })
    assert.are.equal(r:length(2), #s.held)
    assert.are.equal(0, r:length(1))
    _, stats = s:ask("Again", { max_tokens = 1000 })
    assert.is_true(stats.prefilled < first) -- a random reply renders differently, but the start is kept
    assert.are.equal("context", stats.finish)
    assert.are.equal(96, r:length(2))
    H.expect_error(function() s:ask("more") end, "session:ask: the conversation is", "the replica's context 96")
  end)

  it("draws a reply again with a new seed after /reset, unless the session has a seed", function()
    tokenizer(pending)
    local chat_commands = require "gptoss.chat_commands"
    local r <close> = gptoss.synthetic("7m", { seed = 1 }):replica { device = "cpu", slots = 1, ctx = 128 }
    -- the ids of the first reply, asked once and again after /reset
    local function replies(sampling)
      local s = chat.new { replica = r, tokenizer = tok, sampling = sampling, max_tokens = 12 }
      local out = {}
      for i = 1, 2 do
        s:ask("Hello")
        out[i] = harmony.render(s.messages)
        chat_commands.run(s, "/reset")
      end
      return out
    end
    local seeded = replies({ temperature = 1, seed = 9 })
    assert.are.equal(seeded[1], seeded[2])
    -- 12 ids drawn at temperature 1 from a random model's ~200k-token distribution: a repeat
    -- under a fresh seed is as likely as one particular 12-id sequence
    local fresh = replies({ temperature = 1 })
    assert.are_not.equal(fresh[1], fresh[2])
  end)

  it("feeds the conversation again where its slot was reset or another session used it", function()
    tokenizer(pending)
    local r <close> = gptoss.synthetic("7m", { seed = 1 }):replica { device = "cpu", slots = 2, ctx = 256 }
    local function session(slot, sampling)
      return chat.new { replica = r, tokenizer = tok, slot = slot, sampling = sampling, max_tokens = 3 }
    end
    -- a, on slot 1, is disturbed before each turn after the first; b, on slot 2, is not
    local a, b = session(1, { temperature = 0 }), session(2, { temperature = 0 })
    local disturb = {
      function() r:reset(1) end,
      function() session(1, { temperature = 1, seed = 3 }):ask("Other") end,
      function() -- another session, then the slot filled with zeros to the length a fed it
        session(1, { temperature = 0 })
        local batch = { slots = {}, positions = {}, tokens = {} }
        for i = 1, #a.held do batch.slots[i], batch.positions[i], batch.tokens[i] = 1, i - 1, 0 end
        r:step(batch)
      end,
    }
    for turn, text in ipairs { "One", "Two", "Three", "Four" } do
      if disturb[turn - 1] then disturb[turn - 1]() end
      a:ask(text)
      b:ask(text)
      -- the same replies: the same ids in the slot, greedy again after the other session's sampling
      assert.are.equal(harmony.render(b.messages), harmony.render(a.messages))
      assert.are.equal(r:length(1), #a.held)
    end
  end)
end)

describe("gptoss.chat on a replica that cannot go back to the common prefix", function()
  it("feeds the whole conversation again from 0 when the limit is above the common prefix, else from it", function()
    tokenizer(pending)
    local model = gptoss.synthetic("7m", { seed = 1 })
    -- A GPU slot past its windowed rings can go back only to r:rewind_limit(slot) or 0; a CPU
    -- replica goes back anywhere, and the session takes only a gptoss replica. So the replica
    -- class's own methods are wrapped for this test: rewind_limit answers `limit` (0 again once
    -- a step starts at 0, as a GPU slot's rings do) and step records where each step starts.
    local limit, starts = 0, {}
    local probe <close> = model:replica { device = "cpu", slots = 1, ctx = 8 }
    local methods = select(2, debug.getupvalue(getmetatable(probe).__index, 1))
    assert(type(methods) == "table" and methods.rewind_limit and methods.step, "the replica class's methods")
    local step, rewind_limit = methods.step, methods.rewind_limit
    finally(function() methods.step, methods.rewind_limit = step, rewind_limit end)
    function methods.step(r, batch)
      starts[#starts + 1] = batch.positions[1]
      if batch.positions[1] == 0 then limit = 0 end
      return step(r, batch)
    end
    function methods.rewind_limit(r, slot) return math.max(limit, rewind_limit(r, slot)) end

    for _, above in ipairs { 0, 1 } do
      local r <close> = model:replica { device = "cpu", slots = 1, ctx = 256 }
      local s = chat.new { replica = r, tokenizer = tok, sampling = { temperature = 0 }, max_tokens = 8 }
      s:ask("Hello")
      -- the second rendering and its common prefix with what the slot holds, as the session finds it
      local messages = table.move(s.messages, 1, #s.messages, 1, {})
      messages[#messages + 1] = harmony.user("Again")
      local ids, keep = harmony.render_ids(messages, tok), 0
      while keep < #s.held and keep < #ids - 1 and s.held[keep + 1] == ids[keep + 1] do keep = keep + 1 end
      assert(keep > 0 and keep < #s.held, "the reply renders otherwise than it was fed: the session goes back")
      limit, starts = keep + above, {}
      local _, stats = s:ask("Again")
      local from = above == 1 and 0 or keep
      assert.are.equal(from, starts[1])
      assert.are.equal(#ids - from, stats.prefilled)
      assert.are.equal(r:length(1), #s.held)
      assert.are.same(ids, table.move(s.held, 1, #ids, 1, {}))
    end
  end)
end)

describe("gptoss.chat errors", function()
  it("refuses bad chat.new options, naming the option", function()
    tokenizer(pending)
    local r <close> = gptoss.synthetic("7m", { seed = 1 }):replica { device = "cpu", slots = 1, ctx = 64 }
    local step = function() return 0 end
    local cases = {
      { nil, "chat.new: options must be a table (got nil)" },
      { { tokenizer = tok, step = step, temperature = 1 }, "chat.new: unknown option 'temperature'" },
      { { tokenizer = tok }, "chat.new: give replica (a gptoss replica) or step (a function), one of them" },
      { { tokenizer = tok, replica = r, step = step }, "one of them" },
      { { tokenizer = "t", step = step }, "chat.new: tokenizer must be a gptoss tokenizer (got string)" },
      { { tokenizer = tok, replica = {} }, "chat.new: replica must be a gptoss replica (got table)" },
      { { tokenizer = tok, step = "f" }, "chat.new: step must be a function (got string)" },
      { { tokenizer = tok, replica = r, slot = 2 }, "chat.new: slot must be an integer in 1..1 (got 2)" },
      { { tokenizer = tok, replica = r, sampling = 1 }, "chat.new: sampling must be a table (got number)" },
      { { tokenizer = tok, replica = r, sampling = { top_p = 2 } }, "chat.new: sampling: " },
      { { tokenizer = tok, step = step, slot = 1 }, "chat.new: slot is for a replica; a step chooses its own ids" },
      { { tokenizer = tok, step = step, sampling = {} }, "chat.new: sampling is for a replica" },
      { { tokenizer = tok, step = step, max_tokens = 0 }, "chat.new: max_tokens must be an integer >= 1 (got 0)" },
      { { tokenizer = tok, step = step, on_overflow = "drop" },
        "chat.new: on_overflow must be 'error' or 'drop_oldest' (got 'drop')" },
      { { tokenizer = tok, step = step, system = "hi" }, "chat.new: system must be a table (got string)" },
      { { tokenizer = tok, step = step, system = { effort = "low" } }, "chat.new: system: unknown option 'effort'" },
      { { tokenizer = tok, step = step, system = { reasoning = "extreme" } }, "chat.new: system: ", "extreme" },
      { { tokenizer = tok, step = step, developer = 1 }, "chat.new: developer must be a table (got number)" },
      { { tokenizer = tok, step = step, developer = { tools = {} } }, "chat.new: developer.tools: give function tools as tools" },
      { { tokenizer = tok, step = step, tools = 1 }, "chat.new: tools must be a table" },
      { { tokenizer = tok, step = step, tools = { 1 } }, "chat.new: tools: a tool's name must be letters, digits and _ (got 1)" },
      { { tokenizer = tok, step = step, tools = { f = 1 } }, "chat.new: tools.f must be a table (got number)" },
      { { tokenizer = tok, step = step, tools = { f = { fn = print, args = {} } } }, "chat.new: tools.f: unknown field 'args'" },
      { { tokenizer = tok, step = step, tools = { f = {} } }, "chat.new: tools.f: fn must be a function (got nil)" },
      { { tokenizer = tok, step = step, tools = { f = { fn = print, parameters = { type = "object", properties = 1 } } } },
        "chat.new: developer: ", "properties must be a table" },
    }
    for _, case in ipairs(cases) do
      H.expect_error(function() chat.new(case[1]) end, table.unpack(case, 2))
    end
  end)

  it("refuses bad session:ask arguments and a step that returns no id", function()
    tokenizer(pending)
    local s = chat.new { tokenizer = tok, step = function() return 0 end }
    for _, case in ipairs {
      { { 1 }, "session:ask: text must be a string (got number)" },
      { { "hi", 1 }, "session:ask: options must be a table (got number)" },
      { { "hi", { stream = print } }, "session:ask: unknown option 'stream'" },
      { { "hi", { on_text = 1 } }, "session:ask: on_text must be a function (got number)" },
      { { "hi", { on_tool = true } }, "session:ask: on_tool must be a function (got boolean)" },
      { { "hi", { on_drop = 1 } }, "session:ask: on_drop must be a function (got number)" },
      { { "hi", { on_not_harmony = "x" } }, "session:ask: on_not_harmony must be a function (got string)" },
      { { "hi", { cancel = true } }, "session:ask: cancel must be a function (got boolean)" },
      { { "hi", { max_tokens = 1.5 } }, "session:ask: max_tokens must be an integer >= 1 (got 1.5)" },
    } do
      H.expect_error(function() s:ask(table.unpack(case[1])) end, case[2])
    end
    local bad = chat.new { tokenizer = tok, step = function() return "x" end }
    H.expect_error(function() bad:ask("hi") end, "session:ask: step returned x, not a token id")
  end)
end)
