-- gptoss.harmony: rendering against openai/harmony's expected renderings, token ids through
-- the o200k encode mode, the streaming parser on harmony's sample completions, strict and
-- lenient recovery, UTF-8 safe deltas, and every bad-input error.
--
-- tests/fixtures/harmony/*.txt are openai/harmony's test-data files (Apache-2.0, commit
-- ec7606df), renamed without their "test_" prefix; tools.json holds the tool definitions
-- and function schemas those tests render (see its _source). As harmony's tests do, the
-- expected texts are compared with trailing whitespace trimmed.

local gptoss = require "gptoss"
local harmony = require "gptoss.harmony"
local H = require "helpers"
local json = require "dkjson"

local FIXTURES = "tests/fixtures/harmony/"
local function expected(name) return (H.read_file(FIXTURES .. name .. ".txt"):gsub("%s+$", "")) end
local tools = json.decode(H.read_file(FIXTURES .. "tools.json"))

local ROBOT = "Answer the user's questions like a robot."
local LARGEST = "What is the capital of the largest country in the world?"

-- harmony's test_does_not_drop_if_ongoing_analysis conversation: a tool call and its answer
local weather = {
  harmony.user("What is the weather in SF?"),
  harmony.assistant("User asks: “What is the weather in SF?” We need to use lookup_weather tool.",
    { channel = "analysis" }),
  harmony.assistant('{"location": "San Francisco"}',
    { channel = "commentary", recipient = "functions.lookup_weather", content_type = "<|constrain|>json" }),
  harmony.tool("functions.lookup_weather", '{"temperature": 20, "description": "sunny"}'),
}

describe("harmony.render", function()
  it("renders harmony's simple conversations at every reasoning effort", function()
    assert.are.equal(expected("simple_convo"),
      harmony.render({ harmony.system{}, harmony.user("What is 2 + 2?") }))
    for _, effort in ipairs({ "low", "medium", "high" }) do
      assert.are.equal(expected("simple_convo_" .. effort .. "_effort"), harmony.render({
        harmony.system{ reasoning = effort }, harmony.developer{ instructions = ROBOT }, harmony.user(LARGEST) }))
      assert.are.equal(expected("simple_convo_" .. effort .. "_effort_no_instruction"),
        harmony.render({ harmony.system{ reasoning = effort }, harmony.user(LARGEST) }))
    end
  end)

  it("renders system content: channels, dates and knowledge cutoff", function()
    local two = { "analysis", "final" }
    assert.are.equal(expected("reasoning_system_message"),
      harmony.render({ harmony.system{ channels = two }, harmony.user("What is 2 + 2?") }))
    assert.are.equal(expected("reasoning_system_message_no_instruction"), harmony.render({
      harmony.system{ channels = two, reasoning = "high" },
      harmony.user("What is the best place to eat candy in the world?") }))
    assert.are.equal(expected("reasoning_system_message_with_dates"), harmony.render({
      harmony.system{ channels = two, date = "2021-01-01", knowledge_cutoff = "2021-01" },
      harmony.user("What is 42 * pi?") }))
    assert.are.equal(expected("no_tools"), harmony.render({ harmony.system{ date = "2025-06-28" } }))
  end)

  it("leaves out system fields set to false", function()
    assert.are.equal("<|start|>system<|message|>Reasoning: low<|end|>", harmony.render(
      { harmony.system{ identity = false, knowledge_cutoff = false, channels = false, reasoning = "low" } },
      { completion = false }))
  end)

  it("renders built-in tool namespaces, sorted by name, and function tools", function()
    local date = "2025-06-28"
    assert.are.equal(expected("browser_tool_only"),
      harmony.render({ harmony.system{ date = date, tools = { tools.browser } } }))
    assert.are.equal(expected("browser_and_python_tool"),
      harmony.render({ harmony.system{ date = date, tools = { tools.python, tools.browser } } }))
    assert.are.equal(expected("browser_and_function_tool"), harmony.render({
      harmony.system{ date = date, tools = { tools.browser } }, harmony.developer{ tools = tools.lookup_weather } }))
    assert.are.equal(expected("render_functions_with_parameters"), harmony.render({
      harmony.system{ reasoning = "high", date = date },
      harmony.developer{ instructions = "Always respond in riddles", tools = tools.functions_with_parameters },
      harmony.user("What is the weather like in SF?") }))
  end)

  it("orders properties by name without property_order, and renders nested objects", function()
    local text = harmony.render({ harmony.developer{ tools = { { name = "f", parameters = {
      type = "object", required = { "b" },
      properties = { b = { type = "integer" }, a = { type = "object", properties = { x = { type = "array" } } } },
    } } } } }, { completion = false })
    assert.truthy(text:find("type f = (_: {\na?: {\n    x?: Array<any>,\n    },\nb: number,\n}) => any;", 1, true), text)
  end)

  it("copies a schema with each object's properties in the order a key-order function gives (harmony_tools.ordered)",
    function()
      local harmony_tools = require "gptoss.harmony_tools"
      local inner = { type = "object", properties = { y = {}, x = {} }, property_order = { "x", "y" } }
      local schema = { type = "object", properties = { b = { type = "array", items = inner }, a = { oneOf = { inner } } } }
      local orders = { [schema.properties] = { "b", "gone", "a" } } -- a key the table lacks is left out
      local copy = harmony_tools.ordered(schema, function(t) return orders[t] end)
      assert.are.same({ "b", "a" }, copy.property_order)
      assert.are.same({ { "x", "y" }, { "x", "y" } }, { copy.properties.b.items.property_order,
        copy.properties.a.oneOf[1].property_order }) -- no order given: the object's own
      assert.is_nil(schema.property_order) -- the schema itself is left as it was
      local text = harmony.render({ harmony.developer{ tools = { { name = "f", parameters = copy } } } },
        { completion = false })
      assert.truthy(text:find("type f = (_: {\nb?: {\n    x?: any,\n    y?: any,\n    }[],\na?:", 1, true), text)
    end)


  it("drops analysis before the first final answer once the last assistant message is final", function()
    local convo = {
      harmony.user("What is 2 + 2?"),
      harmony.assistant('User asks a simple question: "What is 2 + 2?" The answer: 4.', { channel = "analysis" }),
      harmony.assistant("2 + 2 equals 4.", { channel = "final" }),
      harmony.user("What about 9 / 2?"),
    }
    assert.are.equal(expected("dropping_cot_by_default"), harmony.render(convo))
    assert.are.equal(expected("preserve_cot"), harmony.render(convo, { drop_analysis = false }))
    assert.are.equal(expected("does_not_drop_if_ongoing_analysis"), harmony.render(weather))
    assert.are.equal(expected("keep_analysis_between_finals"), harmony.render({
      harmony.user("What is 2 + 2?"), harmony.assistant("thinking 2+2", { channel = "analysis" }),
      harmony.assistant("4", { channel = "final" }), harmony.user("What is 3 + 5?"),
      harmony.assistant("thinking 3+5", { channel = "analysis" }), harmony.assistant("8", { channel = "final" }),
    }, { completion = false }))
  end)

  it("accepts plain message tables and a user's name", function()
    assert.are.equal("<|start|>user:ann<|message|>hi<|end|><|start|>assistant",
      harmony.render({ { role = "user", name = "ann", content = "hi" } }))
  end)

  it("rejects bad conversations, messages, options and schemas, naming the message", function()
    local cases = {
      { function() harmony.render("hi") end, "harmony.render: conversation must be a list of messages (got string)" },
      { function() harmony.render({}, { complete = false }) end, "harmony.render: unknown option 'complete'" },
      { function() harmony.render({ "hi" }) end, "harmony.render: message 1: must be a table (got string)" },
      { function() harmony.render({ harmony.user("a"), { role = "bot", content = "x" } }) end,
        "harmony.render: message 2: role must be one of system, developer, user, assistant, tool (got 'bot')" },
      { function() harmony.render({ { role = "user", content = "x", chanel = "final" } }) end,
        "harmony.render: message 1: unknown field 'chanel'" },
      { function() harmony.render({ { role = "tool", content = "x" } }) end,
        "harmony.render: message 1: a tool message needs the tool's name" },
      { function() harmony.render({ { role = "user", content = {} } }) end,
        "harmony.render: message 1: content of a user message must be a string (got table)" },
      { function() harmony.render({ { role = "system", content = 3 } }) end,
        "harmony.render: message 1: content must be a string or a table (got number)" },
      { function() harmony.render({ { role = "user", content = "x", channel = "" } }) end,
        "harmony.render: message 1: channel must be a non-empty string (got '')" },
      { function() harmony.render({ { role = "system", content = { reasoning = "max" } } }) end,
        "harmony.render: message 1: reasoning must be low, medium or high (got 'max')" },
      { function() harmony.render({ { role = "system", content = { tool = {} } } }) end,
        "harmony.render: message 1: system content: unknown field 'tool'" },
      { function() harmony.render({ { role = "system", content = { tools = { "browser" } } } }) end,
        "harmony.render: message 1: tools[1] must be a namespace {name=, description=, tools=}" },
      { function() harmony.render({ harmony.developer{ tools = { { description = "x" } } } }) end,
        "harmony.render: message 1: namespace 'functions': tool 1 must be a table with a string name" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = 1 } } } }) end,
        "namespace 'functions': tool 'f': parameters: schema must be a table (got number)" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = { type = "object",
        properties = { a = { type = "string", default = {} } } } } } } }) end,
        "tool 'f': parameters: property 'a': default must be a string, a finite number or a boolean (got table" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = { type = "object",
        properties = { a = {}, b = {} }, property_order = { "a" } } } } } }) end,
        "parameters: property_order must list each of the 2 properties once" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = { type = "object",
        properties = { a = {}, b = {} }, property_order = { "a", "a" } } } } } }) end,
        "parameters: property_order names 'a', not a property or named twice" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = { type = "object",
        properties = { "a" } } } } } }) end, "parameters: properties must be keyed by name (got key 1)" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = { type = "object",
        properties = "a" } } } } }) end, "parameters: properties must be a table (got string)" },
      { function() harmony.render({ harmony.developer{ tools = { { name = "f", parameters = { type = "object",
        properties = { a = true } } } } } }) end, "parameters: property 'a': schema must be a table (got boolean)" },
    }
    for _, case in ipairs(cases) do H.expect_error(case[1], case[2]) end
  end)

  it("refuses a schema inside itself, where it would recurse until memory ran out, not one used twice", function()
    local function render(parameters)
      return harmony.render({ harmony.developer{ tools = { { name = "f", parameters = parameters } } } })
    end
    local object = { type = "object", properties = {} }
    object.properties.x = object
    local list = { type = "array" }
    list.items = list
    local either = { type = "object" }
    either.oneOf = { { type = "string" }, either }
    for _, case in ipairs { { object, "parameters: property 'x': the schema contains itself" },
      { list, "tool 'f': parameters: the schema contains itself" }, { either, "parameters: the schema contains itself" } } do
      H.expect_error(function() render(case[1]) end, "harmony.render: message 1: namespace 'functions': ", case[2])
    end
    local point = { type = "number" }
    assert.truthy(render({ type = "object", properties = { x = point, y = point } }):find("x?: number,\ny?: number,", 1, true))
  end)
end)

describe("harmony message builders", function()
  it("build messages", function()
    assert.are.same({ role = "user", content = "hi" }, harmony.user("hi"))
    assert.are.same({ role = "assistant", content = "{}", channel = "commentary", recipient = "functions.f",
      content_type = "json" }, harmony.assistant("{}", { channel = "commentary", recipient = "functions.f",
      content_type = "json" }))
    assert.are.same({ role = "tool", name = "functions.f", content = "1" }, harmony.tool("functions.f", "1"))
    assert.are.same({ role = "system", content = { reasoning = "low" } }, harmony.system{ reasoning = "low" })
    assert.are.same({ role = "developer", content = {} }, harmony.developer())
  end)

  it("reject bad arguments", function()
    H.expect_error(function() harmony.user(1) end, "harmony.user: text must be a string (got number)")
    H.expect_error(function() harmony.assistant("x", { chanel = "final" }) end,
      "harmony.assistant: unknown option 'chanel'")
    H.expect_error(function() harmony.tool(nil, "x") end, "harmony.tool: name must be a non-empty string (got nil)")
    H.expect_error(function() harmony.system{ effort = "low" } end, "harmony.system: unknown option 'effort'")
    H.expect_error(function() harmony.developer("x") end, "harmony.developer: options must be a table (got string)")
  end)
end)

describe("harmony.render_ids", function()
  local function o200k_tokenizer(pending)
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    if not pcall(tok.encode, tok, "x", { mode = "o200k" }) then pending("needs the o200k encode mode") end
    return tok
  end

  it("gives harmony's ids: specials by id, text through the o200k encoding", function()
    local tok = o200k_tokenizer(pending)
    local ids = harmony.render_ids({ harmony.user("What is 2 + 2?") }, tok)
    assert.are.same({ 200006, 1428, 200008 }, { ids[1], ids[2], ids[3] })
    assert.are.same({ 200007, 200006, 173781 }, { ids[#ids - 2], ids[#ids - 1], ids[#ids] })
    -- a tool call's <|constrain|> is the special id, ended by <|call|>
    local call = harmony.render_ids({ weather[3] }, tok, { completion = false })
    local specials = {}
    for _, id in ipairs(call) do if id >= 199998 then specials[#specials + 1] = id end end
    assert.are.same({ 200006, 200005, 200003, 200008, 200012 }, specials)
  end)

  it("equals the rendered text encoded whole, specials by id and the text between the o200k way", function()
    local tok = o200k_tokenizer(pending)
    local conversations = {
      { harmony.system{ reasoning = "high", date = "2025-06-28" }, harmony.developer{ instructions = ROBOT },
        harmony.user(LARGEST) },
      weather,
      { harmony.system{}, harmony.user("Say «héllo» 3 times\r\n\n  in 日本語 and ไทย 👨\u{200D}👩\u{200D}👧!") },
    }
    for i, conv in ipairs(conversations) do
      local whole = tok:encode(harmony.render(conv), { special = true, mode = "o200k" })
      assert.are.same(whole, harmony.render_ids(conv, tok), "conversation " .. i)
    end
  end)

  it("rejects what is not a tokenizer", function()
    H.expect_error(function() harmony.render_ids({}, "tok") end,
      "harmony.render_ids: tokenizer must be a gptoss tokenizer (got string)")
  end)
end)

describe("harmony.parser", function()
  local tok
  local function tokenizer(pending)
    tok = tok or gptoss.tokenizer(H.need_tokenizer(pending))
    return tok
  end
  -- every event of feeding ids, then finish()
  local function feed(p, ids)
    local events = {}
    for _, id in ipairs(ids) do
      for _, e in ipairs(p:push(id)) do events[#events + 1] = e end
    end
    for _, e in ipairs(p:finish()) do events[#events + 1] = e end
    return events
  end
  local function specials_text(text) return tokenizer(pending):encode(text, { special = true }) end

  it("exposes the stop ids", function()
    assert.are.same({ 200002, 200012, 199999 }, harmony.stop_ids)
  end)

  it("parses the completion of harmony's docs/format.md, starting inside the header", function()
    -- the fixture is that sequence with <|return|> for its first <|end|> and without its last id
    local ids = {}
    for n in H.read_file(FIXTURES .. "simple_reasoning_response.txt"):gmatch("%d+") do ids[#ids + 1] = tonumber(n) end
    ids[#ids + 1] = 200002
    local p = harmony.parser(tokenizer(pending), { role = "assistant" })
    local events = feed(p, ids)
    assert.are.same({
      { role = "assistant", channel = "analysis", content = 'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.' },
      { role = "assistant", channel = "final", content = "2 + 2 = 4." },
    }, p.messages)
    assert.are.same({ type = "start", role = "assistant", channel = "analysis" }, events[1])
    assert.are.equal("return", events[#events].stop)
    local text = {}
    for _, e in ipairs(events) do if e.type == "text" then text[#text + 1] = e.text end end
    assert.are.equal(p.messages[1].content .. p.messages[2].content, table.concat(text))
  end)

  it("parses harmony's streaming sample: a tool call, a tool's answer, recipients and content types", function()
    local p = harmony.parser(tokenizer(pending), { role = "assistant" })
    feed(p, specials_text(expected("streamable_parser")))
    assert.are.equal(3, #p.messages)
    assert.are.same({ role = "assistant", channel = "commentary", recipient = "browser.search", content_type = "code",
      content = '{"query": "current US president July 2025", "topn": 10, "source": "news"}' }, p.messages[2])
    assert.are.same({ role = "tool", name = "browser.search", channel = "commentary", recipient = "assistant",
      content = '{"result": "https://openai.com/"}' }, p.messages[3])
  end)

  it("reads back what render writes, <|constrain|> included", function()
    local p = harmony.parser(tokenizer(pending))
    feed(p, specials_text(harmony.render(weather, { completion = false })))
    assert.are.same(weather, p.messages)
  end)

  it("never splits a character across text deltas", function()
    local bytes = { "a\xF0", "\x9F", "\x92\x96b", "\xE2\x82" }
    local p = harmony.parser(function(id) return bytes[id] end, { role = "assistant" })
    local deltas = {}
    for _, e in ipairs(feed(p, { 200008, 1, 2, 3, 4 })) do if e.type == "text" then deltas[#deltas + 1] = e.text end end
    -- the cut-short message's unfinished character becomes U+FFFD, byte by byte
    assert.are.same({ "a", "💖b", "\u{FFFD}\u{FFFD}" }, deltas)
    assert.is_nil(p.messages[1].stop)
  end)

  it("replaces invalid bytes by U+FFFD", function()
    local bytes = { "a\xFFb", "\xC3(" }
    local p = harmony.parser(function(id) return bytes[id] end, { role = "user" })
    feed(p, { 200008, 1, 2, 200007 })
    assert.are.equal("a\u{FFFD}b\u{FFFD}(", p.messages[1].content)
  end)

  it("replaces invalid bytes in headers, released or read, keeping characters split across ids", function()
    local bytes = { "fin\xFF a\xF0", "\x9F\x92\x96\xFF", "caf\xC3", "\xA9 to=x\xC3", " json\xFF", "ok" }
    local decode = function(id) return bytes[id] end
    -- lenient: a byte past ASCII is no header's, so what was held is released as content
    local p = harmony.parser(decode, { role = "assistant", strict = false })
    local events = feed(p, { 200005, 1, 2, 200007 })
    assert.are.same({ { role = "assistant", content = "<|channel|>fin\u{FFFD} a\u{1F496}\u{FFFD}" } }, p.messages)
    assert.are.same({ type = "start", role = "assistant", not_harmony = true }, events[1])
    assert.are.same({ { type = "text", text = "<|channel|>fin\u{FFFD} a" }, { type = "text", text = "\u{1F496}\u{FFFD}" } },
      { events[2], events[3] })
    -- strict: the header's fields
    p = harmony.parser(decode)
    feed(p, { 200006, 3, 4, 5, 200008, 6, 200007 })
    assert.are.same({ { role = "tool", name = "caf\u{E9}", recipient = "x\u{FFFD}", content_type = "json\u{FFFD}",
      content = "ok" } }, p.messages)
  end)

  it("refuses ids past the vocabulary, strict or not, and a decode function's failures, naming the id", function()
    tokenizer(pending)
    local past = ("harmony.parser: push expects an id of the tokenizer's vocabulary, 0..%d (got %d)")
      :format(tok.vocab_size - 1, tok.vocab_size)
    for _, strict in ipairs { true, false } do
      -- before a message, in a header, in content
      for _, before in ipairs { "", "<|start|>assistant", "<|start|>assistant<|message|>hi" } do
        local p = harmony.parser(tok, { strict = strict })
        for _, id in ipairs(specials_text(before)) do p:push(id) end
        H.expect_error(function() p:push(tok.vocab_size) end, past)
        H.expect_error(function() p:push(1000000000) end, "(got 1000000000)")
      end
    end
    local decode = function(id)
      if id == 2 then error("no id 2") end
      return id == 1 and "a" or nil
    end
    local p = harmony.parser(decode, { role = "assistant" })
    p:push(200008)
    p:push(1)
    H.expect_error(function() p:push(2) end, "harmony.parser: cannot decode id 2: no id 2")
    H.expect_error(function() p:push(3) end, "harmony.parser: cannot decode id 3: the decode function returned nil")
    -- an error naming a special the function cannot decode names it by its id
    H.expect_error(function() feed(harmony.parser(decode), { 200014 }) end, "harmony.parser: expected <|start|>, got id 200014")
  end)

  local malformed = {
    { "I must refuse<|end|><|start|>assistant<|channel|>final<|message|>No.<|return|>",
      { { role = "assistant", content = "I must refuse" }, { role = "assistant", channel = "final", content = "No." } },
      "'<|end|>' (200007) inside the message header 'I must refuse' (no <|message|>)" },
    { "<|channel|>analysis I must refuse<|end|>",
      { { role = "assistant", channel = "analysis", content = "I must refuse" } },
      "'<|end|>' (200007) inside the message header" },
    { "<|channel|>commentary to=functions.f json extra<|message|>{}<|call|>",
      { { role = "assistant", channel = "commentary", recipient = "functions.f", content_type = "json", content = "{}" } },
      "bad message header '<|channel|>commentary to=functions.f json extra': unexpected text 'extra'" },
    { "<|channel|><|message|>hi<|end|>", { { role = "assistant", content = "hi" } },
      "bad message header '<|channel|>': <|channel|> is not followed by a channel name" },
    { "<|channel|>final<|message|>Hi<|start|>assistant<|channel|>final<|message|>again<|end|>",
      { { role = "assistant", channel = "final", content = "Hi" }, { role = "assistant", channel = "final", content = "again" } },
      "unexpected '<|start|>' (200006) in message content" },
    { "<|message|>a<|channel|>b<|end|>", { { role = "assistant", content = "ab" } },
      "unexpected '<|channel|>' (200005) in message content" },
    { "<|message|>a<|end|>stray<|start|>user<|message|>b<|end|>",
      { { role = "assistant", content = "a" }, { role = "assistant", content = "stray" }, { role = "user", content = "b" } },
      "expected <|start|>, got 'str' (689)" },
    { "<|message|>a<|end|><|message|>b<|end|>", { { role = "assistant", content = "a" }, { role = "assistant", content = "b" } },
      "expected <|start|>, got '<|message|>' (200008)" },
    { "<|channel|>final<|reserved_200014|><|message|>a<|end|>", { { role = "assistant", channel = "final", content = "a" } },
      "unexpected '<|reserved_200014|>' (200014) in a message header" },
    { "<|channel|>analysis cut", { { role = "assistant", channel = "analysis", content = "cut" } },
      "the stream ended inside the message header '<|channel|>analysis cut'" },
  }

  it("raises on malformed output when strict (the default), naming the offending token", function()
    for _, case in ipairs(malformed) do
      local p = harmony.parser(tokenizer(pending), { role = "assistant" })
      H.expect_error(function() feed(p, specials_text(case[1])) end, "harmony.parser: ", case[3])
    end
  end)

  it("recovers from malformed output when lenient", function()
    for _, case in ipairs(malformed) do
      local p = harmony.parser(tokenizer(pending), { role = "assistant", strict = false })
      feed(p, specials_text(case[1]))
      assert.are.same(case[2], p.messages, case[1])
    end
  end)

  it("streams what is not harmony when lenient, from the first byte no header holds or past 128 bytes", function()
    local pieces = { "Once", " upon", " a time\n", "there", "é" }
    local decode = function(id) return pieces[id] end
    for _, case in ipairs {
      -- a line break, then a byte past ASCII: released at that id, the held text first
      { { 1, 2, 3, 4 }, 3, "Once upon a time\nthere" },
      { { 1, 5, 2 }, 2, "Onceé upon" },
    } do
      local p = harmony.parser(decode, { role = "assistant", strict = false })
      local texts, released_at = {}, nil
      for i, id in ipairs(case[1]) do
        for _, e in ipairs(p:push(id)) do
          if e.type == "start" then released_at = e.not_harmony and i end
          if e.type == "text" then texts[#texts + 1] = e.text end
        end
      end
      assert.are.equal(case[2], released_at)
      assert.are.equal(case[3], table.concat(texts))
      feed(p, { 200002 })
      assert.are.same({ { role = "assistant", content = case[3] } }, p.messages)
    end
    -- plain ASCII words are held as a header up to 128 bytes: a real header is shorter
    local words = function() return "word " end
    local p = harmony.parser(words, { role = "assistant", strict = false })
    local released
    for i = 1, 30 do
      for _, e in ipairs(p:push(1)) do
        if e.type == "start" then released = released or (e.not_harmony and i) end
      end
    end
    assert.are.equal(26, released) -- 26 * 5 bytes > 128
    -- strict: the same text is an error at the end, as before
    p = harmony.parser(decode, { role = "assistant" })
    for _, id in ipairs { 1, 2, 3, 4 } do assert.are.same({}, p:push(id)) end
    H.expect_error(function() p:push(200007) end, "harmony.parser: ", "inside the message header")
  end)

  it("needs a role in a header it reads whole, and takes unknown authors as tools", function()
    local p = harmony.parser(tokenizer(pending))
    H.expect_error(function() feed(p, specials_text("<|start|>to=x<|message|>a<|end|>")) end,
      "harmony.parser: bad message header 'to=x': no role")
    p = harmony.parser(tokenizer(pending), { strict = false })
    feed(p, specials_text("<|start|>to=x<|message|>a<|end|><|endoftext|>"))
    assert.are.same({ { role = "assistant", content = "a" } }, p.messages)
  end)

  it("rejects bad arguments", function()
    H.expect_error(function() harmony.parser("tok") end,
      "harmony.parser: expected a gptoss tokenizer or a decode function (got string)")
    H.expect_error(function() harmony.parser(tostring, { role = "tool" }) end,
      "harmony.parser: role must be one of system, developer, user, assistant (got 'tool')")
    H.expect_error(function() harmony.parser(tostring, { strcit = true }) end, "harmony.parser: unknown option 'strcit'")
    H.expect_error(function() harmony.parser(tostring):push(1.5) end,
      "harmony.parser: push expects a token id, a non-negative integer (got 1.5)")
  end)
end)
