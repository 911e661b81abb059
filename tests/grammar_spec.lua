-- Structured output (gptoss.grammar, docs/structured.md): the three readers' errors (schema
-- paths, what a regex cannot express, EBNF lines), what a matcher refuses and why, end tokens,
-- masks against the direct check, fork and rollback against replays, forced tokens, a small
-- hand-made vocabulary, and the Lua surface's argument checks and lifetimes. Random walks
-- checked by independent validators are in grammar_walk_spec.lua.

local gptoss = require "gptoss"
local H = require "helpers"
local G = require "grammar_gen"
local expect_error = H.expect_error
local grammar = gptoss.grammar

local tok_cache
local function tok()
  tok_cache = tok_cache or gptoss.tokenizer(H.TOKENIZER)
  return tok_cache
end

-- the ids of text in o200k's tokens
local function ids(text) return tok():encode(text, { mode = "o200k" }) end

-- accepts each id, failing with the reason of the first refused
local function feed(m, list)
  for _, id in ipairs(list) do assert(m:accept(id)) end
  return m
end

-- the mask of m as a string of its words (for comparing states)
local function mask_bytes(m)
  local t = m:mask()
  local parts = {}
  for i = 1, t.numel do parts[i] = string.pack("<i4", t[i]) end
  return table.concat(parts)
end

describe("gptoss.grammar.json_schema", function()
  it("names the schema path of what it refuses", function()
    local cases = {
      { { type = "object", properties = { age = { type = "integer", minimum = 5, maximum = 3 } } },
        "$.properties.age.minimum: 5 is above the maximum 3" },
      { { type = "object", properties = { a = { type = "string", oneOf = {} } } }, "$.properties.a.oneOf: exactly-one" },
      { { type = "array", items = { type = "string", format = "ipv4" } }, "$.items.format: 'ipv4' is not supported" },
      { { type = "object", properties = { a = { type = "strin" } } }, "$.properties.a.type: must be one of" },
      { { type = "object", properties = { a = { typo = 1 } } }, "$.properties.a: unknown keyword 'typo'" },
      { { type = "object", properties = { a = { type = "string" } }, required = { "b" } }, "$.required[0]: 'b' is not among" },
      { { ["$ref"] = "#/$defs/missing" }, "$.$ref: '#/$defs/missing' points at nothing" },
      { { type = "string", pattern = "(a)\\1" }, "$.pattern: offset 3: backreferences" },
      { { type = "integer", minimum = 1.25, maximum = 1.75 }, "$: no integer lies within its minimum and maximum" },
      { { type = "string", uniqueItems = true }, "$.uniqueItems: not supported" },
      { { type = "integer", multipleOf = 2 }, "$.multipleOf: not supported" },
      { { type = "string", maximum = 3 }, "$: it has keywords of type number, which its 'type' does not allow" },
      { { ["$defs"] = { n = { type = "object", properties = { n = { ["$ref"] = "#/$defs/n" } }, required = { "n" } } },
          ["$ref"] = "#/$defs/n" }, "$.$defs.n can never end: every way through it leads into itself again" },
      { { ["$defs"] = { n = { anyOf = { { ["$ref"] = "#/$defs/n" }, { type = "null" } } } }, ["$ref"] = "#/$defs/n" },
        "$.$defs.n calls itself before reading anything" },
    }
    for _, c in ipairs(cases) do expect_error(function() grammar.json_schema(c[1]) end, "json_schema: " .. c[2]) end
    expect_error(function() grammar.json_schema('{"type": "object",') end, "json_schema: $: the schema is not valid JSON")
    expect_error(function() grammar.json_schema({}, { whitespace = 99 }) end, "whitespace must be within 0..64")
    expect_error(function() grammar.json_schema({}, { spaces = 1 }) end, "unknown option 'spaces'")
    expect_error(function() grammar.json_schema(42) end, "json_schema: schema must be a table or a JSON text (got number)")
    expect_error(function() grammar.json_schema({ enum = { print } }) end, "json_schema: schema.enum[1]: a function cannot be JSON")
    expect_error(function() grammar.json_schema({ [1] = "a", x = 1 }) end, "both list entries and named keys")
  end)

  it("reads a table as its JSON text, keys sorted", function()
    local m = grammar.json_schema { type = "object", properties = { b = { type = "boolean" }, a = { type = "null" } },
      required = { "a", "b" }, additionalProperties = false }:matcher(tok())
    local _, text = m:forced()
    assert.are.equal('{"a":null,"b":', text)
  end)
end)

