-- Structured output in harmony turns (gptoss.constraint, docs/structured.md#harmony-turns):
-- for_turn's plan (the "# Response Formats" section, prefills, refused options), the tracker
-- followed id by id (analysis free, the final channel and strict tools' arguments under their
-- grammars, a required call, a reasoning budget), then gptoss.chat and gptoss.generate with a
-- format (scripted models and a 7m CPU replica), and `gptoss chat --json-schema`.
local gptoss = require "gptoss"
local chat = require "gptoss.chat"
local constraint = require "gptoss.constraint"
local generate = require "gptoss.generate"
local harmony = require "gptoss.harmony"
local H = require "helpers"
local json = require "dkjson"
local expect_error = H.expect_error

local function tok() return H.tokenizer(pending) end
-- ids of harmony text, specials spelled
local function ids(text) return tok():encode(text, { special = true, mode = "o200k" }) end

local POINT = { type = "object", additionalProperties = false, required = { "x" },
  properties = { x = { type = "integer", minimum = 0, maximum = 9 } } }
local RF = { type = "json_schema", json_schema = { name = "point", description = "A point.", schema = POINT } }
local TOOLS = {
  { type = "function", ["function"] = { name = "get", strict = true, parameters = POINT } },
  { type = "function", ["function"] = { name = "loose-one", parameters = POINT } },
}

-- Pushes each id of text into tracker t, returning the ids it forced after the last.
local function push_all(t, text)
  local forced
  for _, id in ipairs(ids(text)) do forced = t:push(id) end
  return forced
end

describe("constraint.for_turn", function()
  it("renders the response format's section and prefills the final channel for no reasoning", function()
    local plan = constraint.for_turn(tok(), { response_format = RF })
    assert.are.equal('# Response Formats\n\n## point\n\n// A point.\n{"additionalProperties":false,'
      .. '"properties":{"x":{"maximum":9,"minimum":0,"type":"integer"}},"required":["x"],"type":"object"}',
      plan.developer_section)
    assert.are.same({}, plan.prefill)
    assert.are.same(ids("<|channel|>final<|message|>"),
      constraint.for_turn(tok(), { response_format = RF, reasoning_effort = "none" }).prefill)
    assert.is_nil(constraint.for_turn(tok(), { response_format = { type = "json_object" } }).developer_section)
    assert.is_nil(constraint.for_turn(tok(), { response_format = { type = "text" } }):new():matcher())
  end)

  it("refuses bad options, naming them", function()
    local function refused(opts, ...)
      expect_error(function() constraint.for_turn(tok(), opts) end, "constraint.for_turn: ", ...)
    end
    refused({ response_format = { type = "xml" } }, "response_format.type must be text, json_object or json_schema")
    refused({ response_format = { type = "json_schema", json_schema = {} } }, "json_schema must be {name =")
    refused({ response_format = { type = "json_schema", json_schema = { name = "p", schema = { typ = 1 } } } },
      "response_format.json_schema: format: $: unknown keyword 'typ'")
    refused({ format = POINT, response_format = RF }, "give format or response_format, not both")
    refused({ format = 5 }, "format must be a grammar or a JSON schema")
    refused({ tool_choice = "required" }, "tool_choice \"required\" needs tools")
    refused({ tools = TOOLS, tool_choice = { type = "function", ["function"] = { name = "nope" } } },
      "tool_choice must be auto, none, required")
    refused({ tools = { { type = "function" } } }, "tools[1] must be {type = \"function\"")
    refused({ max_reasoning_tokens = -1 }, "max_reasoning_tokens must be an integer >= 0")
    refused({ effort = "low" }, "unknown option 'effort'")
    expect_error(function() constraint.for_turn({}, {}) end, "tokenizer must be a gptoss tokenizer")
  end)
end)

describe("constraint.grammar", function()
  it("compiles a schema's JSON text once among the latest 32 texts, a table each time", function()
    local text = '{"type": "object", "properties": {"x": {"type": "integer"}}}'
    local g = constraint.grammar("f", text)
    assert.are.equal(g, constraint.grammar("f", text))
    assert.are_not.equal(g, constraint.grammar("f", text .. " "))
    assert.are_not.equal(constraint.grammar("f", POINT), constraint.grammar("f", POINT))
    for i = 1, 32 do constraint.grammar("f", ('{"type": "integer", "maximum": %d}'):format(i)) end
    assert.are_not.equal(g, constraint.grammar("f", text)) -- evicted, compiled again
    expect_error(function() constraint.grammar("f", '{"typ": 1}') end, "f: format: $: unknown keyword 'typ'")
  end)
end)

describe("a turn's tracker", function()
  it("leaves the analysis free and draws the final channel's message under the format", function()
    local t = constraint.for_turn(tok(), { response_format = RF }):new()
    assert.is_nil(t:matcher())
    push_all(t, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>")
    local m = t:matcher()
    assert.is_not_nil(m)
    assert.is_false(m:allows(ids("hello")[1]))
    push_all(t, '{"x":7}')
    assert.is_true(m:allows(harmony.special["return"]) and m:allows(harmony.special["end"]))
    assert.is_false(t.finished)
    t:push(harmony.special["return"])
    assert.is_true(t.finished)
    local bad = constraint.for_turn(tok(), { format = POINT, reasoning_effort = "none" }):new()
    expect_error(function() push_all(bad, '{"x":12}') end, "the reply's final does not fit its constraint")
  end)

  it("constrains a strict tool's arguments, not another's", function()
    local plan = constraint.for_turn(tok(), { tools = TOOLS })
    local t = plan:new()
    push_all(t, "<|channel|>commentary to=functions.get <|constrain|>json<|message|>")
    assert.is_not_nil(t:matcher())
    push_all(t, '{"x":1}<|call|>')
    assert.is_true(t.finished)
    t = plan:new()
    push_all(t, "<|channel|>commentary to=functions.loose-one <|constrain|>json<|message|>")
    assert.is_nil(t:matcher())
  end)

  it("makes a required call: the analysis cannot end the turn, then the call's header is forced", function()
    local plan = constraint.for_turn(tok(), { tools = TOOLS, tool_choice = "required" })
    assert.are.same(ids("<|channel|>analysis<|message|>"), plan.prefill)
    local t = plan:new()
    assert.is_false(t:matcher():allows(harmony.special["return"]))
    local forced = push_all(t, "Hmm.<|end|>")
    assert.are.same(ids("<|start|>assistant<|channel|>commentary to=functions."), forced)
    local names = t:matcher()
    assert.is_true(names:allows(ids("get")[1]))
    assert.is_false(names:allows(ids("other")[1]))
    forced = push_all(t, "get<|constrain|>")
    assert.are.same(ids("json<|message|>"), forced)
    push_all(t, '{"x":3}<|call|>')
    assert.is_true(t.finished)
    -- a named tool, no reasoning: the call's header at once
    plan = constraint.for_turn(tok(), { tools = TOOLS, reasoning_effort = "none",
      tool_choice = { type = "function", ["function"] = { name = "loose-one" } } })
    assert.are.same(ids("<|channel|>commentary to=functions."), plan.prefill)
    t = plan:new()
    assert.is_false(t:matcher():allows(ids("get")[1]))
    push_all(t, "loose-one<|constrain|>")
    assert.is_not_nil(t:matcher(), "a required call's arguments are an object at least")
  end)

  it("forces the final channel once the reasoning budget is spent", function()
    local t = constraint.for_turn(tok(), { format = POINT, max_reasoning_tokens = 3 }):new()
    local forced = push_all(t, "<|channel|>analysis")
    assert.are.same({}, forced)
    forced = t:push(ids("<|message|>")[1])
    assert.are.same(ids("<|end|><|start|>assistant<|channel|>final<|message|>"), forced)
    assert.is_not_nil(t:matcher())
    assert.are.same({}, push_all(t, '{"x":5}<|return|>'))
    assert.is_true(t.finished)
  end)
end)

-- A model that plays back harmony text one id a step (chat_spec's scripted model, simpler).
local function scripted(text)
  local queue, played = ids(text), 0
  return function()
    played = played + 1
    return assert(queue[played], "the script is over")
  end
end

describe("chat with a format", function()
  it("shows the schema to the model and refuses a scripted answer outside it", function()
    local script = "<|channel|>analysis<|message|>ok<|end|>"
      .. '<|start|>assistant<|channel|>final<|message|>{"x":4}<|return|>'
    local s = chat.new { tokenizer = tok(), format = POINT, step = scripted(script) }
    local shown = harmony.render(s.messages)
    assert.truthy(shown:find('<|start|>developer<|message|># Response Formats\n\n## response', 1, true), shown)
    local answer, stats = s:ask("A point?")
    assert.are.equal('{"x":4}', answer)
    assert.are.equal("return", stats.finish)
    local bad = chat.new { tokenizer = tok(), step = scripted('<|channel|>final<|message|>{"y":1}<|return|>') }
    expect_error(function() bad:ask("A point?", { format = POINT }) end, "the reply's final does not fit")
    expect_error(function() chat.new { tokenizer = tok(), step = scripted(""), format = { typ = 1 } } end,
      "chat.new: format: $: unknown keyword 'typ'")
    expect_error(function() bad:ask("?", { max_reasoning_tokens = "x" }) end,
      "session:ask: max_reasoning_tokens must be an integer >= 0")
  end)

  it("answers in the format on a 7m replica, without reasoning or after a budget", function()
    local r <close> = gptoss.synthetic("7m"):replica { device = "cpu", slots = 1, ctx = 512 }
    for _, opts in ipairs { { system = { reasoning = "none" } }, { max_reasoning_tokens = 8 } } do
      local s = chat.new { replica = r, tokenizer = tok(), sampling = { temperature = 1, seed = 9 }, format = POINT,
        system = opts.system, max_reasoning_tokens = opts.max_reasoning_tokens }
      local answer, stats = s:ask("A point?", { max_tokens = 100 })
      local value = json.decode(answer)
      assert.is_true(type(value) == "table" and value.x >= 0 and value.x <= 9, answer)
      assert.truthy(stats.finish == "return" or stats.finish == "end", stats.finish)
    end
  end)
end)

describe("generate with a format", function()
  it("decodes under a schema until its end, one sample or several", function()
    local r <close> = gptoss.synthetic("7m"):replica { device = "cpu", slots = 3, ctx = 128 }
    local stop = { ids = { { tok().special["end"] } }, tokenizer = tok() }
    local out = generate.run { replica = r, prompt = ids("Point:"), format = POINT, tokenizer = tok(), stop = stop,
      sampling = { temperature = 1, seed = 2 }, max_tokens = 100 }
    assert.are.equal("stop", out.finish)
    assert.is_true(json.decode(out.text).x <= 9, out.text)
    -- without end ids: the output ends where nothing may follow
    out = generate.run { replica = r, prompt = ids("Point:"), format = gptoss.grammar.regex("[ab]{3}"),
      tokenizer = tok(), sampling = { temperature = 1, seed = 4 }, max_tokens = 50 }
    assert.are.equal("stop", out.finish)
    assert.truthy(tok():decode(out.ids):match("^[ab][ab][ab]$"), tok():decode(out.ids))
    local many = generate.parallel { replica = r, prompt = ids("Point:"), n = 3, format = POINT, tokenizer = tok(),
      stop = stop, sampling = { temperature = 1, seed = 6 }, max_tokens = 100 }
    for _, sample in ipairs(many.samples) do assert.is_true(json.decode(sample.text).x <= 9, sample.text) end
    expect_error(function() generate.run { replica = r, prompt = { 1 }, format = POINT } end,
      "generate.run: format needs tokenizer")
  end)
end)

describe("gptoss chat --json-schema", function()
  it("answers with JSON valid under the file's schema, and refuses a bad file", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/point.json", json.encode(POINT))
    H.write_file(dir .. "/bad.json", '{"type": "object", "properties": {"x": {"typ": 1}}}')
    local base = { "chat", "7m", "--device", "cpu", "--ctx", "512", "--max-tokens", "100", "--seed", "3" }
    local function run(...)
      local args = table.move(base, 1, #base, 1, {})
      table.move({ ... }, 1, select("#", ...), #args + 1, args)
      return H.gptoss(pending, dir, args, nil, "A point?\n")
    end
    local code, out, err = run("--json-schema", "point.json", "--reasoning", "none")
    assert.are.equal(0, code, err)
    assert.is_true(json.decode(out).x <= 9, out)
    code, out, err = run("--json-schema", "point.json", "--reasoning-budget", "4")
    assert.are.equal(0, code, err)
    assert.truthy(out:find('{"x":%d}\n$'), out)
    code, _, err = run("--json-schema", "bad.json")
    assert.are.equal(1, code)
    assert.truthy(err:find("chat.new: format: $.properties.x: unknown keyword 'typ'", 1, true), err)
    code, _, err = run("--reasoning-budget=-1")
    assert.are.equal(1, code)
    assert.truthy(err:find("--reasoning-budget: '-1' is not an integer >= 0", 1, true), err)
  end)
end)
