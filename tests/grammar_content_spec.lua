-- Masks inside bounded strings (docs/structured.md#how-masks-are-computed): a state that
-- counts a string's characters takes the tokens of plain string content by their length
-- alone, from the vocabulary's shared masks, and walks only the other tokens. Its masks must
-- be exactly the direct check's (m:allows walks each token's bytes, without the cache): on a
-- hand-made vocabulary of multi-byte characters, broken UTF-8, quotes, escapes and controls,
-- every token at every step, and on o200k along random walks that favour such tokens.

local gptoss = require "gptoss"
local H = require "helpers"
local G = require "grammar_gen"
local grammar = gptoss.grammar

-- A tokenizer of the given pieces (and <|end|>, the last id).
local function small_tokenizer(pieces)
  local entries = table.move(pieces, 1, #pieces, 1, {})
  entries[#entries + 1] = "<|end|>"
  local longest = 0
  for _, s in ipairs(entries) do longest = math.max(longest, #s) end
  local parts = { string.pack("<i4", longest) }
  for i, s in ipairs(entries) do
    parts[i + 1] = string.pack("<fi4", s == "<|end|>" and -1e30 or i, #s) .. s
  end
  local path = H.tmp()
  H.write_file(path, table.concat(parts))
  return gptoss.tokenizer(path, { vocab_size = #entries })
end

-- Fails naming the first token whose mask bit and direct check disagree.
local function check_mask(m, tok, context)
  local words = m:mask()
  local t = {}
  for i = 1, words.numel do t[i] = words[i] end
  for id = 0, m.vocab_size - 1 do
    local bit = (t[id // 32 + 1] >> (id % 32)) & 1 == 1
    if bit ~= m:allows(id) then
      error(("token %d (%q): the mask says %s, the direct check %s, after %q"):format(id, tok:decode { id },
        tostring(bit), tostring(not bit), context), 2)
    end
  end
end

-- Whether a token's bytes hold anything but ASCII string content: a multi-byte or broken
-- character, a quote, a backslash or a control.
local function unusual(bytes) return bytes:find('[^ -~]') or bytes:find('["\\]') end

-- Walks m with random allowed tokens (unusual ones when any of a few draws is), checking
-- every mask; returns the text written.
local function walk(m, tok, rng, steps)
  local parts = {}
  for _ = 1, steps do
    check_mask(m, tok, table.concat(parts))
    local set = m:allowed()
    assert(#set > 0, "nothing is allowed after " .. table.concat(parts))
    local id = set:nth(rng(#set))
    for _ = 1, 20 do
      if unusual(tok:decode { id }) then break end
      id = set:nth(rng(#set))
    end
    assert(m:accept(id))
    if m.ended then break end
    parts[#parts + 1] = tok:decode { id }
  end
  return table.concat(parts)
end

-- a schema of bounded strings with random bounds (some with a minLength alone): one at the
-- top, in an object, in an array
local function bounded_schema(rng)
  local function bounded()
    local most = rng(12) - 1
    if rng(4) == 1 then return { type = "string", minLength = most } end -- no end: any length past it
    return { type = "string", minLength = rng(most + 1) - 1, maxLength = most }
  end
  local pick = rng(3)
  if pick == 1 then return bounded() end
  if pick == 2 then
    return { type = "object", additionalProperties = false, required = { "a", "b" },
      properties = { a = bounded(), b = bounded() } }
  end
  return { type = "array", items = bounded(), maxItems = 3 }
end

-- walks count random schemas of bounded strings on tok, steps tokens at most each
local function walk_schemas(tok, rng, count, steps)
  for _ = 1, count do
    local g = grammar.json_schema(bounded_schema(rng))
    walk(g:matcher(tok, { end_ids = { tok.special["end"] } }), tok, rng, steps)
  end
end

describe("masks inside bounded strings", function()
  it("count the characters left in strings, and in nothing else", function()
    assert.are.equal(5, grammar.json_schema { type = "string", maxLength = 5 }.counted_states)
    assert.are.equal(4, grammar.json_schema { type = "string", minLength = 2, maxLength = 4 }.counted_states)
    local free = grammar.json_schema { type = "string" }.counted_states -- content without end: any length
    assert.is_true(free > 0)
    assert.are.equal(free + 3, grammar.json_schema { type = "string", minLength = 3 }.counted_states)
    assert.are.equal(0, grammar.json_schema { type = "string", pattern = "^[a-z]{3}$" }.counted_states)
    assert.are.equal(0, grammar.json_schema { type = "integer", minimum = 0, maximum = 99 }.counted_states)
    assert.are.equal(3, grammar.regex('"[^\\x00-\\x1f"\\\\]{0,3}"').counted_states) -- content, however written
    assert.are.equal(0, grammar.regex('[^\\x00-\\x1f"\\\\]{0,3}').counted_states) -- it may end after any character
  end)

  it("equal the direct check on every token of a vocabulary of awkward pieces", function()
    local tok = small_tokenizer {
      "{", "}", "[", "]", '"', ":", ",", " ", "a", "b", "0",
      "é", "中", "😀", "éé", "中a", "a😀b", "abcdefghijkl", "éééééé", "a b", -- content, 1 to 12 characters
      "\xC3", "\xA9", "\xF0\x9F", "\x98\x80", "a\xC3", "\xA9b",               -- broken UTF-8
      'a"', '"a', 'é",', '","', '"]', '":"', '"}',                             -- quotes
      "\\", "\\n", '\\"', "\\u00e9", "a\\n", "\\\\", "\\u",                   -- escapes, whole or not
      "\n", "a\n", "\x7f", "\xed\x9f\xbf",                                     -- a control, DEL, U+D7FF
    }
    walk_schemas(tok, G.rng(7), 30, 40)
  end)

  it("count a character as a code point, as maxLength does", function()
    local tok = small_tokenizer { '"', "😀", "😀😀", "😀😀😀", "é\\n", "éé\\n" }
    local m = grammar.json_schema { type = "string", maxLength = 2 }:matcher(tok)
    assert(m:accept(tok:id('"')))
    check_mask(m, tok, '"')
    assert.is_true(m:allows(tok:id("😀😀")))
    assert.is_false(m:allows(tok:id("😀😀😀")))
    assert.is_true(m:allows(tok:id("é\\n")))
    assert.is_false(m:allows(tok:id("éé\\n")))
  end)

  it("equal the direct check on o200k along random walks", function()
    local tok, rng = gptoss.tokenizer(H.TOKENIZER), G.rng(11)
    walk_schemas(tok, rng, 4, 8)
    local g = grammar.json_schema { type = "object", required = { "s" }, properties = { s = { type = "string",
      minLength = 3, maxLength = 30 } } }
    walk(g:matcher(tok, { end_ids = { tok.special["end"] } }), tok, rng, 10)
  end)
end)