describe("gptoss.grammar.regex", function()
  it("refuses what a DFA cannot express, naming it", function()
    local cases = {
      { "(a)\\1", "backreferences (\\1)" }, { "a(?=b)", "lookahead" }, { "(?<!a)b", "lookbehind" },
      { "(?>ab)", "atomic groups" }, { "a*+", "possessive quantifiers" }, { "\\bword", "word boundaries" },
      { "\\p{L}", "Unicode properties" }, { "(?i)abc", "inline options" }, { "a(?R)?", "recursion" },
      { "a^b", "anchors are only supported at the start" }, { "(ab", "a group is not closed" },
      { "[ab", "a class is not closed" }, { "a{3,2}", "maximum is below its minimum" }, { "*a", "does not follow" },
      { "\\k<x>", "backreferences" }, { "[[:alpha:]]", "POSIX classes" },
    }
    for _, c in ipairs(cases) do expect_error(function() grammar.regex(c[1]) end, "regex: offset ", c[2]) end
    expect_error(function() grammar.regex(1 == 1) end, "bad argument #1")
  end)

  it("matches the whole output, anchors or not, escapes of either dialect", function()
    for _, pattern in ipairs { "ab?c", "^ab?c$", "\\x61b?\\u0063", "\\x{61}[b]?\\u{63}" } do
      local m = grammar.regex(pattern):matcher(tok())
      feed(m, ids("ac"))
      assert.is_true(m:done())
      assert.is_false(m:allows(tok():id("x")))
    end
  end)
end)

describe("gptoss.grammar.ebnf", function()
  it("names the line of what it refuses", function()
    local cases = {
      { 'root ::= a\na ::= "x" b\n', 'line 2: rule \'b\' is not defined' },
      { 'root ::= "a"\nroot ::= "b"\n', "line 2: rule 'root' is defined twice (first at line 1)" },
      { 'start ::= "a"\n', "no rule named root" },
      { 'root ::= expr\nexpr ::= expr "+" "1" | "1"\n', "rule 'expr' (line 2) calls itself before reading anything" },
      { 'root ::= "a" root\n', "rule 'root' (line 1) can never end" },
      { 'root ::= "a"\n  | @\n', "line 2: expected a rule name" },
      { 'root ::= "a\n', "line 1: a string is not closed" },
      { 'root ::= /a(?=b)/\n', "line 1: regex: offset 1: lookahead" },
      { '# c\nroot ::= %json {"type": "strin"}\n', "%json at line 2: $.type: must be one of" },
      { 'root ::= "a"{2,1}\n', "line 1: a repetition's maximum is below its minimum" },
    }
    for _, c in ipairs(cases) do expect_error(function() grammar.ebnf(c[1]) end, "ebnf: " .. c[2]) end
  end)

  it("takes rules, strings, classes, regexes, repetitions and JSON schemas", function()
    local g = grammar.ebnf [[
      # a key and a JSON value
      root  ::= key "=" value ("; " key "=" value){0,2}
      key   ::= [a-z] [a-z0-9_]* | /K[0-9]{2}/
      value ::= %json {"type": "integer", "minimum": 0, "maximum": 9} | 'yes' | "\u00e9"+
    ]]
    for _, text in ipairs { "a=1", "ab_2=yes; K07=é", "z=9; y=éé; x=0" } do
      local m = feed(g:matcher(tok()), ids(text))
      assert.is_true(m:done(), text)
    end
    local m = feed(g:matcher(tok()), ids("a=1"))
    assert.is_false(m:allows(tok():id("2")))
    assert.is_true(m:allows(ids(";")[1]))
  end)
end)

