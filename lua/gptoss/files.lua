--- gptoss.files: whole-file reads and writes whose errors name the calling
-- function, the path and the operating system's reason, and the quoting of a
-- file's bytes in messages (shared by the request files and the logits checker).
local core = require "gptoss.core"

local files = {}

-- io.open's messages start with the path; the errors here name it themselves
local function os_message(msg, path)
  msg = tostring(msg)
  local prefix = path .. ": "
  if msg:sub(1, #prefix) == prefix then msg = msg:sub(#prefix + 1) end
  return msg
end

local ESCAPES = { ["\t"] = "\\t", ["\r"] = "\\r", ["\n"] = "\\n", ["\\"] = "\\\\", ['"'] = '\\"' }

--- A file's bytes shown in a message: quoted, control bytes as C escapes.
function files.quote(s)
  return '"' .. s:gsub('[%c\\"]', function(c) return ESCAPES[c] or ("\\x%02x"):format(c:byte()) end) .. '"'
end

--- Raises, blaming the caller of fn, unless path is a string.
function files.check_path(fn, path)
  if type(path) ~= "string" then
    error(("%s: path must be a string (got %s)"):format(fn, type(path)), 3)
  end
end

--- The file's bytes. A path that is there but is not a regular file is refused before
-- io.open, which would wait for a writer on a named pipe.
function files.read(fn, path)
  local regular, why = core.regular_file(path)
  if regular == false then error(("%s: %s"):format(fn, why), 0) end
  local f, msg = io.open(path, "rb")
  if not f then
    error(("%s: cannot open '%s': %s"):format(fn, path, os_message(msg, path)), 0)
  end
  local data, rmsg = f:read("a")
  f:close()
  if not data then
    error(("%s: cannot read '%s': %s"):format(fn, path, os_message(rmsg, path)), 0)
  end
  return data
end

--- Replaces the file with data. A regular file (or a new one) is written to path .. ".tmp"
-- and renamed over path, so that a write cut short (a full disk, a job killed) never leaves
-- a file of that name that looks complete; anything else there (a pipe, a device) is written
-- in place.
function files.write(fn, path, data)
  local in_place = core.regular_file(path) == false
  local target = in_place and path or path .. ".tmp"
  local f, msg = io.open(target, "wb")
  if not f then
    error(("%s: cannot open '%s' for writing: %s"):format(fn, path, os_message(msg, target)), 0)
  end
  local ok, wmsg = f:write(data)
  local closed, cmsg = f:close()
  if not ok or not closed then
    if not in_place then os.remove(target) end
    error(("%s: writing '%s' failed%s: %s"):format(fn, path, in_place and ", the file may be incomplete" or "",
      os_message(wmsg or cmsg, target)), 0)
  end
  if not in_place then
    local renamed, rmsg = os.rename(target, path)
    if not renamed then
      os.remove(target)
      error(("%s: cannot rename '%s' to '%s': %s"):format(fn, target, path, os_message(rmsg, target)), 0)
    end
  end
end

--- The file's lines (a "\r" before each "\n" dropped) with their numbers, for a reader whose
-- errors name the line: for n, line in files.lines(fn, path) do ... end.
function files.lines(fn, path)
  local next_line, n = (files.read(fn, path) .. "\n"):gmatch("(.-)\r?\n"), 0
  return function()
    local line = next_line()
    if line == nil then return nil end
    n = n + 1
    return n, line
  end
end

return files
