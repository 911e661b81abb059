--- gptoss.line_input: the input of a terminal program, a line at a time (examples/chat.lua,
-- docs/chat.md#line-editing-and-history). On a terminal, lines are edited and recalled
-- through libedit when gptoss has it (gptoss.core's edit_* functions, src/lua/line_edit.c),
-- the history kept in a file; otherwise, and whenever input or output is not a terminal,
-- they are read with io.read. A line ending in "\" goes on on the next line, and so do the
-- lines of a paste. Ctrl-C must be caught (gptoss.catch_interrupts): at a prompt where
-- nothing was typed it ends the input, else it drops what was typed.
local gptoss = require "gptoss"
local core = require "gptoss.core"

local line_input = {}

local Input = {}
Input.__index = Input

--- line_input.new{prompt =, continuation =, history =}: prompt and continuation (the
-- prompt after a line ending in "\") are shown on a terminal only; history is the file
-- that keeps the lines typed between runs (default ~/.gptoss_history; false for none).
-- input.terminal tells whether standard input is a terminal, input.editing whether lines
-- are edited, else input.plain says why not.
function line_input.new(opts)
  local self = setmetatable({ prompt = opts.prompt or "", continuation = opts.continuation or "",
    terminal = gptoss.isatty(0) }, Input)
  self.editing, self.plain = core.edit_open()
  if self.editing then
    local home = os.getenv("HOME")
    if opts.history == nil then self.history = home and home .. "/.gptoss_history" else self.history = opts.history end
    -- no history yet is no error: the file comes with the first save
    if self.history then core.edit_history("load", self.history) end
  end
  return self
end

-- One line from io.read: nil and "end" at the end of input, nil and "interrupt" when a
-- caught Ctrl-C ended the read (its partial line is lost, as the terminal flushes it).
function Input:plain_line(prompt)
  if self.terminal then
    io.write(prompt)
    io.flush()
  end
  local line, err = io.read("l")
  if line then return line end
  if gptoss.interrupted() then
    if self.terminal then io.write("^C\n") end
    return nil, "interrupt"
  end
  if err then error("reading standard input: " .. err, 0) end
  return nil, "end"
end

-- One line from the editor, kept in its history; nil and "end", "interrupt" or "dropped"
-- (Ctrl-C after typing) as core.edit_line says. Lines that follow it at once, with no key
-- pressed in between (a paste), go on as if it ended in "\".
function Input:edited_line(prompt)
  local line, why = core.edit_line(prompt)
  if not line then
    if why ~= "end" then io.write("^C\n") end
    return nil, why
  end
  if line:find("%S") then core.edit_history("add", line) end
  if gptoss.wait_readable(0, 0) then line = line .. "\\" end
  return line
end

--- The next input: its lines joined by "\n" where each but the last ended in "\" (which
-- is dropped). Returns the text, or nil and "end" (end of input, Ctrl-D) or "interrupt"
-- (Ctrl-C at a prompt where nothing was typed). At the end of input after a "\", the text
-- so far is the input.
function Input:read()
  local lines = {}
  gptoss.interrupted() -- a Ctrl-C that came before the prompt is not for it
  while true do
    local prompt = #lines == 0 and self.prompt or self.continuation
    local line, why
    if self.editing then line, why = self:edited_line(prompt) else line, why = self:plain_line(prompt) end
    gptoss.interrupted() -- seen: the Ctrl-C that ended the line, if any
    if why == "dropped" or (why == "interrupt" and #lines > 0) then
      lines = {} -- Ctrl-C after typing: that input is dropped, the prompt comes again
    elseif not line then
      if why == "end" and #lines > 0 then return table.concat(lines, "\n") end
      return nil, why
    elseif line:sub(-1) == "\\" then
      lines[#lines + 1] = line:sub(1, -2)
    else
      lines[#lines + 1] = line
      return table.concat(lines, "\n")
    end
  end
end

--- Keeps the lines typed in the history file, and gives the terminal back: true, or nil
-- and why the history could not be saved.
function Input:close()
  if not self.editing then return true end
  local ok, why = true, nil
  if self.history then ok, why = core.edit_history("save", self.history) end
  core.edit_close()
  return ok, why
end

return line_input