describe("a matcher", function()
  local AGE = { type = "object", properties = { age = { type = "integer", minimum = 0, maximum = 130 } },
    required = { "age" }, additionalProperties = false }

  it("refuses what breaks the schema, unchanged, with the reason", function()
    local m = feed(grammar.json_schema(AGE):matcher(tok()), ids('{"age":'))
    local before, count = mask_bytes(m), m.tokens
    for _, text in ipairs { '"', "x", "-", " ", "}", "131" } do
      local id = tok():id(text)
      assert.is_false(m:allows(id), text)
      local ok, why = m:accept(id)
      assert.is_false(ok, text)
      assert.truthy(why:find("does not fit the grammar here", 1, true), why)
    end
    assert.are.equal(count, m.tokens)
    assert.are.equal(before, mask_bytes(m))
    for _, text in ipairs { "0", "1", "13", "130" } do assert.is_true(m:allows(tok():id(text)), text) end
    feed(m, ids("13"))
    assert.is_false(m:allows(tok():id("1"))) -- 131 is above the maximum
    assert.is_true(m:allows(tok():id("0")))
  end)

  it("allows end tokens only where the output is complete, and nothing after one", function()
    local END, RET = tok().special["end"], tok().special["return"]
    local m = grammar.json_schema(AGE):matcher(tok(), { end_ids = { END, RET } })
    feed(m, ids('{"age":4'))
    assert.is_false(m:allows(END))
    assert.is_false(m:done())
    local ok, why = m:accept(END)
    assert.is_false(ok)
    assert.truthy(why:find("not complete", 1, true))
    feed(m, ids("2}"))
    assert.is_true(m:done())
    local set = m:allowed()
    assert.are.same({ RET, END }, set:ids()) -- a complete object: only the ends, ascending
    assert.is_true(m:accept(RET))
    assert.is_true(m.ended)
    assert.are.equal(0, #m:allowed())
    assert.is_false(m:accept(END))
    local plain = feed(grammar.json_schema(AGE):matcher(tok()), ids('{"age":42}'))
    assert.are.equal(0, #plain:allowed()) -- no end tokens given: nothing, and done says so
    assert.is_true(plain:done())
    local _, special = plain:accept(END)
    assert.truthy(special:find("special token", 1, true))
  end)

  it("has a mask that agrees with its allowed set and its direct check", function()
    local m = feed(grammar.json_schema { type = "object", properties = { s = { type = "string" } } }:matcher(tok()),
      ids('{"s":"ab'))
    local set, words = m:allowed(), m:mask()
    assert.are.equal(math.ceil(m.vocab_size / 32), words.numel)
    local listed = set:ids()
    assert.are.equal(#set, #listed)
    for k = 1, #listed, 997 do assert.are.equal(listed[k], set:nth(k)) end
    local rng = G.rng(5)
    for _ = 1, 400 do
      local id = rng(m.vocab_size) - 1
      local bit = (words[id // 32 + 1] >> (id % 32)) & 1
      assert.are.equal(set:has(id), bit == 1, id)
      assert.are.equal(set:has(id), m:allows(id), id)
    end
    assert.is_true(set:has(tok():id('"}')))
    assert.is_false(set:has(tok():id('"]')))
  end)

  it("forks and rolls back as a replay of the same tokens", function()
    local g = grammar.json_schema(G.recursive_schema(G.rng(2)))
    local rng = G.rng(11)
    for _ = 1, 4 do
      local m, taken = g:matcher(tok()), {}
      local fork, at
      for step = 1, 40 do
        local set = m:allowed()
        if #set == 0 then break end
        local id = set:nth(rng(#set))
        feed(m, { id })
        taken[#taken + 1] = id
        if step == 10 then fork, at = m:fork(), #taken end
      end
      local replay = feed(g:matcher(tok()), table.move(taken, 1, at, 1, {}))
      assert.are.equal(mask_bytes(replay), mask_bytes(fork))
      assert.are.equal(at, fork.tokens)
      local back = #taken - at
      m:rollback(back)
      assert.are.equal(mask_bytes(replay), mask_bytes(m))
      feed(fork, table.move(taken, at + 1, #taken, 1, {}))
      feed(m, table.move(taken, at + 1, #taken, 1, {}))
      assert.are.equal(mask_bytes(m), mask_bytes(fork))
    end
    local m = g:matcher(tok())
    expect_error(function() m:rollback(1) end, "matcher:rollback: cannot roll back 1 tokens: 0 were accepted")
  end)

  it("reports the forced tokens and bytes", function()
    local g = grammar.json_schema { type = "object", additionalProperties = false, required = { "name", "kind" },
      properties = { name = { type = "string" }, kind = { const = "point" } } }
    local m = g:matcher(tok())
    local forced, text = m:forced()
    assert.are.equal('{"kind":"point","name":"', text)
    assert.is_true(#forced > 0)
    local fed = tok():decode(forced)
    assert.are.equal(text:sub(1, #fed), fed)
    assert.is_true(#fed < #text) -- the last token is left to the model
    feed(m, forced)
    local rest = feed(grammar.json_schema { const = "fixed" }:matcher(tok()), {})
    local all, bytes = rest:forced()
    assert.are.equal('"fixed"', bytes)
    assert.are.equal(bytes, tok():decode(all)) -- nothing may follow: every token goes
    feed(rest, all)
    assert.is_true(rest:done())
  end)

  it("works on another vocabulary", function()
    local entries = {}
    for c in ('{}":,0123456789abc '):gmatch(".") do entries[#entries + 1] = c end
    for _, s in ipairs { '{"', '":', '",', '"}', "ab", "abc", "12", '<|end|>' } do entries[#entries + 1] = s end
    local parts = { string.pack("<i4", 8) }
    for i, s in ipairs(entries) do
      parts[i + 1] = string.pack("<fi4", s == "<|end|>" and -1e30 or i, #s) .. s
    end
    local path = H.tmp()
    H.write_file(path, table.concat(parts))
    local small = gptoss.tokenizer(path, { vocab_size = #entries })
    local END = small.special["end"]
    local g = grammar.json_schema { type = "object", additionalProperties = false, required = { "a" },
      properties = { a = { type = "string", pattern = "^[abc]{1,3}$" } } }
    local rng = G.rng(3)
    for _ = 1, 20 do
      local m = g:matcher(small, { end_ids = { END } })
      local text, done = G.walk(m, small, rng, 50, 5)
      assert.is_true(done)
      assert.truthy(text:match('^{"a":"[abc][abc]?[abc]?"}$'), text)
    end
  end)
end)

describe("the grammar objects", function()
  it("check their arguments, naming them", function()
    local g = grammar.regex("a+")
    expect_error(function() g:matcher("tok") end, "gptoss.tokenizer expected, got string")
    expect_error(function() g:matcher(tok(), { end_ids = { "x" } }) end, "grammar:matcher: end_ids[1] must be an integer token id")
    expect_error(function() g:matcher(tok(), { end_ids = { -1 } }) end, "grammar:matcher: end token -1 is out of range 0..201087")
    expect_error(function() g:matcher(tok(), { ends = {} }) end, "unknown option 'ends'")
    local m = g:matcher(tok())
    expect_error(function() m:accept("x") end, "bad argument #1 to 'accept' (number expected, got string)")
    expect_error(function() m:accept(201088) end, "matcher:accept: id 201088 is out of range 0..201087")
    expect_error(function() m:allows(1.5) end, "bad argument #1 to 'allows' (number has no integer representation)")
    expect_error(function() m:mask(gptoss.tensor.zeros({ 3 })) end, "matcher:mask: the tensor must be i32")
    expect_error(function() m:rollback(-1) end, "cannot roll back -1 tokens")
    local set = m:allowed()
    expect_error(function() set:has(-1) end, "token_set:has: id -1 is out of range")
    expect_error(function() set:nth(0) end, "token_set:nth: k 0 is out of range 1..")
    assert.truthy(tostring(g):find("gptoss.grammar(regex, 1 rules", 1, true))
    assert.are.equal("regex", g.kind)
    assert.truthy(tostring(m):find("gptoss.matcher(0 tokens)", 1, true))
  end)

  it("keep what they need alive, and outlive their grammar and tokenizer", function()
    local path = H.need_tokenizer(pending)
    local t = gptoss.tokenizer(path)
    local m = grammar.json_schema({ type = "boolean" }):matcher(t)
    local weak = setmetatable({ g = m.grammar, t = t }, { __mode = "v" })
    t = nil
    collectgarbage()
    collectgarbage()
    assert.is_not_nil(weak.g) -- the matcher's user values
    assert.is_not_nil(weak.t)
    getmetatable(weak.g).__gc(weak.g) -- ended by hand: the matcher holds its own references
    getmetatable(weak.t).__gc(weak.t)
    feed(m, { tok():id("tr") })
    assert.is_true(m:allows(tok():id("ue")))
    local f = m:fork()
    m = nil
    collectgarbage()
    assert.is_true(f:accept(tok():id("ue")))
    assert.is_true(f:done())
    expect_error(function() weak.g:matcher(tok()) end, "grammar: used after it was garbage-collected")
  end)
end)
