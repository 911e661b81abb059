--- gptoss.stops: where a generation loop stops (docs/loops.md#stop-sequences). Three pieces:
--
--   stops.text(strings)  a filter of streamed text: stop where the text contains any of the
--                        strings; what could begin one is held back until the next text shows
--                        whether it does, and a character is never split
--   stops.ids(lists)     a matcher of token ids: stop where the ids end with any of the id
--                        sequences (a list of lists: {{200002}, {13, 13}})
--   stops.new{text =, ids =, tokenizer =}   both over one sequence's ids as a loop samples
--                        them: s:add(id) -> the text that can be shown now, and whether to stop
--
-- Each object follows one sequence: a loop makes one per sequence (stops.new again, or
-- stopper:fresh()).
local util = require "gptoss.util"

local stops = {}

local function is_continuation(byte) return byte >= 0x80 and byte < 0xC0 end

-- Whether byte `at` of s lies inside a character that begins before it (after its lead
-- byte): a stop string found there would cut that character, so it does not count.
local function inside_character(s, at)
  if not is_continuation(s:byte(at)) then return false end
  for back = 1, 3 do
    local lead = s:byte(at - back)
    if lead == nil or lead < 0x80 then return false end
    if lead >= 0xC0 then
      local length = lead >= 0xF0 and 4 or lead >= 0xE0 and 3 or 2
      return back < length
    end
  end
  return false
end

local function check_texts(fn, strings, level)
  if type(strings) ~= "table" or #strings == 0 then
    error(("%s: stop strings must be a non-empty list of strings (got %s)"):format(fn, type(strings)), level + 1)
  end
  for i, s in ipairs(strings) do
    if type(s) ~= "string" or s == "" then
      error(("%s: stop string %d must be a non-empty string (got %s)"):format(fn, i,
        type(s) == "string" and "an empty one" or type(s)), level + 1)
    end
  end
end

local TextFilter = {}
TextFilter.__index = TextFilter

--- A filter of streamed text for stop strings: f:add(text) returns the text that can be
-- shown now and whether a stop string was found. Once one is, only the text before its
-- first occurrence is returned and the filter is done. Text that could be the start of a
-- stop string is held back until the next text shows it is not. Text is whole UTF-8
-- characters, as a tokenizer's decoder gives them; an occurrence that begins inside a
-- character does not count, and held-back text never splits one. f:flush() returns what
-- is held back; f.found is the stop string found (the first listed of those that occur
-- earliest).
-- The filter, its errors naming fn.
local function text_filter(fn, strings, level)
  check_texts(fn, strings, level + 1)
  return setmetatable({ strings = table.move(strings, 1, #strings, 1, {}), held = "" }, TextFilter)
end

function stops.text(strings)
  return text_filter("stops.text", strings, 2)
end

function TextFilter:add(text)
  local s = self.held .. text
  local first
  for _, stop in ipairs(self.strings) do
    local at = s:find(stop, 1, true)
    while at and inside_character(s, at) do at = s:find(stop, at + 1, true) end
    if at and (first == nil or at < first) then first, self.found = at, stop end
  end
  if first then
    self.held = ""
    return s:sub(1, first - 1), true
  end
  -- the longest end of s that begins some stop string at a character's start
  local keep = 0
  for _, stop in ipairs(self.strings) do
    for n = math.min(#stop - 1, #s), keep + 1, -1 do
      if s:sub(-n) == stop:sub(1, n) and not inside_character(s, #s - n + 1) then
        keep = n
        break
      end
    end
  end
  self.held = s:sub(#s - keep + 1)
  return s:sub(1, #s - keep), false
end

function TextFilter:flush()
  local s = self.held
  self.held = ""
  return s
end

local IdMatcher = {}
IdMatcher.__index = IdMatcher

--- A matcher of id sequences: m:add(id) returns the sequence that the ids added so far end
-- with (the first of the list that matches), or nil. m.held is how many of the last ids
-- begin a sequence without completing one (what a stream of text holds back). vocab_size,
-- when given, bounds the ids.
function stops.ids(lists, vocab_size)
  local fn = "stops.ids"
  if type(lists) ~= "table" or #lists == 0 then
    error(("%s: stop ids must be a non-empty list of id lists ({{200002}, {13, 13}}) (got %s)")
      :format(fn, type(lists)), 2)
  end
  local longest, copies = 0, {}
  for i, list in ipairs(lists) do
    if type(list) ~= "table" or #list == 0 then
      error(("%s: stop ids %d must be a non-empty list of token ids (got %s)"):format(fn, i, type(list)), 2)
    end
    for j, id in ipairs(list) do
      if math.type(id) ~= "integer" or id < 0 or (vocab_size and id >= vocab_size) then
        error(("%s: stop ids %d: id %d = %s is not a token id (0..%s)"):format(fn, i, j, tostring(id),
          vocab_size and tostring(vocab_size - 1) or ""), 2)
      end
    end
    copies[i], longest = table.move(list, 1, #list, 1, {}), math.max(longest, #list)
  end
  return setmetatable({ lists = copies, longest = longest, recent = {}, held = 0 }, IdMatcher)
end

-- Whether the last n ids of recent are the first n of list.
local function ends_with(recent, list, n)
  local offset = #recent - n
  for j = 1, n do
    if recent[offset + j] ~= list[j] then return false end
  end
  return true
end

function IdMatcher:add(id)
  local recent = self.recent
  recent[#recent + 1] = id
  if #recent > self.longest then table.remove(recent, 1) end
  local held = 0
  for _, list in ipairs(self.lists) do
    if #list <= #recent and ends_with(recent, list, #list) then
      self.held = 0
      return list
    end
    for n = math.min(#list - 1, #recent), held + 1, -1 do
      if ends_with(recent, list, n) then
        held = n
        break
      end
    end
  end
  self.held = held
  return nil
end

local Stopper = {}
Stopper.__index = Stopper

local STOPPER_OPTIONS = { "text", "ids", "tokenizer" }

--- Stop strings and stop id sequences over one sequence's ids: stops.new{text = {...},
-- ids = {{...}, ...}, tokenizer = tok} (text needs the tokenizer; without one s:add
-- returns no text). s:add(id) returns the text that can be shown now (nil without a
-- tokenizer) and true once the sequence must stop; s.reason is then {text = the stop
-- string} or {ids = the id sequence}. The ids of a stop sequence and the text of a stop
-- string are never shown; the text of ids that may begin a stop sequence is held back
-- until the next ids show they do not. s:flush() returns the text held back at the end.
-- s:fresh() is a new stopper with the same stops, for another sequence.
function stops.new(opts)
  opts = util.options("stops.new", opts, STOPPER_OPTIONS, 2)
  local tok = opts.tokenizer
  if tok ~= nil and not util.is_a(tok, "gptoss.tokenizer") then
    error(("stops.new: tokenizer must be a gptoss tokenizer (got %s)"):format(util.kind(tok)), 2)
  end
  if opts.text ~= nil and tok == nil then
    error("stops.new: stop strings need the tokenizer (tokenizer = tok)", 2)
  end
  local s = setmetatable({ opts = opts, pending = {} }, Stopper)
  if opts.text ~= nil then s.filter = text_filter("stops.new", opts.text, 2) end
  if opts.ids ~= nil then
    local ok, m = pcall(stops.ids, opts.ids, tok and tok.vocab_size)
    if not ok then error((util.bare(m):gsub("^stops%.ids", "stops.new")), 2) end
    s.matcher = m
  end
  s.decoder = tok and tok:decoder()
  return s
end

function Stopper:fresh()
  return stops.new(self.opts)
end

-- The text of ids as the filter passes it (nil without a tokenizer), and whether it stops.
function Stopper:show(ids)
  if not self.decoder then return nil, false end
  local text = self.decoder:add(ids)
  if not self.filter then return text, false end
  local shown, found = self.filter:add(text)
  return shown, found
end

function Stopper:add(id)
  if self.reason then error("stopper: add after the sequence stopped", 2) end
  local pending = self.pending
  pending[#pending + 1] = id
  local list = self.matcher and self.matcher:add(id)
  if list then
    -- the stop sequence's ids are pending (it held them back): show what came before them
    local text = self:show(table.move(pending, 1, #pending - #list, 1, {}))
    self.reason, self.pending = { ids = list }, {}
    return text, true
  end
  local keep = self.matcher and self.matcher.held or 0
  local text, found = self:show(table.move(pending, 1, #pending - keep, 1, {}))
  self.pending = table.move(pending, #pending - keep + 1, #pending, 1, {})
  if found then self.reason = { text = self.filter.found } end
  return text, found
end

function Stopper:flush()
  if self.reason or not self.decoder then return self.decoder and "" or nil end
  local text = self.decoder:add(self.pending) .. self.decoder:flush()
  self.pending = {}
  if not self.filter then return text end
  local shown, found = self.filter:add(text)
  if found then
    self.reason = { text = self.filter.found }
    return shown
  end
  return shown .. self.filter:flush()
end

return stops
