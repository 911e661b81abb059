--- gptoss.commands: the gptoss program (bin/gptoss.lua; luarocks installs it as gptoss, and
-- ./gptoss runs it from a source tree). `gptoss COMMAND [args]` runs the example of that name
-- (examples/COMMAND.lua, installed beside the modules: gptoss.project_file) with arg[0] set to
-- "gptoss COMMAND", which its messages and usage then start with; `gptoss FILE.lua [args]`
-- runs a script as lua5.4 would; `gptoss lua [args]` is lua5.4 itself (a prompt without
-- arguments) with this gptoss on the module paths; `gptoss`, `gptoss help` and `gptoss --help`
-- list the commands, `gptoss help COMMAND` is `gptoss COMMAND --help`, and `gptoss version`
-- (or --version) prints gptoss.VERSION. Exit status: the command's; 1 for a name that is neither a command
-- nor a file, in one line that lists the commands.
local gptoss = require "gptoss"

local commands = {}

-- The commands in the order `gptoss help` lists them, each with its line there. All but
-- lua and help run examples/NAME.lua (tests/commands_spec.lua checks that each has its
-- file and that every example has its command).
commands.LIST = {
  { "run", "the course's command line: generate from a prompt, getp over a request file" },
  { "chat", "a chat in the terminal: a line of stdin a question (docs/chat.md)" },
  { "demo", "generation from a prompt, streamed as it decodes (what make demo runs)" },
  { "parity", "two replicas of a model compared stage by stage (docs/parity.md)" },
  { "checker", "dump a replica's logits to a file, compare two logits files (docs/parity.md)" },
  { "speculative", "speculative decoding against plain decoding (docs/loops.md)" },
  { "beam_search", "beam search over forked slots (docs/loops.md)" },
  { "best_of_n", "best-of-n sampling from one prefill (docs/loops.md)" },
  { "custom_scheduler", "getp under a scheduler written in Lua, beside the built-in ones" },
  { "serve", "an OpenAI-compatible HTTP server: chat and completions, streamed (docs/serve.md)" },
  { "bench_golden", "benchmark: the CPU golden engine's prefill and decode rows a second" },
  { "bench_gpu", "benchmark: GPU decode throughput by batch size" },
  { "bench_prefill", "benchmark: time to first token and prefill tokens/s of one prompt" },
  { "bench_getp", "benchmark: getp throughput, the course's way" },
  { "bench_sampler", "benchmark: the CPU sampler's cost a draw" },
  { "bench_tokenizer", "benchmark: tokenizer encode and decode throughput" },
  { "bench_serve", "benchmark: load an OpenAI-compatible server, TTFT/TPOT/ITL and throughput" },
  { "bench_grammar", "benchmark: structured output's schema compile time and token mask time" },
  { "plot", "draw bench_gpu's and bench_getp's JSON lines as a PNG (through gnuplot)" },
  { "results", "draw examples/RESULTS.md and README.md's figures from examples/results.jsonl" },
  { "pull", "download a model from the Hugging Face hub into its local cache (docs/getting-models.md)" },
  { "lua", "lua5.4 with this gptoss on its module paths: a prompt, or lua5.4's arguments" },
  { "help", "this list; gptoss help COMMAND: that command's options" },
  { "version", "gptoss's version and the platform it was built for" },
}

-- the commands of the program itself, not examples: their help is their line here
local BUILT_IN = { lua = true, help = true, version = true }
local KNOWN, DESCRIPTION = {}, {}
for _, c in ipairs(commands.LIST) do KNOWN[c[1]], DESCRIPTION[c[1]] = true, c[2] end

--- The command names, in the help's order.
function commands.names()
  local names = {}
  for i, c in ipairs(commands.LIST) do names[i] = c[1] end
  return names
end

-- Where the docs are: the source tree's docs/ or the copy installed beside the modules, its
-- "dir/../" steps taken out.
local function docs_folder()
  local api = gptoss.project_file("docs/api.md")
  if not api then return "README.md and docs/ in the source tree" end
  local folder, before = api:gsub("api%.md$", ""), nil
  while folder ~= before do
    before = folder
    folder = folder:gsub("([^/]+)/%.%./", function(step) return step ~= ".." and "" or nil end, 1)
  end
  return folder
end

