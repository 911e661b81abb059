-- gptoss.stops: the text filter (held-back prefixes, the earliest stop, UTF-8 characters
-- never split, through the tokenizer's decoder too), the id matcher (overlapping
-- sequences, what it holds), the two over one sequence's ids (text of a stop sequence never
-- shown, held text released), and every bad-input error.
local gptoss = require "gptoss"
local stops = require "gptoss.stops"
local H = require "helpers"

-- the text shown for pieces streamed through a filter of `strings`, and whether it stopped
local function stream(strings, pieces)
  local f, printed, hit = stops.text(strings), {}, false
  for _, piece in ipairs(pieces) do
    local text
    text, hit = f:add(piece)
    printed[#printed + 1] = text
    if hit then break end
  end
  if not hit then printed[#printed + 1] = f:flush() end
  return printed, hit
end

describe("stops.text", function()
  it("holds back streamed text that may begin a stop string, and cuts at the first one", function()
    -- "lo w" across pieces: "l" is held until "o w" shows it is the stop
    assert.are.same({ { "He", "l" }, true }, { stream({ "lo w" }, { "Hel", "lo wor", "ld" }) })
    -- a held start that turns out not to be one is printed with the next piece
    assert.are.same({ { "He", "lp!", "" }, false }, { stream({ "lo w" }, { "Hel", "p!" }) })
    -- the earliest of several stops, inside one piece; f.found says which
    assert.are.same({ { "a" }, true }, { stream({ "cd", "bc" }, { "abcd" }) })
    local f = stops.text { "cd", "bc" }
    f:add("abcd")
    assert.are.equal("bc", f.found)
    -- held at the end of the stream: flushed
    assert.are.same({ { "ab", "c" }, false }, { stream({ "cd" }, { "abc" }) })
    -- a stop string right at the start
    assert.are.same({ { "" }, true }, { stream({ "ab" }, { "ab" }) })
  end)

  it("never splits a character: whole through the decoder, no match or hold inside one", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    -- 🌊 is ids 64364 and 232: the decoder gives it whole
    local d = tok:decoder()
    assert.are.equal("", d:add(64364))
    local wave = d:add(232)
    assert.are.equal("🌊", wave)
    assert.are.same({ { "sea ", "" }, true }, { stream({ "🌊" }, { "sea ", wave }) })
    assert.are.same({ { "sea ", "🌊!", "" }, false }, { stream({ "🌊?" }, { "sea 🌊", "!" }) })
    -- a stop string that begins inside a character (the last bytes of 🌊) neither matches
    -- there nor holds the character back
    local continuation = "\x8c\x8a"
    assert.are.same({ { "sea 🌊", " ", "" }, false }, { stream({ continuation .. "x" }, { "sea 🌊", " " }) })
    assert.are.same({ { "sea 🌊x", "" }, false }, { stream({ continuation .. "x" }, { "sea 🌊x" }) })
    -- where those bytes do begin a character's worth of text (stray bytes), they match
    assert.are.same({ { "a" }, true }, { stream({ continuation .. "x" }, { "a" .. continuation .. "x" }) })
  end)

  it("refuses what is not a list of non-empty strings", function()
    H.expect_error(function() stops.text("stop") end, "stops.text: stop strings must be a non-empty list")
    H.expect_error(function() stops.text {} end, "stops.text: stop strings must be a non-empty list")
    H.expect_error(function() stops.text { "a", "" } end, "stops.text: stop string 2 must be a non-empty string (got an empty one)")
    H.expect_error(function() stops.text { 5 } end, "stops.text: stop string 1 must be a non-empty string (got number)")
  end)
end)

describe("stops.ids", function()
  local function feed(m, ids)
    local got = {}
    for i, id in ipairs(ids) do
      local list = m:add(id)
      got[i] = list and table.concat(list, ",") or m.held
    end
    return got
  end

  it("matches where the ids end with a sequence, and holds what may begin one", function()
    -- overlapping starts: 7 7 7 9 ends with 7 7 9
    assert.are.same({ 1, 2, 2, "7,7,9" }, feed(stops.ids { { 7, 7, 9 } }, { 7, 7, 7, 9 }))
    -- a broken start holds nothing; a one-id sequence matches at once
    assert.are.same({ 1, 0, "4", 1 }, feed(stops.ids { { 5, 6 }, { 4 } }, { 5, 3, 4, 5 }))
    -- the first listed of two that end together
    assert.are.same({ 1, "1,2" }, feed(stops.ids { { 1, 2 }, { 2 } }, { 1, 2 }))
  end)

  it("refuses what is not a list of id lists", function()
    H.expect_error(function() stops.ids { 1, 2 } end, "stops.ids: stop ids 1 must be a non-empty list of token ids (got number)")
    H.expect_error(function() stops.ids {} end, "stops.ids: stop ids must be a non-empty list of id lists")
    H.expect_error(function() stops.ids { {} } end, "stops.ids: stop ids 1 must be a non-empty list")
    H.expect_error(function() stops.ids { { 1, -2 } } end, "stops.ids: stop ids 1: id 2 = -2 is not a token id")
    H.expect_error(function() stops.ids({ { 1.5 } }) end, "id 1 = 1.5 is not a token id")
    H.expect_error(function() stops.ids({ { 10 } }, 10) end, "stops.ids: stop ids 1: id 1 = 10 is not a token id (0..9)")
  end)
end)

describe("stops.new", function()
  -- the text shown while ids are added one by one, and the stopper
  local function run(s, ids)
    local shown = {}
    for _, id in ipairs(ids) do
      local text, stop = s:add(id)
      shown[#shown + 1] = text
      if stop then return table.concat(shown), s end
    end
    return table.concat(shown) .. s:flush(), s
  end

  it("stops at a stop sequence of ids, never showing its text; held text comes back when it is not one", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local ids = tok:encode("Hello world, the end. And the rest")
    local the, the_end = tok:encode(" the")[1], tok:encode(" the end")
    assert.are.equal(2, #the_end)
    local text, s = run(stops.new { tokenizer = tok, ids = { the_end } }, ids)
    assert.are.equal("Hello world,", text)
    assert.are.same({ ids = the_end }, s.reason)
    -- " the" alone is held back only until the next id: never a stop
    text, s = run(stops.new { tokenizer = tok, ids = { { the, 99999 } } }, ids)
    assert.are.equal("Hello world, the end. And the rest", text)
    assert.is_nil(s.reason)
  end)

  it("stops at a stop string across ids, at the earlier of a string and a sequence", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local ids = tok:encode("Hello world, the end. And the rest")
    local s0 = stops.new { tokenizer = tok, text = { "d, t" } }
    local text, s = run(s0, ids)
    assert.are.equal("Hello worl", text)
    assert.are.same({ text = "d, t" }, s.reason)
    text, s = run(s0:fresh(), tok:encode("no stop here"))
    assert.are.same({ "no stop here" }, { text, s.reason })
    text, s = run(stops.new { tokenizer = tok, text = { "rest" }, ids = { tok:encode(" And") } }, ids)
    assert.are.same({ "Hello world, the end.", { ids = tok:encode(" And") } }, { text, s.reason })
    -- held to the very end, then found there
    text, s = run(stops.new { tokenizer = tok, text = { "rest" } }, ids)
    assert.are.same({ "Hello world, the end. And the ", { text = "rest" } }, { text, s.reason })
    -- ids alone, without a tokenizer: no text
    local bare = stops.new { ids = { { ids[3] } } }
    assert.are.same({ false, false, true }, { select(2, bare:add(ids[1])), select(2, bare:add(ids[2])),
      select(2, bare:add(ids[3])) })
    H.expect_error(function() bare:add(1) end, "stopper: add after the sequence stopped")
  end)

  it("refuses bad options", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    H.expect_error(function() stops.new { text = { "x" } } end, "stops.new: stop strings need the tokenizer")
    H.expect_error(function() stops.new { tokenizer = "tok" } end, "stops.new: tokenizer must be a gptoss tokenizer (got string)")
    H.expect_error(function() stops.new { stop = {} } end, "stops.new: unknown option 'stop' (known: text, ids, tokenizer)")
    H.expect_error(function() stops.new { tokenizer = tok, text = { "" } } end, "stops.new: stop string 1 must be a non-empty")
    H.expect_error(function() stops.new { tokenizer = tok, ids = { { tok.vocab_size } } } end,
      ("stops.new: stop ids 1: id 1 = %d is not a token id (0..%d)"):format(tok.vocab_size, tok.vocab_size - 1))
  end)
end)
