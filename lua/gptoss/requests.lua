--- gptoss.requests: the course's getp request and output files (docs/course.md#request-file).
--
-- Request file (read by the course's read_inputfile):
--   line 1      the request count N, parsed by the course with atoi; here it must be a
--               non-negative decimal integer, optionally surrounded by blanks (a "\r" after
--               it is allowed, atoi stops there too)
--   lines 2..   one prompt per line, raw bytes, no escaping. The "\n" is stripped and
--               nothing else: a "\r" of a CRLF file stays part of the prompt, as with the
--               course's std::getline. Only the first N prompt lines are read; when fewer
--               follow, the missing requests are empty strings, as in the course's zeroed
--               buffer.
--   Each prompt is memcpy'd into a zeroed slot of max_token_length * (steps + 1) bytes
--   (docs/course.md#request-buffers), so a prompt may hold that many bytes minus one, the last byte
--   being the NUL the course's strlen needs. With the defaults (128, 1024) that is 131199.
--
-- Output file (written by the course's write_outputfile):
--   one line per request, in order: the generated ids in decimal separated by single
--   spaces, no trailing space, then "\n". The course writes tok_gens up to its first
--   negative value, so the -1 terminator ends the list but is never written itself; an
--   empty generation is an empty line; no header and nothing after the last "\n".
local files = require "gptoss.files"
local util = require "gptoss.util"

local requests = {}

-- docs/course.md#request-buffers: tokenizer max_token_length and the getp default steps
local MAX_TOKEN_LENGTH = 128
local STEPS = 1024
local INT_MAX = 0x7fffffff
-- Padding this many empty prompts would cost Lua hundreds of MiB for a count that is
-- surely a typo (the course itself could not allocate its buffers for it).
local MAX_PADDING = 1 << 20

-- Splits as std::getline does: a final "\n" ends the last line rather than
-- starting an empty one, and text after the last "\n" is still a line.
local function split_lines(data)
  local lines, start = {}, 1
  while start <= #data do
    local nl = data:find("\n", start, true)
    if not nl then
      lines[#lines + 1] = data:sub(start)
      break
    end
    lines[#lines + 1] = data:sub(start, nl - 1)
    start = nl + 1
  end
  return lines
end

local function positive_integer_option(opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if math.type(v) ~= "integer" or v < 1 then
    error(("requests.read: %s must be a positive integer (got %s)"):format(name, tostring(v)), 3)
  end
  return v
end

-- "1, 2, 3" or "1, 2, 3, ... (40 in all)"
local function list_some(list)
  local shown = {}
  for i = 1, math.min(#list, 8) do shown[i] = tostring(list[i]) end
  local s = table.concat(shown, ", ")
  if #list > 8 then s = s .. (", ... (%d in all)"):format(#list) end
  return s
end

--- Reads a course request file.
-- opts.max_token_length (default 128, the tokenizer's) and opts.steps (default 1024,
-- the getp default after the course's clamping) size the course's per-prompt buffer.
-- Returns prompts (a list of N strings) and warnings (a list of strings, possibly empty):
-- everything the course accepts but that is likely a mistake.
function requests.read(path, opts)
  files.check_path("requests.read", path)
  opts = util.options("requests.read", opts, { "max_token_length", "steps" }, 2)
  local max_token_length = positive_integer_option(opts, "max_token_length", MAX_TOKEN_LENGTH)
  local steps = positive_integer_option(opts, "steps", STEPS)
  -- docs/course.md#request-buffers: a slot's size is an int of the course (and a Lua product would wrap)
  if steps >= INT_MAX or max_token_length > INT_MAX // (steps + 1) then
    error(("requests.read: max_token_length %d x (steps %d + 1) bytes exceeds the course's int (at most %d)")
      :format(max_token_length, steps, INT_MAX), 2)
  end
  local slot = max_token_length * (steps + 1)
  local limit = slot - 1

  local lines = split_lines(files.read("requests.read", path))
  local function fail(line, fmt, ...)
    error(("requests.read: %s: line %d: " .. fmt):format(path, line, ...), 0)
  end

  local first = lines[1]
  if first == nil or first:match("^[ \t\r\f\v]*$") then
    fail(1, "missing request count (the first line must hold the number of prompts)")
  end
  local digits = first:match("^[ \t\f\v]*%+?(%d+)[ \t\r\f\v]*$")
  if not digits then
    if first:match("^[ \t\f\v]*%-%d+[ \t\r\f\v]*$") then
      fail(1, "request count is negative (%s)", first:match("%-%d+"))
    end
    fail(1, "request count must be a non-negative integer (got %s)", files.quote(first))
  end
  local count = math.tointeger(tonumber(digits))
  if not count or count > INT_MAX then
    fail(1, "request count %s does not fit the course's int (at most %d)", digits, INT_MAX)
  end

  local prompts, warnings = {}, {}
  local cr, nul, empty = {}, {}, {}
  for i = 1, count do
    local p = lines[i + 1]
    if p == nil then break end
    if #p > limit then
      fail(i + 1, "prompt %d is %d bytes; the course's buffer holds at most %d bytes per prompt "
        .. "(max_token_length %d x (steps %d + 1) bytes, less 1 for the NUL)",
        i, #p, limit, max_token_length, steps)
    end
    if p:sub(-1) == "\r" then cr[#cr + 1] = i + 1 end
    if p:find("\0", 1, true) then nul[#nul + 1] = i + 1 end
    if p == "" then empty[#empty + 1] = i + 1 end
    prompts[i] = p
  end

  local present = #prompts
  if present < count then
    local missing = count - present
    if missing > MAX_PADDING then
      fail(1, "count says %d but only %d %s: refusing to pad %d empty prompts (at most %d)",
        count, present, present == 1 and "prompt follows" or "prompts follow", missing, MAX_PADDING)
    end
    warnings[#warnings + 1] = ("%s: count says %d but only %d %s; %d empty %s kept as the course does")
      :format(path, count, present, present == 1 and "prompt follows" or "prompts follow",
        missing, missing == 1 and "prompt" or "prompts")
    for i = present + 1, count do
      prompts[i] = ""
    end
  end
  if #empty > 0 then
    warnings[#warnings + 1] = ("%s: empty prompt on %s %s: it encodes to no tokens, and the course's getp "
      .. "generate exits on a prompt of no tokens"):format(path, #empty > 1 and "lines" or "line", list_some(empty))
  end
  if #cr > 0 then
    warnings[#warnings + 1] = ("%s: %s %s %s in \"\\r\" (a CRLF file?): kept in the prompt as the course's "
      .. "getline does"):format(path, #cr > 1 and "lines" or "line", list_some(cr), #cr > 1 and "end" or "ends")
  end
  if #nul > 0 then
    warnings[#warnings + 1] = ("%s: %s %s %s a NUL byte: the course's encode (strlen) stops there")
      :format(path, #nul > 1 and "lines" or "line", list_some(nul), #nul > 1 and "hold" or "holds")
  end
  if #lines > count + 1 then
    local extra = #lines - count - 1
    warnings[#warnings + 1] = ("%s: %d %s after the %d prompts %s ignored, as the course reads only the count")
      :format(path, extra, extra == 1 and "line" or "lines", count, extra == 1 and "is" or "are")
  end
  -- docs/course.md#request-buffers: the course multiplies the buffer size in int
  if count * slot > INT_MAX then
    warnings[#warnings + 1] = ("%s: %d requests x %d bytes per prompt = %d bytes overflows the course's int "
      .. "buffer size (at most %d)"):format(path, count, slot, count * slot, INT_MAX)
  end
  return prompts, warnings
end

-- A request's ids as the course writes them: checked, then joined.
local function output_line(ids, i)
  if type(ids) ~= "table" then
    error(("requests.write: outputs[%d] must be a list of token ids (got %s)"):format(i, type(ids)), 3)
  end
  local n = #ids
  for j = 1, n do
    local id = ids[j]
    if math.type(id) ~= "integer" then
      error(("requests.write: outputs[%d][%d] must be an integer token id (got %s %s)")
        :format(i, j, math.type(id) or type(id), tostring(id)), 3)
    end
    if id < 0 then
      -- the course stops at the first negative value, so only a final -1 can be meant
      if id == -1 and j == n then
        n = n - 1
        break
      end
      error(("requests.write: outputs[%d][%d] = %d: token ids are non-negative; the course's writer "
        .. "stops at the first negative value (only a final -1 terminator is accepted)"):format(i, j, id), 3)
    end
    if id > INT_MAX then
      error(("requests.write: outputs[%d][%d] = %d does not fit the course's int32 tok_gens")
        :format(i, j, id), 3)
    end
  end
  return table.concat(ids, " ", 1, n)
end

--- Writes a course output file: outputs[i] is request i's list of generated ids
-- (a final -1 terminator is optional and not written, as in the course).
-- Everything is checked before the file is opened, so a bad argument leaves an
-- existing file untouched. Returns the number of bytes written.
function requests.write(path, outputs)
  files.check_path("requests.write", path)
  if type(outputs) ~= "table" then
    error(("requests.write: outputs must be a list of lists of token ids (got %s)"):format(type(outputs)), 2)
  end
  local lines = {}
  for i = 1, #outputs do
    lines[i] = output_line(outputs[i], i) .. "\n"
  end
  local data = table.concat(lines)

  files.write("requests.write", path, data)
  return #data
end

--- Writes a course request file of the prompts (a list of strings, none holding a "\n",
-- which would end its line): what requests.read reads back, for runs of the same requests
-- elsewhere (examples/bench_getp_mpi.sh). Checked before the file is opened.
function requests.write_requests(path, prompts)
  files.check_path("requests.write_requests", path)
  if type(prompts) ~= "table" then
    error(("requests.write_requests: prompts must be a list of strings (got %s)"):format(type(prompts)), 2)
  end
  for i = 1, #prompts do
    if type(prompts[i]) ~= "string" then
      error(("requests.write_requests: prompts[%d] must be a string (got %s)"):format(i, type(prompts[i])), 2)
    end
    if prompts[i]:find("\n", 1, true) then
      error(("requests.write_requests: prompts[%d] holds a newline, which would end its line"):format(i), 2)
    end
  end
  files.write("requests.write_requests", path, #prompts .. "\n" .. table.concat(prompts, "\n")
    .. (#prompts > 0 and "\n" or ""))
end

--- Reads a course output file back: a list with one list of ids per line.
-- Strict about the course's format, so that a file from another writer (trailing
-- spaces of the T0 code, CRLF, a terminator written out) is reported, not guessed at.
function requests.read_output(path)
  files.check_path("requests.read_output", path)
  local data = files.read("requests.read_output", path)
  local function fail(line, fmt, ...)
    error(("requests.read_output: %s: line %d: " .. fmt):format(path, line, ...), 0)
  end
  if #data > 0 and data:sub(-1) ~= "\n" then
    local _, nls = data:gsub("\n", "")
    fail(nls + 1, "no newline at the end of the file (the course ends every line with one; truncated?)")
  end
  local outputs = {}
  for i, line in ipairs(split_lines(data)) do
    local ids = {}
    if line ~= "" then
      if line:find("\r", 1, true) then
        fail(i, "carriage return in the line (the course writes \"\\n\" line ends only)")
      end
      if line:sub(1, 1) == " " then fail(i, "leading space") end
      if line:sub(-1) == " " then fail(i, "trailing space (the course writes none; the T0 code did)") end
      if line:find("  ", 1, true) then fail(i, "two spaces in a row (ids are separated by single spaces)") end
      local col = 1
      for field in line:gmatch("[^ ]+") do
        if not field:match("^%d+$") then
          if field:match("^%-%d+$") then
            fail(i, "negative value %s at column %d (the course never writes its -1 terminator)", field, col)
          end
          fail(i, "%s at column %d is not a token id", files.quote(field), col)
        end
        local id = math.tointeger(tonumber(field))
        if not id or id > INT_MAX then
          fail(i, "%s at column %d does not fit the course's int32 token ids", field, col)
        end
        ids[#ids + 1] = id
        col = col + #field + 1
      end
    end
    outputs[i] = ids
  end
  return outputs
end

return requests
