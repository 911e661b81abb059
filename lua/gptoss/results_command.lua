--- gptoss.results_command: a benchmark's command line as examples/RESULTS.md shows it, the
-- command's name and the arguments that differ from its defaults ("bench_gpu --batches 1,64"
-- for "examples/bench_gpu.lua 20b --ctx 1024 --batches 1,64"). The defaults are the ones the
-- command's own --help gives today: its parser is their one home.
local commands = require "gptoss.commands"

local command = {}

--- A command's defaults read from its argparse help text: {options = {["--ctx"] = {value =
-- true, default = "1024"}, ["--record"] = {value = false}}, positionals = {"20b"}} (a
-- positional's default, nil where it has none).
function command.defaults_from_help(help)
  local found, section, entry = { options = {}, positionals = {} }, nil, nil
  for line in help:gmatch("[^\n]+") do
    local heading = line:match("^(%a+):$")
    if heading then
      section, entry = heading, nil
    elseif line:match("^   %S") then
      local name = line:match("^   (.-)%s%s") or line:sub(4)
      if section == "Arguments" then
        entry = { positional = #found.positionals + 1 }
      else
        local long = name:match("(%-%-[%w_%-]+)")
        entry = long and { value = name:find("[<{]") ~= nil } or nil
        if long then found.options[long] = entry end
      end
    end
    local default = entry and line:match("%(default: (.-)%)%s*$")
    if default then
      if entry.positional then found.positionals[entry.positional] = default else entry.default = default end
    end
  end
  return found
end

-- The words of a command line (a shell's split for words in single quotes), each as written.
local function words(line)
  local list = {}
  for word in line:gmatch("%S+") do
    local last = list[#list]
    if last and last:find("^'") and (#last == 1 or not last:find("'$")) then
      list[#list] = last .. " " .. word -- inside a quoted word
    else
      list[#list + 1] = word
    end
  end
  return list
end

-- a word's value without the shell's quotes
local function unquoted(word)
  return word:match("^'(.*)'$") or word
end

--- The command a command line runs and the index of its first argument: "gptoss NAME ...",
-- "PATH/gptoss NAME ...", "[lua5.4] [PATH/]examples/NAME.lua ..."; nil for any other line.
function command.name(list)
  local first = list[1] and (list[1]:match("^lua5%.4$") or list[1]:match("^lua$")) and 2 or 1
  local name = list[first] and list[first]:match("^[%w_./-]*examples/([%w_]+)%.lua$")
  if name then return name, first + 1 end
  if list[1] and list[1]:match("^[%w_./-]*gptoss$") and list[2] and list[2]:match("^[%w_]+$") then
    return list[2], 3
  end
  return nil
end

--- command_line shortened to its command's name and the arguments that differ from
-- defaults_of(name)'s (a table of command.defaults_from_help's, or nil: all kept); a line that
-- runs no command is returned as it is. An option it does not know keeps its value (the next
-- word that is not an option): only what is known to be a default goes.
function command.shorten(command_line, defaults_of)
  local list = words(command_line)
  local name, first = command.name(list)
  if not name then return command_line end
  local defaults = defaults_of and defaults_of(name) or { options = {}, positionals = {} }
  local kept, positionals, i = { name }, {}, first
  while i <= #list do
    local word = list[i]
    local flag, inline = word:match("^(%-%-[^=]+)=(.*)$")
    flag = flag or word:match("^%-.*")
    local option = flag and defaults.options[flag]
    if option and option.value then
      local value = inline or list[i + 1]
      if not (value and unquoted(value) == option.default) then
        kept[#kept + 1] = inline and word or table.concat({ word, value }, " ")
      end
      i = i + (inline and 1 or 2)
    elseif flag and not option and not inline and list[i + 1] and not list[i + 1]:find("^%-") then
      kept[#kept + 1] = word .. " " .. list[i + 1]
      i = i + 2
    else
      kept[#kept + 1] = word
      if not flag then positionals[#positionals + 1] = #kept end
      i = i + 1
    end
  end
  -- a trailing positional that is its default goes; one before another stays, in its place
  local n = #positionals
  if n > 0 and unquoted(kept[positionals[n]]) == defaults.positionals[n] then table.remove(kept, positionals[n]) end
  return table.concat(kept, " ")
end

--- A memoized defaults_of for command.shorten: each command's defaults from `gptoss NAME
-- --help` run by `program` (the gptoss program's path), with the build folder `build`
-- (GPTOSS_BUILD; nil: the program's own). A name that is no longer a command keeps all its
-- arguments; a command whose help cannot be read raises, naming it.
function command.help_reader(program, build)
  local cache, known = {}, {}
  for _, name in ipairs(commands.names()) do known[name] = true end
  local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
  return function(name)
    if not known[name] then return nil end
    if cache[name] then return cache[name] end
    local env = build and ("GPTOSS_BUILD=%s "):format(quote(build)) or ""
    local p = assert(io.popen(("%s%s %s --help 2>/dev/null"):format(env, quote(program), quote(name))))
    local help = p:read("a")
    if not p:close() or not help:find("^Usage:") then
      error(("results: cannot read the defaults of %s: `gptoss %s --help` failed"):format(name, name), 0)
    end
    cache[name] = command.defaults_from_help(help)
    return cache[name]
  end
end

return command
