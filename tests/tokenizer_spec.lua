-- The tokenizer: the exported tokenizer.bin's layout (docs/course.md#tokenizer-file-layout) read
-- back independently,
-- the course encode against a slow, literal Lua version of it on thousands of random strings,
-- known answers, digit splitting, merge order and tie-breaking on small hand-made vocabularies,
-- special tokens, decode / piece / id, the streaming decoder, and every malformed-file error.

local gptoss = require "gptoss"
local H = require "helpers"
local write_file, read_file, expect_error, tmp, cleanup = H.write_file, H.read_file, H.expect_error, H.tmp, H.cleanup

local PATH = H.TOKENIZER
local VOCAB = 201088
local SPECIAL_SCORE = string.unpack("<f", string.pack("<f", -1e30))

-- A tokenizer file from a list of {bytes, score} (score defaults to the id).
local function vocab_file(entries, max_len)
  local parts, longest = {}, 0
  for id, e in ipairs(entries) do
    longest = math.max(longest, #e[1])
    parts[#parts + 1] = string.pack("<fi4", e[2] or (id - 1), #e[1]) .. e[1]
  end
  local path = tmp()
  write_file(path, string.pack("<i4", max_len or longest) .. table.concat(parts))
  return path
end

local function small(words, opts)
  local entries = {}
  for i, w in ipairs(words) do entries[i] = type(w) == "table" and w or { w } end
  return gptoss.tokenizer(vocab_file(entries, opts and opts.max_len), { vocab_size = #entries })
end

-- The exported file, parsed here without the C code.
local file_cache
local function parsed_file()
  if file_cache then return file_cache end
  local data = read_file(PATH)
  local max_len, pos = string.unpack("<i4", data)
  local bytes, scores, ids = {}, {}, {}
  for id = 0, VOCAB - 1 do
    local score, len
    score, len, pos = string.unpack("<fi4", data, pos)
    bytes[id] = data:sub(pos, pos + len - 1)
    scores[id] = score
    pos = pos + len
    if ids[bytes[id]] == nil then ids[bytes[id]] = id end
  end
  file_cache = { max_len = max_len, bytes = bytes, scores = scores, ids = ids, size = #data, stop = pos }
  return file_cache
end

-- docs/course.md#encode, written the obvious way: every round scans all adjacent pairs and merges the
-- one whose concatenation has the lowest id (leftmost on ties), skipping specials and anything
-- longer than max_token_length. A lone byte missing from the vocabulary falls back to its
-- "<0xHH>" entry (only NUL, which the course's C strings never see), then to 0.
local function reference_encode(f, text)
  local out = {}
  local function single(b)
    return f.ids[b] or f.ids[("<0x%02X>"):format(b:byte())] or 0
  end
  local function bpe(piece)
    local parts = {}
    for i = 1, #piece do parts[i] = piece:sub(i, i) end
    while true do
      local best, at
      for i = 1, #parts - 1 do
        local cand = parts[i] .. parts[i + 1]
        local id = #cand <= f.max_len and f.ids[cand]
        if id and f.scores[id] > -1e29 and (best == nil or id < best) then best, at = id, i end
      end
      if not best then break end
      parts[at] = parts[at] .. parts[at + 1]
      table.remove(parts, at + 1)
    end
    for _, p in ipairs(parts) do out[#out + 1] = #p == 1 and single(p) or f.ids[p] or 0 end
  end
  local i = 1
  while i <= #text do
    local digits = text:match("^[0-9]+", i)
    if digits then
      for k = 1, #digits, 3 do bpe(digits:sub(k, k + 2)) end
      i = i + #digits
    else
      local run = text:match("^[^0-9]+", i)
      bpe(run)
      i = i + #run
    end
  end
  return out
end

-- Random strings mixing what prompts contain: words, spaces, punctuation, digit runs, newlines,
-- accented Latin, CJK, Thai, emoji, and arbitrary bytes (NUL and invalid UTF-8 included).
local WORDS = { "the", " the", "Hello", " world", "token", "izer", " GPU", "ing", " a", "über", " naïve" }
local CHUNKS = { " ", "  ", "\n", "\n\n", "\t", ",", ".", "!?", "(", ")", "'s", "-", "é", "ß", "中文",
  "日本語", "한국어", "ไทย", "ฉันรัก", "😀", "👩‍💻", "Привет", "مرحبا" }
local function random_string(rng_max_parts)
  local parts = {}
  for _ = 1, math.random(0, rng_max_parts) do
    local kind = math.random(5)
    if kind == 1 then
      parts[#parts + 1] = WORDS[math.random(#WORDS)]
    elseif kind == 2 then
      parts[#parts + 1] = CHUNKS[math.random(#CHUNKS)]
    elseif kind == 3 then
      parts[#parts + 1] = tostring(math.random(0, 10 ^ math.random(1, 9)))
    elseif kind == 4 then
      parts[#parts + 1] = string.char(math.random(0, 255))
    else
      parts[#parts + 1] = string.char(math.random(97, 122)):rep(math.random(1, 3))
    end
  end
  return table.concat(parts)
end

-- The Node exporter's folder, for use inside an `it` that runs node with gpt-tokenizer: the
-- test is marked pending when either is missing (pending: busted's, passed on).
local function node_exporter(pending)
  local dir = "tools/tokenizer-export"
  local module = io.open(dir .. "/node_modules/gpt-tokenizer/package.json", "r")
  if module then module:close() end
  if not module or not os.execute("command -v node >/dev/null 2>&1") then
    pending("needs node and gpt-tokenizer (make tokenizer installs them)")
  end
  return dir
end

describe("tokenizer", function()
  after_each(cleanup)

  local tok
  setup(function()
    local f = io.open(PATH, "rb")
    assert(f, PATH .. " is missing: run `make tokenizer` (the tests need the exported vocabulary)")
    f:close()
    tok = gptoss.tokenizer(PATH)
  end)

  describe("the exported tokenizer.bin", function()
    it("has the course layout: max_token_length, then 201088 (score, length, bytes) records", function()
      local f = parsed_file()
      assert.are.equal(f.size + 1, f.stop) -- no trailing bytes
      local longest = 0
      for id = 0, VOCAB - 1 do longest = math.max(longest, #f.bytes[id]) end
      assert.are.equal(longest, f.max_len)
      assert.are.equal(128, f.max_len)
      for id = 0, 199997 do
        if f.scores[id] ~= id then error(("score of token %d is %s, not its rank"):format(id, f.scores[id])) end
      end
      for id = 199998, VOCAB - 1 do
        assert.are.equal(SPECIAL_SCORE, f.scores[id])
        assert.truthy(f.bytes[id]:match("^<|[%w_]+|>$"), f.bytes[id])
      end
    end)

    it("stores every single byte raw except 0x00, which is the text <0x00>", function()
      local f = parsed_file()
      for b = 1, 255 do assert.truthy(f.ids[string.char(b)], "byte " .. b) end
      assert.is_nil(f.ids["\0"])
      assert.are.equal(188, f.ids["<0x00>"])
    end)

    it("names the harmony special tokens at their ids", function()
      local f = parsed_file()
      local names = {
        [199998] = "<|startoftext|>", [199999] = "<|endoftext|>", [200002] = "<|return|>",
        [200003] = "<|constrain|>", [200005] = "<|channel|>", [200006] = "<|start|>", [200007] = "<|end|>",
        [200008] = "<|message|>", [200012] = "<|call|>", [200000] = "<|reserved_200000|>",
        [200018] = "<|reserved_200018|>", [201087] = "<|reserved_201087|>",
      }
      for id, name in pairs(names) do assert.are.equal(name, f.bytes[id]) end
      assert.are.equal("Hello", f.bytes[13225])
      assert.are.equal(" world", f.bytes[2375])
    end)
  end)

  describe("object", function()
    it("reports its sizes and the special-token ids by name", function()
      assert.are.equal(VOCAB, tok.vocab_size)
      assert.are.equal(128, tok.max_token_length)
      local s = tok.special
      assert.are.equal(199998, s.startoftext)
      assert.are.equal(199999, s.endoftext)
      assert.are.equal(200002, s["return"])
      assert.are.equal(200003, s.constrain)
      assert.are.equal(200005, s.channel)
      assert.are.equal(200006, s.start)
      assert.are.equal(200007, s["end"])
      assert.are.equal(200008, s.message)
      assert.are.equal(200012, s.call)
      assert.are.equal(200500, s.reserved_200500)
      assert.are.equal("gptoss.tokenizer(vocab_size=201088, max_token_length=128)", tostring(tok))
    end)

    it("looks pieces up by their bytes and reads entries back", function()
      assert.are.equal(13225, tok:id("Hello"))
      assert.are.equal(200006, tok:id("<|start|>"))
      assert.is_nil(tok:id("no such token at all, surely"))
      local bytes, score = tok:entry(188)
      assert.are.equal("<0x00>", bytes)
      assert.are.equal(188, score)
      bytes, score = tok:entry(199999)
      assert.are.equal("<|endoftext|>", bytes)
      assert.are.equal(SPECIAL_SCORE, score)
    end)
  end)

  describe("encode", function()
    it("gives the course's known answers", function()
      assert.are.same({ 13225, 2375 }, tok:encode("Hello world"))
      assert.are.same({ 97797, 6560, 151737, 37899, 17758 }, tok:encode("ฉันรักทะเล"))
      assert.are.same({}, tok:encode(""))
    end)

    it("cuts digit runs into threes from the left and encodes each chunk alone", function()
      local function ids(...)
        local out = {}
        for _, piece in ipairs({ ... }) do
          for _, id in ipairs(tok:encode(piece)) do out[#out + 1] = id end
        end
        return out
      end
      assert.are.same(ids("123", "456", "7"), tok:encode("1234567"))
      assert.are.same(ids("12"), tok:encode("12"))
      assert.are.same(ids("x", "100", "00", " y"), tok:encode("x10000 y"))
      assert.are.equal(tok:id("123"), tok:encode("123")[1])
    end)

    it("treats a non-digit run as one piece, merging across spaces and punctuation", function()
      -- no word splitting: " world." merges as the course does, whatever o200k's regex would say
      assert.are.same(reference_encode(parsed_file(), "Hello world. Bye!"), tok:encode("Hello world. Bye!"))
    end)

    it("agrees with the literal course algorithm on thousands of random strings", function()
      local f = parsed_file()
      math.randomseed(20261121)
      for n = 1, 4000 do
        local s = random_string(14)
        local want, got = reference_encode(f, s), tok:encode(s)
        if #want ~= #got or table.concat(want, " ") ~= table.concat(got, " ") then
          error(("string %d %q: reference {%s}, encode {%s}"):format(n, s, table.concat(want, " "),
            table.concat(got, " ")))
        end
      end
    end)

    it("agrees with the literal course algorithm on long runs of a few repeated bytes", function()
      -- pieces of up to ~300 bytes: long merge chains, and runs around the 128-byte longest entry
      local f = parsed_file()
      math.randomseed(99)
      local alphabet = { " ", "a", "=", "-", "\n", "ab", "é", "\xff", "." }
      for n = 1, 40 do
        local parts = {}
        for i = 1, math.random(1, 6) do parts[i] = alphabet[math.random(#alphabet)]:rep(math.random(1, 130)) end
        local s = table.concat(parts)
        local want, got = reference_encode(f, s), tok:encode(s)
        if table.concat(want, " ") ~= table.concat(got, " ") then
          error(("string %d (%d bytes): reference {%s}, encode {%s}"):format(n, #s, table.concat(want, " "),
            table.concat(got, " ")))
        end
      end
    end)

    it("merges the lowest id first, the leftmost pair on ties", function()
      -- ids: a=0 b=1 c=2 bc=3 ab=4
      local t = small({ "a", "b", "c", "bc", "ab" })
      assert.are.same({ 0, 3 }, t:encode("abc"))  -- bc (3) beats ab (4) although ab is left of it
      -- ids: a=0 aa=1: in "aaa" both pairs are "aa"; the left one merges
      t = small({ "a", "aa" })
      assert.are.same({ 1, 0 }, t:encode("aaa"))
      assert.are.same({ 1, 1 }, t:encode("aaaa"))
    end)

    it("falls back to <0xHH> for a byte without an entry, then to 0", function()
      local t = small({ "a", "<0x62>", "c" })
      assert.are.same({ 0, 1, 2 }, t:encode("abc"))
      assert.are.same({ 0 }, t:encode("z"))
      assert.are.equal("abc", t:decode({ 0, 1, 2 }))
    end)

    it("keeps the first max_tokens ids when asked, as the course's callers do", function()
      local all = tok:encode("Hello world, hello tokenizer")
      assert.are.same({ all[1], all[2] }, tok:encode("Hello world, hello tokenizer", { max_tokens = 2 }))
      assert.are.same({}, tok:encode("Hello", { max_tokens = 0 }))
      assert.are.same(all, tok:encode("Hello world, hello tokenizer", { max_tokens = 1000 }))
      expect_error(function() tok:encode("x", { max_tokens = -1 }) end, "max_tokens must be >= 0")
      expect_error(function() tok:encode("x", { max_tokens = "many" }) end, "max_tokens must be an integer")
      expect_error(function() tok:encode("x", { max_token = 1 }) end,
        "tokenizer:encode: unknown option 'max_token' (known: special, max_tokens, mode)")
    end)

    it("never merges into a special token, and maps unknown bytes to 0", function()
      local t = small({ "a", "b", { "ab", -1e30 } })
      assert.are.same({ 0, 1 }, t:encode("ab"))
      assert.are.same({ 0, 0, 1 }, t:encode("zab"))
    end)

    it("recognises special-token names only when asked", function()
      local text = "<|start|>user<|message|>Hi<|end|>"
      assert.are.same({ 200006, 1428, 200008, 12194, 200007 }, tok:encode(text, { special = true }))
      assert.are.same(reference_encode(parsed_file(), text), tok:encode(text))
      assert.are.same(reference_encode(parsed_file(), text), tok:encode(text, { special = false }))
      -- an unknown name and an unclosed one stay text; the text around a special is encoded as usual
      local odd = "<|nope|>12<|endoftext|><|"
      local got = tok:encode(odd, { special = true })
      local want = reference_encode(parsed_file(), "<|nope|>12")
      want[#want + 1] = 199999
      for _, id in ipairs(reference_encode(parsed_file(), "<|")) do want[#want + 1] = id end
      assert.are.same(want, got)
    end)

    it("rejects what is not a string", function()
      expect_error(function() tok:encode(nil) end, "string expected")
      expect_error(function() tok:encode({}) end, "string expected")
    end)
  end)

  describe("encode, o200k mode", function()
    local function o200k(text, special) return tok:encode(text, { mode = "o200k", special = special }) end

    it("gives tiktoken's known answers, and course stays the default", function()
      assert.are.same({ 24912, 2375 }, o200k("hello world"))
      assert.are.same({ 220, 17 }, o200k(" 2"))
      assert.are.same({}, o200k(""))
      assert.are.same(tok:encode("x10000 y", { mode = "course" }), tok:encode("x10000 y"))
      -- the course merges a whole run; o200k leaves one space before the word
      assert.are.same({ 256, 24912 }, tok:encode("  hello"))
      assert.are.same({ 220, 40617 }, o200k("  hello"))
    end)

    it("keeps invalid UTF-8: each run of bytes that are no character is a piece of its own", function()
      for _, text in ipairs { "ab\xffcd", "\x80", "x \xc3", "\xe2\x82 y\xf0\x9f\x98", "\xc0\xaf.\xed\xa0\x80!" } do
        assert.are.equal(text, tok:decode(o200k(text)))
      end
      local want = o200k("ab")
      for _, id in ipairs(tok:encode("\xff\xfe", { mode = "course" })) do want[#want + 1] = id end
      for _, id in ipairs(o200k("cd")) do want[#want + 1] = id end
      assert.are.same(want, o200k("ab\xff\xfecd"))
    end)

    it("turns special-token names into their ids when asked, encoding the text between the o200k way", function()
      local want = { 200006 }
      for _, id in ipairs(o200k("user")) do want[#want + 1] = id end
      want[#want + 1] = 200008
      for _, id in ipairs(o200k(" 2 hello world")) do want[#want + 1] = id end
      want[#want + 1] = 200007
      assert.are.same(want, o200k("<|start|>user<|message|> 2 hello world<|end|>", true))
    end)

    it("refuses an unknown mode, naming the choices", function()
      expect_error(function() tok:encode("x", { mode = "tiktoken" }) end,
        "tokenizer:encode: mode must be one of", "course", "o200k", "(got tiktoken)")
    end)

    -- Texts built from fragments that hit every branch of the pattern: contractions in any
    -- case, digit runs of every length, CR/LF runs, whitespace before and after non-space,
    -- letters with combining marks, CJK, Thai, emoji with ZWJ, Unicode spaces, punctuation.
    local FRAGMENTS = {
      "'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL", "'d", "'D", "'x",
      "don't", "I'M", "WE'LL", "they'Re", "o'clock", "rock'n'roll",
      "0", "12", "345", "6789", "01234", "999999", "1234567", "3.14159", "1,000,000", "2024-06-01", "٣٤٥", "½", "Ⅻ",
      "\r", "\n", "\r\n", "\n\n", "\r\r\n", " \n", "\t\n ", "  \r\n  ", "\n \n",
      " ", "  ", "   ", "\t", " \t ", "\u{00A0}", "\u{3000}", "\u{2009}", "\u{000B}", "\u{000C}",
      "hello", "Hello", "HELLO", "hELLo", "camelCase", "XMLHttpRequest", "iPhone", "ǅungla", "ᾈ",
      "e\u{0301}", "E\u{0301}TE\u{0301}", "n\u{0303}o", "a\u{0308}\u{0304}", "\u{0301}",
      "日本語", "中文字符", "한국어", "ひらがな", "カタカナ", "ฉันรักทะเล", "สวัสดี", "مرحبا", "שלום", "Привет", "Ελληνικά",
      "👨\u{200D}👩\u{200D}👧", "👍🏽", "🏳️\u{200D}🌈", "😀", "🇫🇷", "❤️",
      ".", "...", "!?", "--", "->", "/", "//", "\\", "()", "{}", "[x]", "#", "@", "$5", "%", "&&", "||", "::",
      ",\n", ".\n\n", "!/", "?\r\n/", "\"", "'", "`", "~", "^", "_", "_x", "-y",
    }

    local function random_text(rng)
      local parts = {}
      for i = 1, rng(1, 9) do
        parts[i] = FRAGMENTS[rng(1, #FRAGMENTS)]
        if rng(1, 3) == 1 then parts[i] = parts[i] .. (" "):rep(rng(0, 3)) end
      end
      return table.concat(parts)
    end

    it("gives gpt-tokenizer's o200k_harmony ids on thousands of generated texts", function()
      local json = require "dkjson"
      local dir = node_exporter(pending)
      local rng = (function() math.randomseed(20261124) return math.random end)()
      local texts = {}
      for i = 1, 3000 do texts[i] = random_text(rng) end
      -- long runs: the matcher's stack must not be the limit
      texts[#texts + 1] = ("a"):rep(100000) .. " " .. ("9"):rep(50001) .. (" "):rep(70000) .. "x"
      texts[#texts + 1] = ("\n"):rep(30000) .. ("!"):rep(30000) .. ("日"):rep(20000)
      local input, output = tmp(), tmp()
      write_file(input, json.encode(texts))
      assert(os.execute(("node %s/encode.mjs < %s > %s"):format(dir, input, output)), "node encode.mjs failed")
      local want = json.decode(read_file(output))
      assert.are.equal(#texts, #want)
      for i, text in ipairs(texts) do
        local got = o200k(text)
        if table.concat(got, " ") ~= table.concat(want[i], " ") then
          error(("text %d %q: gpt-tokenizer {%s}, o200k {%s}"):format(i, text:sub(1, 200),
            table.concat(want[i], " "):sub(1, 300), table.concat(got, " "):sub(1, 300)))
        end
      end
    end)
  end)

  describe("decode", function()
    it("round-trips arbitrary bytes", function()
      math.randomseed(7)
      for _ = 1, 300 do
        local bytes = {}
        for i = 1, math.random(0, 64) do bytes[i] = string.char(math.random(0, 255)) end
        local s = table.concat(bytes)
        assert.are.equal(s, tok:decode(tok:encode(s)))
      end
      for _, s in ipairs({ "\0", "a\0b", "\xff\xfe", "\xe2\x82", "1234567890", "😀👩‍💻", "中文 ไทย\n\n",
        "line one\nline two\r\n", "<|endoftext|>" }) do
        assert.are.equal(s, tok:decode(tok:encode(s)))
      end
    end)

    it("decodes <0xHH> entries to their byte and specials to their names", function()
      assert.are.equal("\0", tok:piece(188))
      assert.are.equal("<|return|>", tok:piece(200002))
      assert.are.equal("Hello world", tok:decode({ 13225, 2375 }))
      assert.are.equal(" world", tok:decode(2375))
      assert.are.equal("", tok:decode({}))
      local t = small({ "a", "<0x41>", "<0x4g>" })
      assert.are.equal("A", t:piece(1))
      assert.are.equal("<0x4g>", t:piece(2))
    end)

    it("rejects ids outside the vocabulary and non-integers", function()
      expect_error(function() tok:decode({ 1, 201088 }) end, "ids[2] 201088 is out of range 0..201087")
      expect_error(function() tok:decode({ -1 }) end, "ids[1] -1 is out of range")
      expect_error(function() tok:decode({ 1.5 }) end, "ids[1] must be an integer token id")
      expect_error(function() tok:piece("x") end, "id must be an integer token id")
      expect_error(function() tok:piece(VOCAB) end, "out of range 0..201087")
      expect_error(function() tok:entry(-1) end, "out of range")
    end)
  end)

  describe("streaming decoder", function()
    it("never splits a UTF-8 character across the strings it returns", function()
      math.randomseed(11)
      local split_seen = 0
      for _ = 1, 200 do
        local parts = {}
        for i = 1, math.random(1, 12) do parts[i] = CHUNKS[math.random(#CHUNKS)] end
        local text = table.concat(parts) .. "😀"
        local d = tok:decoder()
        local out = {}
        for _, id in ipairs(tok:encode(text)) do
          if not utf8.len(tok:piece(id)) then split_seen = split_seen + 1 end
          local s = d:add(id)
          assert.truthy(utf8.len(s), ("chunk %q is not whole UTF-8"):format(s))
          out[#out + 1] = s
        end
        out[#out + 1] = d:flush()
        assert.are.equal(text, table.concat(out))
      end
      assert.is_true(split_seen > 0, "no token split a character: the test exercised nothing")
    end)

    it("holds an unfinished character until it completes or cannot", function()
      local t = small({ "\xe2", "\x82", "\xac", "x", "\xff" })
      local d = t:decoder()
      assert.are.equal("", d:add(0))
      assert.are.equal(1, d.pending)
      assert.are.equal("", d:add(1))
      assert.are.equal("€", d:add(2))
      assert.are.equal(0, d.pending)
      assert.are.equal("", d:add(0))
      assert.are.equal("\xe2x", d:add(3)) -- 'x' cannot continue it: the stray byte goes out as is
      assert.are.equal("\xff", d:add(4))
      assert.are.equal("", d:add({ 0, 1 }))
      assert.are.equal("\xe2\x82", d:flush())
      assert.are.equal("", d:flush())
      expect_error(function() d:add(9) end, "out of range 0..4")
    end)

    it("joins a long piece to the pending bytes as a short one", function()
      local long = ("a"):rep(300) .. "\xe2\x82" -- past the pieces decoder:add joins on the C stack
      local t = small({ "\xe2", long, "\xac", "b" })
      local d = t:decoder()
      assert.are.equal("", d:add(0))
      assert.are.equal("\xe2" .. ("a"):rep(300), d:add(1))
      assert.are.equal(2, d.pending)
      assert.are.equal("€", d:add(2))
      assert.are.equal("\xe2" .. ("a"):rep(300) .. "€b", d:add({ 0, 1, 2, 3 }))
      expect_error(function() d:add("x") end, "must be an integer token id")
    end)
  end)

  describe("lifetime", function()
    it("refuses use after garbage collection instead of crashing", function()
      local t = small({ "a", "b" })
      local d = t:decoder()
      getmetatable(t).__gc(t)
      getmetatable(t).__gc(t) -- twice is harmless
      expect_error(function() t:encode("ab") end, "tokenizer: used after it was garbage-collected")
      expect_error(function() return t.vocab_size end, "used after it was garbage-collected")
      expect_error(function() d:add(0) end, "used after it was garbage-collected")
    end)

    it("keeps the tokenizer alive as long as a decoder needs it", function()
      local d = small({ "x", "y" }):decoder()
      collectgarbage()
      collectgarbage()
      assert.are.equal("xy", d:add({ 0, 1 }))
    end)
  end)

  describe("loading", function()
    it("takes the vocabulary size from the caller", function()
      local path = vocab_file({ { "a" }, { "b" }, { "ab" } })
      local t = gptoss.tokenizer(path, { vocab_size = 3 })
      assert.are.equal(3, t.vocab_size)
      assert.are.equal(2, t.max_token_length)
      expect_error(function() gptoss.tokenizer(path) end, "holds 3 entries, expected vocab_size=201088",
        "{vocab_size=3}")
      expect_error(function() gptoss.tokenizer(path, { vocab_size = 2 }) end,
        "has 32 bytes, more than 2 entries of at most 2 bytes (max_token_length) can fill (24)")
      -- records shorter than max_token_length leave room for more of them than vocab_size
      local short = vocab_file({ { "abcd" }, { "" }, { "" }, { "" } })
      expect_error(function() gptoss.tokenizer(short, { vocab_size = 3 }) end,
        "holds more than vocab_size=3 entries", "(8 bytes follow entry 2)")
      -- nothing sized by a vocab_size the file cannot back is allocated before the count check
      expect_error(function() gptoss.tokenizer(path, { vocab_size = 2147483647 }) end,
        "holds 3 entries, expected vocab_size=2147483647")
      expect_error(function() gptoss.tokenizer(path, { vocab_size = 4 }) end, "holds 3 entries")
      expect_error(function() gptoss.tokenizer(path, { vocab_size = 0 }) end, "vocab_size must be within 1..")
      expect_error(function() gptoss.tokenizer(path, { vocab_size = "x" }) end, "vocab_size must be an integer")
      expect_error(function() gptoss.tokenizer(path, 3) end, "options must be a table")
      expect_error(function() gptoss.tokenizer(path, { vocab = 3 }) end,
        "tokenizer: unknown option 'vocab' (known: vocab_size)")
      expect_error(function() gptoss.tokenizer(42) end, "path must be a string (got number)")
    end)

    it("reads a checkpoint's tokenizer.json into the same entries as tokenizer.bin", function()
      local dir = node_exporter(pending)
      local checkpoint = H.tmpdir()
      assert(os.execute(("node %s/export.mjs -o %s/tokenizer.bin --json %s/tokenizer.json >/dev/null"):format(dir,
        checkpoint, checkpoint)), "export.mjs failed")
      local from_json, from_bin = gptoss.tokenizer(checkpoint), tok
      assert.are.equal(from_bin.vocab_size, from_json.vocab_size)
      assert.are.equal(from_bin.max_token_length, from_json.max_token_length)
      for id = 0, VOCAB - 1 do
        local a, sa = from_json:entry(id)
        local b, sb = from_bin:entry(id)
        if a ~= b or sa ~= sb then error(("id %d: tokenizer.json %q (%g), tokenizer.bin %q (%g)"):format(id, a, sa, b, sb)) end
      end
      assert.are.same(from_bin.special, from_json.special)
      local text = "<|start|>user<|message|>Hello  wörld 12345<|end|>"
      assert.are.same(tok:encode(text, { special = true, mode = "o200k" }),
        from_json:encode(text, { special = true, mode = "o200k" }))
    end)

    -- A tokenizer.json of byte-level BPE; vocab: {key = id} in the byte-level alphabet.
    local function json_file(t)
      local path = H.tmpdir() .. "/tokenizer.json"
      write_file(path, type(t) == "string" and t or require("dkjson").encode(t))
      return path
    end
    local function bpe(vocab, added) return { model = { type = "BPE", vocab = vocab }, added_tokens = added } end

    it("maps tokenizer.json's byte-level alphabet to bytes, names the ids it leaves out as reserved", function()
      -- "Ġ" is the space, "Ā" the byte 0 (stored as <0x00>, as the exporter stores it), "ÿ" the byte 255
      local t = gptoss.tokenizer(json_file(bpe({ a = 0, ["Ġa"] = 1, ["Ā"] = 2, ["ÿ"] = 3 },
        { { id = 4, content = "<|start|>", special = true } })), { vocab_size = 6 })
      assert.are.equal(" a", t:entry(1))
      assert.are.equal("<0x00>", t:entry(2))
      assert.are.equal("\xff", t:entry(3))
      assert.are.equal(4, t.special.start)
      assert.are.equal("<|reserved_5|>", t:entry(5))
      assert.are.same({ 1, 0 }, t:encode(" aa", { mode = "o200k" }))
    end)

    it("finds special tokens in time linear in the text, however long the vocabulary's longest entry", function()
      -- Each "<|" is a possible special token up to the first "|>" after it; with an entry of
      -- 200000 bytes that used to mean reading on to the text's end from every "<|". The same
      -- text through a vocabulary whose entries are short takes linear time: the long one may
      -- not take much longer (a generous ratio, and CPU time, the least of three runs).
      local function tokenizer(special)
        return gptoss.tokenizer(json_file(bpe({ a = 0, b = 1 }, { { id = 2, content = special, special = true } })),
          { vocab_size = 3 })
      end
      local long, short = tokenizer("<|" .. ("x"):rep(200000) .. "|>"), tokenizer("<|start|>")
      assert.are.equal(200004, long.max_token_length)
      local function seconds(t, text)
        local best = math.huge
        for _ = 1, 3 do
          local t0 = os.clock()
          t:encode(text, { special = true })
          best = math.min(best, os.clock() - t0)
        end
        return best
      end
      for _, text in ipairs { ("<|"):rep(50000), ("<|"):rep(50000) .. "|>" } do
        local t_long, t_short = seconds(long, text), seconds(short, text)
        assert.is_true(t_long <= 5 * t_short + 0.05, ("%.3f s against %.3f s"):format(t_long, t_short))
      end
      -- and what is a special token is still found: the first "|>" after a "<|" ends it
      assert.are.same({ 2, 0 }, short:encode("<|start|>a", { special = true }))
      assert.are.equal(4, #short:encode("<|a<|start|>", { special = true }))
      assert.are.same({ 2 }, long:encode("<|" .. ("x"):rep(200000) .. "|>", { special = true }))
    end)

    it("refuses a malformed tokenizer.json, naming the file and what is wrong", function()
      local cases = {
        { "not json", "is not JSON" },
        { bpe({ a = 0 }), nil },
        { { model = { type = "Unigram", vocab = {} } }, "model.type must be \"BPE\" (got \"Unigram\")" },
        { { model = { type = "BPE", vocab = { 1, 2 } } }, "model.vocab must be an object (got an array)" },
        { { model = { type = "BPE", vocab = { a = 0 } }, added_tokens = {} }, nil },
        { { model = { type = "BPE", vocab = { a = 0 } }, added_tokens = 3 }, "added_tokens must be an array (got an integer)" },
        { bpe({ a = 0, [" b"] = 1 }), "model.vocab entry \" b\" is not spelled in the byte-level alphabet" },
        { bpe({ a = 0, b = "1" }), "model.vocab entry \"b\": the id must be an integer (got \"1\")" },
        { bpe({ a = 0, b = 7 }), "model.vocab entry \"b\" has id 7, outside 0..2 (vocab_size=3)" },
        { bpe({ a = 0, b = -1 }), "has id -1, outside 0..2" },
        { bpe({ a = 0, b = 0 }), "has id 0, which another entry has" },
        { bpe({ a = 0, c = 2 }), "model.vocab has no entry for id 1" },
        { bpe({ a = 0 }, { { id = 0, content = "<|x|>", special = true } }), "added_tokens[0] has id 0, which another entry has" },
        { bpe({ a = 0 }, { { id = 1 } }), "added_tokens[0] must be an object with a string content" },
        { bpe({ a = 0 }, { "x" }), "added_tokens[0] must be an object with a string content" },
      }
      for _, c in ipairs(cases) do
        local path = json_file(c[1])
        if c[2] then
          expect_error(function() gptoss.tokenizer(path, { vocab_size = 3 }) end, ("tokenizer.json '%s'"):format(path), c[2])
        else
          assert.are.equal("<|reserved_2|>", gptoss.tokenizer(path, { vocab_size = 3 }):entry(2))
        end
      end
      -- the module is still usable
      assert.are.same({ 24912, 2375 }, tok:encode("hello world", { mode = "o200k" }))
    end)

    it("refuses a vocab_size far past the ids a tokenizer.json names, before allocating for it", function()
      local path = json_file(bpe({ a = 0, b = 1 }))
      H.expect_error_soon(("require('gptoss').tokenizer(%q, { vocab_size = 2147483647 })"):format(path), H.LIMIT_MEMORY,
        ("tokenizer.json '%s' names 2 ids; vocab_size=2147483647 would leave 2147483645 unnamed"):format(path))
      assert.are.equal("<|reserved_65537|>", gptoss.tokenizer(path, { vocab_size = 65538 }):entry(65537))
    end)

    it("keeps the lowest id of duplicate entries", function()
      local t = small({ "a", "b", "a" })
      assert.are.equal(0, t:id("a"))
      assert.are.same({ 0 }, t:encode("a"))
    end)

    it("rejects missing files, directories and files too short for the header", function()
      expect_error(function() gptoss.tokenizer("/nonexistent/tokenizer.bin") end,
        "cannot open tokenizer file '/nonexistent/tokenizer.bin'")
      expect_error(function() gptoss.tokenizer("/dev/null") end, "not a regular file")
      -- a directory is a checkpoint's: its tokenizer.json
      local dir = H.tmpdir()
      expect_error(function() gptoss.tokenizer(dir) end, ("cannot open tokenizer.json '%s/tokenizer.json'"):format(dir))
      local path = tmp()
      write_file(path, "\1\0")
      expect_error(function() gptoss.tokenizer(path) end, "has 2 bytes, too few for the max_token_length field")
    end)

    it("refuses named pipes (within a second) and directories before opening them", function()
      local fifo = H.fifo()
      H.expect_error_soon(("require('gptoss').tokenizer(%q)"):format(fifo), nil,
        ("tokenizer file '%s' is a named pipe, not a regular file"):format(fifo))
      local dir = H.tmpdir()
      fifo = H.fifo(dir, "tokenizer.json")
      H.expect_error_soon(("require('gptoss').tokenizer(%q)"):format(dir), nil,
        ("tokenizer.json '%s' is a named pipe, not a regular file"):format(fifo))
      dir = H.tmpdir()
      assert(os.execute("mkdir " .. dir .. "/tokenizer.json"))
      expect_error(function() gptoss.tokenizer(dir) end,
        ("tokenizer.json '%s/tokenizer.json' is a directory, not a regular file"):format(dir))
    end)

    it("rejects files that lie about lengths, checking each against the bytes that remain", function()
      local function file(header, ...)
        local path = tmp()
        write_file(path, string.pack("<i4", header) .. table.concat({ ... }))
        return path
      end
      local rec = function(len, bytes) return string.pack("<fi4", 0, len) .. (bytes or "") end
      local cases = {
        { file(0, rec(1, "a")), "max_token_length is 0, must be positive" },
        { file(-7, rec(1, "a")), "max_token_length is -7" },
        { file(4, rec(1, "a"), "\0\0\0"), "is truncated: entry 1 at byte 13 needs 8 bytes", "3 remain" },
        { file(4, rec(-5, "")), "entry 0 at byte 4 has length -5, outside 0..4 (max_token_length)" },
        { file(4, rec(1, "a"), rec(5, "abcde")), "entry 1 at byte 13 has length 5, outside 0..4" },
        { file(4, rec(3, "ab")), "is truncated: entry 0 at byte 4 has length 3, 2 bytes remain" },
        { file(0x7fffffff, rec(0x7fffffff, "x")), "has length 2147483647, 1 bytes remain" },
      }
      for _, c in ipairs(cases) do
        expect_error(function() gptoss.tokenizer(c[1], { vocab_size = 2 }) end, table.unpack(c, 2))
      end
      -- a file far larger than the header allows (a model .bin, say) is refused from its header
      local big = tmp()
      write_file(big, string.pack("<i4", 4) .. ("\0"):rep(1 << 20))
      expect_error(function() gptoss.tokenizer(big, { vocab_size = 2 }) end,
        "has 1048580 bytes, more than 2 entries of at most 4 bytes (max_token_length) can fill (28)")
      -- the module is still usable
      assert.are.same({ 13225, 2375 }, tok:encode("Hello world"))
    end)
  end)
end)
