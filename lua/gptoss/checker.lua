--- gptoss.checker: logits files and an allclose comparison.
--
-- The course's own checker and its logits answer files are not public (course-spec §6),
-- so these formats and this rule are the project's own design, not the course's.
--
-- File formats ("text" or "f32"; read and write pick one from the extension, .f32 and
-- .bin meaning f32 and anything else text, unless a format is given explicitly):
--   text  one value per line, decimal as string.format("%.9g") writes it, each line ended
--         by "\n". Values are read as the nearest float32, the precision of the logits:
--         9 significant digits bring every float32 back to itself, and a text file and an
--         f32 file of the same logits read back equal.
--         Not-a-number is written "nan", infinities "inf" / "-inf"; reading also takes
--         "-nan", "+inf", "infinity" in any case. Blanks or a "\r" around a value are
--         tolerated; a blank line, hexadecimal or anything else is an error naming the
--         line. A missing final "\n" is accepted. An empty file holds no values.
--   f32   raw little-endian IEEE float32, 4 bytes per value, no header (the layout of the
--         course staff's debug logits.bin, course-spec §6). A size that is not a multiple
--         of 4 is an error naming the offset of the stray bytes. Values are rounded to
--         float32 when written (nearest, ties to even).
-- Either way a finite value that rounds beyond float32's range is an error.
--
-- Comparison (numpy allclose, b the reference): element i passes when
--   |a_i - b_i| <= atol + rtol * |b_i|
-- NaN in either never passes; an infinity passes only against the same infinity.
local files = require "gptoss.files"
local util = require "gptoss.util"

local checker = {}

local DEFAULT_ATOL, DEFAULT_RTOL = 1e-6, 1e-5 -- the course checker's thresholds on the 7m
local FLT_MAX = 0x1.fffffep127
-- halfway between FLT_MAX and 2^128: from here on, rounding to float32 overflows
local FLT_OVERFLOW = 0x1.ffffffp127
local CHUNK = 4096 -- values per string.pack/unpack call: well inside Lua's stack limit

local is_a = util.is_a

-- A list of numbers from a Lua array or a host tensor (row-major); level is the
-- error level of the public function's caller, seen from here.
local function values_of(v, fn, what, level)
  if is_a(v, "gptoss.tensor") then return util.flatten(v) end
  if type(v) ~= "table" then
    error(("%s: %s must be a list of numbers or a gptoss tensor (got %s)"):format(fn, what, type(v)), level)
  end
  for i = 1, #v do
    if type(v[i]) ~= "number" then
      error(("%s: %s[%d] must be a number (got %s)"):format(fn, what, i, type(v[i])), level)
    end
  end
  return v
end

local function format_of(fn, path, format, level)
  if format == nil then
    local ext = path:match("%.([^./]+)$")
    ext = ext and ext:lower()
    return (ext == "f32" or ext == "bin") and "f32" or "text"
  end
  if format ~= "text" and format ~= "f32" then
    error(("%s: format must be \"text\" or \"f32\" (got %s)"):format(fn, tostring(format)), level)
  end
  return format
end

-- "%.9g" but with one spelling per non-finite value, so that every reader agrees
local function text_value(v)
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  return ("%.9g"):format(v)
end

-- The float32 nearest to v, or nil when a finite v is too large for one. string.pack
-- would do the rounding, but C leaves the conversion of an out-of-range double undefined.
local function to_f32(v)
  if v ~= v or v == math.huge or v == -math.huge then return v end
  if v > FLT_MAX or v < -FLT_MAX then
    if v >= FLT_OVERFLOW or v <= -FLT_OVERFLOW then return nil end
    return v > 0 and FLT_MAX or -FLT_MAX
  end
  return (string.unpack("<f", string.pack("<f", v)))
end

local NON_FINITE = { nan = 0 / 0, ["-nan"] = 0 / 0, ["+nan"] = 0 / 0,
  inf = math.huge, ["+inf"] = math.huge, ["-inf"] = -math.huge,
  infinity = math.huge, ["+infinity"] = math.huge, ["-infinity"] = -math.huge }

local function parse_text(path, data)
  local values = {}
  local line, start = 0, 1
  while start <= #data do
    line = line + 1
    local nl = data:find("\n", start, true) or #data + 1
    local s = data:sub(start, nl - 1):match("^[ \t\r]*(.-)[ \t\r]*$")
    start = nl + 1
    local v
    if s == "" then
      error(("checker.read: %s: line %d is blank (one value per line, no blank lines)"):format(path, line), 0)
    elseif s:match("^[+-]?%d+%.?%d*[eE][+-]?%d+$") or s:match("^[+-]?%d+%.?%d*$")
        or s:match("^[+-]?%.%d+[eE][+-]?%d+$") or s:match("^[+-]?%.%d+$") then
      v = tonumber(s)
      if v == math.huge or v == -math.huge then v = false end -- "1e999": finite, but no double holds it
    else
      v = NON_FINITE[s:lower()]
    end
    if v == nil then
      error(("checker.read: %s: line %d: %s is not a decimal number"):format(path, line, files.quote(s)), 0)
    end
    local f = v and to_f32(v + 0.0)
    if not f then
      error(("checker.read: %s: line %d: %s is beyond float32's range (+-%.9g)"):format(path, line, s, FLT_MAX), 0)
    end
    values[line] = f
  end
  return values
end

local function parse_f32(path, data)
  local n, stray = #data // 4, #data % 4
  if stray ~= 0 then
    error(("checker.read: %s: %d bytes is not a multiple of 4 (raw little-endian fp32): "
      .. "%d stray bytes at offset %d"):format(path, #data, stray, n * 4), 0)
  end
  local values, pos = {}, 1
  local i = 0
  while i < n do
    local k = math.min(CHUNK, n - i)
    local got = table.pack(string.unpack("<" .. ("f"):rep(k), data, pos))
    for j = 1, k do values[i + j] = got[j] end
    pos = got[k + 1]
    i = i + k
  end
  return values
end

--- Reads a logits file: a list of numbers. format: "text" or "f32" (default: from the extension).
function checker.read(path, format)
  files.check_path("checker.read", path)
  format = format_of("checker.read", path, format, 3)
  local data = files.read("checker.read", path)
  if format == "f32" then return parse_f32(path, data) end
  return parse_text(path, data)
end

local function encode(values, format)
  local n = #values
  if format == "text" then
    local lines = {}
    for i = 1, n do lines[i] = text_value(values[i]) end
    return n > 0 and table.concat(lines, "\n") .. "\n" or ""
  end
  local rounded = {}
  for i = 1, n do
    local f = to_f32(values[i])
    if f == nil then
      error(("checker.write: values[%d] = %.9g is beyond float32's range (+-%.9g)"):format(i, values[i], FLT_MAX), 3)
    end
    rounded[i] = f
  end
  local parts, i = {}, 0
  while i < n do
    local k = math.min(CHUNK, n - i)
    parts[#parts + 1] = string.pack("<" .. ("f"):rep(k), table.unpack(rounded, i + 1, i + k))
    i = i + k
  end
  return table.concat(parts)
end

--- Writes a logits file. values: a list of numbers or a gptoss host tensor (any shape,
-- row-major). format: "text" or "f32" (default: from the extension). Returns the count.
function checker.write(path, values, format)
  files.check_path("checker.write", path)
  values = values_of(values, "checker.write", "values", 3)
  format = format_of("checker.write", path, format, 3)
  local data = encode(values, format)
  files.write("checker.write", path, data)
  return #values
end

local function tolerance(opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v < 0 then
    error(("checker.compare: %s must be a non-negative number (got %s)"):format(name, tostring(v)), 3)
  end
  return v
end

--- Compares got (a) with the reference expected (b), numpy allclose style.
-- opts: {atol = 1e-6, rtol = 1e-5}. Returns a table:
--   ok, count (elements compared), mismatches, max_abs, max_rel (over pairs without a NaN;
--   max_rel is |a-b| / |b|, inf where b is 0 and a is not), atol, rtol,
--   got_length, expected_length,
--   first = {index =, got =, expected =, diff =, bound =} (nil when ok or lengths differ),
--   message (one line: the first mismatch, the length mismatch, or a summary when ok),
--   summary (one line with the counts and the largest differences).
function checker.compare(a, b, opts)
  a = values_of(a, "checker.compare", "got", 3)
  b = values_of(b, "checker.compare", "expected", 3)
  opts = util.options("checker.compare", opts, { "atol", "rtol" }, 2)
  local atol = tolerance(opts, "atol", DEFAULT_ATOL)
  local rtol = tolerance(opts, "rtol", DEFAULT_RTOL)
  local na, nb = #a, #b
  local r = { atol = atol, rtol = rtol, got_length = na, expected_length = nb,
    count = 0, mismatches = 0, max_abs = 0.0, max_rel = 0.0 }
  local tol = ("atol %s, rtol %s"):format(text_value(atol), text_value(rtol))
  if na ~= nb then
    r.ok = false
    r.message = ("length mismatch: got %d values, expected %d"):format(na, nb)
    r.summary = ("FAIL: %s (%s)"):format(r.message, tol)
    return r
  end
  local first, bad = nil, 0
  local max_abs, max_rel = 0.0, 0.0
  for i = 1, na do
    local x, y = a[i], b[i]
    local pass, diff, bound
    if x ~= x or y ~= y then
      pass, diff = false, 0 / 0
    elseif x == y then
      pass, diff = true, 0.0
    else
      diff = math.abs(x - y)
      bound = atol + rtol * math.abs(y)
      -- unequal with an infinity on either side: never close (numpy's isclose)
      pass = diff <= bound and diff ~= math.huge and bound ~= math.huge
      if diff > max_abs then max_abs = diff end
      local rel = y ~= 0 and diff / math.abs(y) or math.huge
      if rel > max_rel then max_rel = rel end
    end
    if not pass then
      bad = bad + 1
      if not first then
        first = { index = i, got = x, expected = y, diff = diff, bound = bound or atol + rtol * math.abs(y) }
      end
    end
  end
  r.count, r.mismatches, r.max_abs, r.max_rel = na, bad, max_abs, max_rel
  r.ok = bad == 0
  r.first = first
  local maxes = ("max |diff| %s, max rel %s"):format(text_value(max_abs), text_value(max_rel))
  if r.ok then
    r.summary = ("OK: all %d values match (%s; %s)"):format(na, maxes, tol)
    r.message = r.summary
  else
    r.summary = ("FAIL: %d of %d values differ (%s; %s)"):format(bad, na, maxes, tol)
    local why
    if first.diff ~= first.diff then
      why = "NaN never matches"
    elseif first.got == math.huge or first.got == -math.huge
        or first.expected == math.huge or first.expected == -math.huge then
      why = "an infinity matches only the same infinity"
    else
      why = ("|diff| %s > bound %s"):format(text_value(first.diff), text_value(first.bound))
    end
    r.message = ("first mismatch at element %d: got %s, expected %s (%s)")
      :format(first.index, text_value(first.got), text_value(first.expected), why)
  end
  return r
end

--- Runs one step of token at position pos on a replica's slot and writes that row's logits.
-- opts: token (id, 0-based), pos (0-based), slot (1-based, default 1), format (as write).
-- The step is a real one: the slot's KV cache must already hold positions 0..pos-1 (the
-- replica refuses a gap), the slot is truncated to pos if it held more, and afterwards it
-- holds pos + 1 positions. Dumping at pos 0 on a fresh or reset slot is the simple case.
-- Returns the logits as a list of numbers.
function checker.dump(replica, path, opts)
  if not is_a(replica, "gptoss.replica") then
    error(("checker.dump: expected a gptoss replica (got %s)"):format(type(replica)), 2)
  end
  files.check_path("checker.dump", path)
  if type(opts) ~= "table" then
    error(("checker.dump: options must be a table {token =, pos = [, slot =, format =]} (got %s)")
      :format(type(opts)), 2)
  end
  util.check_known("checker.dump", opts, { "token", "pos", "slot", "format" }, "option", 2)
  for _, k in ipairs { "token", "pos" } do
    if math.type(opts[k]) ~= "integer" then
      error(("checker.dump: %s must be an integer (got %s)"):format(k, tostring(opts[k])), 2)
    end
  end
  local slot = opts.slot or 1
  if math.type(slot) ~= "integer" then
    error(("checker.dump: slot must be an integer (got %s)"):format(tostring(slot)), 2)
  end
  local format = format_of("checker.dump", path, opts.format, 3)
  -- logits = true: a GPU step keeps its logits for the host only when asked. Called
  -- through pcall, the replica's messages carry no source position of this file.
  local ok, h = pcall(replica.step, replica,
    { slots = { slot }, positions = { opts.pos }, tokens = { opts.token }, logits = true })
  local logits
  if ok then ok, logits = pcall(h.logits, h) end
  if not ok then
    error(("checker.dump: %s"):format(tostring(logits or h)), 2)
  end
  local values = logits[1]:totable()
  checker.write(path, values, format)
  return values
end

return checker