--- The text `gptoss help` prints.
function commands.help()
  local lines = {
    "Usage: gptoss COMMAND [args]     run a command; gptoss COMMAND --help: its options",
    "       gptoss FILE.lua [args]    run a Lua script with gptoss on the module paths",
    "",
    "Commands:",
  }
  for _, c in ipairs(commands.LIST) do lines[#lines + 1] = ("  %-18s%s"):format(c[1], c[2]) end
  table.move({
    "",
    "MODEL, in every command that takes one: a course .bin file, a checkpoint directory, a",
    ("synthetic shape (%s), whose weights --seed-weights N seeds, or a"):format(table.concat(gptoss.SHAPES, ", ")),
    "Hugging Face id (openai/gpt-oss-20b) that gptoss pull has put in the local cache.",
    "Devices: --device cpu|N, or cpu|N,M,... where a command runs several replicas; GPUs count from 0.",
    "",
    ("gptoss %s, built for %s. Documentation: %s"):format(gptoss.VERSION, gptoss.platform, docs_folder()),
  }, 1, 7, #lines + 1, lines)
  return table.concat(lines, "\n") .. "\n"
end

local function fail(msg)
  io.stderr:write("gptoss: ", msg, "\n")
  return 1
end

local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- The interpreter running this program: the lowest index of arg (lua.c puts the interpreter
-- and its options below 0, and the luarocks wrapper passes its -e there).
local function interpreter(argv)
  local i = 0
  while argv[i - 1] ~= nil do i = i - 1 end
  return argv[i]
end

-- lua5.4 with args in a child process whose module paths are this one's (LUA_PATH_5_4 and
-- LUA_CPATH_5_4 come before LUA_PATH and LUA_CPATH), so that it loads this gptoss.
local function run_lua(argv, args)
  local words = { "LUA_PATH_5_4=" .. quote(package.path), "LUA_CPATH_5_4=" .. quote(package.cpath),
    quote(interpreter(argv)) }
  for _, a in ipairs(args) do words[#words + 1] = quote(a) end
  local _, how, code = os.execute(table.concat(words, " "))
  return how == "exit" and code or 128 + code
end

-- Runs the Lua file at path as lua5.4 runs a script: arg[0] = name, arg[1..] and the chunk's
-- ... = args, the interpreter's own words below 0 kept. arg is rewritten in place, since
-- argparse keeps the table it found when it was loaded. An error the script raises is
-- printed with its traceback, as lua5.4 prints it; exit status 1 then, else 0 (a script
-- that calls os.exit chooses its own).
local function run_file(argv, path, name, args)
  for i = #argv, 1, -1 do argv[i] = nil end
  argv[0] = name
  table.move(args, 1, #args, 1, argv)
  _G.arg = argv
  local chunk, err = loadfile(path)
  if not chunk then return fail(err) end
  local ok, trace = xpcall(chunk, debug.traceback, table.unpack(args))
  if not ok then return fail(trace) end
  return 0
end

-- The Lua modules the examples take from outside the project: one line naming the package
-- when one is missing, rather than the first example's traceback.
local function missing_module()
  for _, m in ipairs { "argparse", "dkjson" } do
    if not pcall(require, m) then
      return ("the Lua module '%s' is missing: apt install lua-%s (Debian), or luarocks install %s"):format(m, m, m)
    end
  end
end

local function run_command(argv, name, args)
  local why = missing_module()
  if why then return fail(why) end
  local path = gptoss.project_file("examples/" .. name .. ".lua")
  if not path then return fail(("examples/%s.lua is not installed beside the gptoss modules"):format(name)) end
  return run_file(argv, path, "gptoss " .. name, args)
end

--- Runs the program on argv (the global arg of bin/gptoss.lua) and returns its exit status.
function commands.main(argv)
  local first = argv[1]
  local args = table.move(argv, 2, #argv, 1, {})
  local asks_help = args[1] == "--help" or args[1] == "-h"
  if first == nil or first == "--help" or first == "-h" or (first == "help" and (args[1] == nil or asks_help)) then
    io.write(commands.help())
    return 0
  elseif first == "help" or (BUILT_IN[first] and asks_help) then
    local name = first == "help" and args[1] or first
    if not KNOWN[name] then
      return fail(("help: '%s' is not a command (commands: %s)"):format(name, table.concat(commands.names(), ", ")))
    end
    if BUILT_IN[name] then
      print(("gptoss %s: %s"):format(name, DESCRIPTION[name]))
      return 0
    end
    return run_command(argv, name, { "--help" })
  elseif first == "--version" or first == "version" then
    print(("gptoss %s (%s)"):format(gptoss.VERSION, gptoss.platform))
    return 0
  elseif first == "lua" then
    return run_lua(argv, args)
  elseif KNOWN[first] then
    return run_command(argv, first, args)
  elseif first:find("^%-") then
    return fail(("unknown option '%s': gptoss --help lists the commands; gptoss lua %s ... passes it to lua5.4")
      :format(first, first))
  end
  -- something is there (asked without opening it: io.open would wait on a named pipe)
  if gptoss.regular_file(first) ~= nil or first:find("/") or first:find("%.lua$") then
    return run_file(argv, first, first, args)
  end
  return fail(("'%s' is neither a command nor a file (commands: %s)"):format(first,
    table.concat(commands.names(), ", ")))
end

return commands
