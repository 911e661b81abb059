--- gptoss.script: how the example scripts (examples/demo.lua, parity.lua, chat.lua,
-- custom_scheduler.lua, bench_*.lua) answer bad input. A usage error is one line, the
-- script's name and the message naming the option (`demo.lua: --steps: 'x' is not an
-- integer >= 1`, or `gptoss demo: ...` run as a command), then the usage; --help prints
-- the whole help. An error raised while the script runs (a missing file, an unknown model
-- shape, a device that is not there) is one line too, the script's name and the message
-- without the "file.lua:12: " position Lua puts in front of it; never a traceback. Each
-- ends with the exit status the script documents.
local cmdline = require "gptoss.cmdline"

local script = {}

--- The running script's file name (the last part of arg[0]), or "gptoss NAME" when the gptoss
-- program runs it (lua/gptoss/commands.lua sets arg[0] so): what its messages and usage start with.
script.name = (type(arg) == "table" and arg[0] or "script"):match("[^/]*$")

-- "NAME: msg", unless msg already starts with the name
local function prefixed(msg)
  if msg:sub(1, #script.name + 2) == script.name .. ": " then return msg end
  return script.name .. ": " .. msg
end

--- Ends the script for a usage error: "NAME: msg" and the parser's usage on stderr, exit
-- status `status` (default 1).
function script.usage_error(parser, msg, status)
  io.stdout:flush()
  cmdline.exit_with(status or 1, prefixed(msg) .. "\n" .. parser:get_usage())
end

--- The arguments argparse parser `parser` reads from the command line (the global arg);
-- on a usage error, script.usage_error(parser, its message, status).
function script.parse(parser, status)
  local ok, args = parser:pparse()
  if not ok then script.usage_error(parser, args, status) end
  return args
end

--- Calls main(); an error it raises ends the script with "NAME: message" (cmdline.message: no
-- source position) on stderr and exit status `status` (default 1).
function script.run(main, status)
  local ok, err = pcall(main)
  if not ok then
    io.stdout:flush()
    cmdline.exit_with(status or 1, prefixed(cmdline.message(err)))
  end
end

--- An argparse converter whose messages start with the option's name, which argparse
-- leaves out: script.named("--rtol", cmdline.non_negative).
function script.named(flag, convert)
  return function(s)
    local v, err = convert(s)
    if v == nil then return nil, ("%s: %s"):format(flag, err or ("'%s' is not valid"):format(s)) end
    return v
  end
end

return script
