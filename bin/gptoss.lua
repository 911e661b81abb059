#!/usr/bin/env lua5.4
-- The gptoss program: luarocks installs this file as the command gptoss
-- (gptoss-scm-1.rockspec), and ./gptoss runs it from a source tree. lua/gptoss/commands.lua
-- is all of it; the state is closed on the way out, as lua5.4 closes it after a script.
os.exit(require("gptoss.commands").main(arg), true)
