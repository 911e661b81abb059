-- The gptoss program (lua/gptoss/commands.lua, bin/gptoss.lua) through the tree's ./gptoss,
-- from a fresh directory outside the tree: the list of commands (one per example, each with
-- its line), --version, a command's --help under its own name, lua5.4 under `gptoss lua`,
-- scripts run as lua5.4 runs them, and one line for a name that is neither a command nor a
-- file, an option that is lua5.4's, and a Lua module the examples need that is missing; and
-- every command's --help offering the shared options (gptoss.flags) as one spelling each.
local gptoss = require "gptoss"
local commands = require "gptoss.commands"
local flags = require "gptoss.flags"
local H = require "helpers"

describe("the gptoss program", function()
  after_each(H.cleanup)

  local function gptoss_in(dir, args, env, stdin)
    return H.gptoss(pending, dir, args, env, stdin)
  end

  it("has a command for every example and an example for every command but lua and help", function()
    local examples = {}
    for _, name in ipairs(H.list_dir((H.TREE.root or "") .. "examples")) do
      local command = name:match("^(.*)%.lua$")
      if command then examples[#examples + 1] = command end
    end
    local listed = {}
    for _, name in ipairs(commands.names()) do
      if name ~= "lua" and name ~= "help" and name ~= "version" then listed[#listed + 1] = name end
    end
    table.sort(listed)
    assert.are.same(examples, listed)
  end)

  it("lists the commands with their lines on help, --help and alone, and prints its version", function()
    local dir = H.tmpdir()
    -- the docs' folder as this process and the program each spell it
    local function docs_named(text) return (text:gsub("Documentation: %S+", "Documentation: DOCS")) end
    for _, args in ipairs { {}, { "help" }, { "--help" }, { "-h" }, { "help", "--help" } } do
      local code, out, err = gptoss_in(dir, args)
      assert.are.same({ 0, docs_named(commands.help()), "" }, { code, docs_named(out), err }, table.concat(args, " "))
    end
    local help = commands.help()
    for _, c in ipairs(commands.LIST) do
      assert.truthy(help:find(("\n  %-18s%s\n"):format(c[1], c[2]), 1, true), c[1])
    end
    assert.truthy(help:find("synthetic shape (7m, 20b, 20b-2l, 120b)", 1, true), help)
    for _, args in ipairs { { "--version" }, { "version" } } do
      local code, out = gptoss_in(dir, args)
      assert.are.same({ 0, ("gptoss %s (%s)\n"):format(gptoss.VERSION, gptoss.platform) }, { code, out }, args[1])
    end
    -- the docs it names are there, in a source tree or installed beside the modules
    local docs = help:match("Documentation: (%S+/)\n$")
    assert.truthy(docs and io.open(docs .. "api.md"), help)
  end)

  it("answers --help of its own commands (lua, help, version) with their line", function()
    local dir = H.tmpdir()
    for _, c in ipairs(commands.LIST) do
      local name, line = c[1], c[2]
      if name == "lua" or name == "version" then
        for _, args in ipairs { { name, "--help" }, { "help", name } } do
          local code, out, err = gptoss_in(dir, args)
          assert.are.same({ 0, ("gptoss %s: %s\n"):format(name, line), "" }, { code, out, err }, table.concat(args, " "))
        end
      end
    end
  end)

  it("gives each command's help under its own name, also as help COMMAND", function()
    local dir = H.tmpdir()
    for _, name in ipairs(commands.names()) do
      if name ~= "lua" and name ~= "help" and name ~= "version" then
        local code, out, err = gptoss_in(dir, { name, "--help" })
        assert.are.same({ 0, "" }, { code, err }, name)
        assert.truthy(out:find("^Usage: gptoss " .. name .. " "), out)
      end
    end
    local code, out = gptoss_in(dir, { "help", "demo" })
    assert.are.equal(0, code)
    assert.are.equal(select(2, gptoss_in(dir, { "demo", "--help" })), out)
    code, out = gptoss_in(dir, { "demo", "--max-tokens", "x" })
    assert.are.same({ 1, "" }, { code, out })
  end)

  -- The help text of option `name` in a command's --help (its lines joined), or nil when not offered.
  local function option_help(help, name)
    local text = help:match("\n   " .. name:gsub("%-", "%%-") .. "[ ,][^\n]*\n?(.-)\n   %-")
      or help:match("\n   " .. name:gsub("%-", "%%-") .. "[ ,][^\n]*\n?(.-)\n\n")
    if not text then return nil end
    local first = help:match("\n   " .. name:gsub("%-", "%%-") .. " <[^>]*> +([^\n]*)") or ""
    return (first .. " " .. text):gsub("%s+", " ")
  end

  -- The help of a command and of each of its subcommands (checker's dump and compare), as one text.
  local function helps(dir, name)
    local code, help, err = gptoss_in(dir, { name, "--help" })
    assert.are.same({ 0, "" }, { code, err }, name)
    for sub in (help:match("\nCommands:\n(.-)\n\n") or ""):gmatch("\n?   (%S+)") do
      local sub_help
      code, sub_help, err = gptoss_in(dir, { name, sub, "--help" })
      assert.are.same({ 0, "" }, { code, err }, name .. " " .. sub)
      help = help .. "\n" .. sub_help
    end
    return help
  end

  it("offers the shared options in every command's --help as one spelling, and none retired", function()
    local dir, with = H.tmpdir(), { device = {}, steps = {}, max_tokens = {}, seed = {}, presence_penalty = {},
      frequency_penalty = {} }
    for _, name in ipairs(commands.names()) do
      if name ~= "lua" and name ~= "help" and name ~= "version" then
        local help = helps(dir, name)
        for old in pairs(flags.RETIRED) do
          assert.is_nil(help:find(old:gsub("%-", "%%-") .. "%f[^%w%-]"), name .. " offers " .. old)
        end
        local device = option_help(help, "--device")
        if device then
          with.device[#with.device + 1] = name
          assert.truthy(device:find("GPU numbers? from 0"), name .. ": " .. device)
        end
        local weights_seed = option_help(help, "--seed-weights")
        if weights_seed then
          assert.truthy(weights_seed:find(("(default: %d)"):format(gptoss.DEFAULT_SEED), 1, true), name)
        end
        for key, want in pairs { max_tokens = "^ ?Tokens generated at most, the prompt not counted",
          steps = "the course's %-n", seed = "^ ?Seed of ", presence_penalty = "^ ?In %[%-2, 2%]: ",
          frequency_penalty = "^ ?In %[%-2, 2%]: " } do
          local text = option_help(help, "--" .. key:gsub("_", "-"))
          if text then
            with[key][#with[key] + 1] = name
            assert.truthy(text:find(want), name .. ": " .. text)
          end
        end
      end
    end
    -- the course's getp keeps its -n as --steps; demo's --steps became --max-tokens
    assert.are.same({ "custom_scheduler", "bench_getp" }, with.steps)
    assert.are.same({ "run", "chat", "demo", "checker", "speculative", "beam_search", "best_of_n", "serve",
      "bench_gpu", "bench_prefill", "bench_getp" }, with.device)
    assert.are.same({ "run", "chat", "demo", "speculative", "beam_search", "best_of_n" }, with.max_tokens)
    assert.are.same({ "chat", "demo", "speculative", "best_of_n", "bench_serve", "bench_grammar" }, with.seed)
    for _, penalty in ipairs { "presence_penalty", "frequency_penalty" } do -- the commands that sample
      assert.are.same({ "run", "chat", "demo", "best_of_n" }, with[penalty])
    end
  end)

  it("names itself in a command's messages", function()
    local code, out, err = gptoss_in(H.tmpdir(), { "demo", "--max-tokens", "x" })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("^gptoss demo: %-%-max%-tokens: 'x' is not an integer >= 1\nUsage: gptoss demo "), err)
    code, out, err = gptoss_in(H.tmpdir(), { "run", "7m", "-t", "hot" })
    assert.are.same({ 1, "", "gptoss run: -t: 'hot' is not a number\nTry 'gptoss run --help' for usage.\n" },
      { code, out, err })
  end)

  it("runs lua5.4 itself under lua, with this gptoss on the module paths", function()
    local dir = H.tmpdir()
    local code, out, err = gptoss_in(dir, { "lua", "-e", "print(package.searchpath('gptoss', package.path))" })
    assert.are.same({ 0, H.TREE.root .. "lua/gptoss/init.lua\n" }, { code, out }, err)
    H.write_file(dir .. "/exit3.lua", "os.exit(tonumber(...))")
    assert.are.equal(3, (gptoss_in(dir, { "lua", "exit3.lua", "3" })))
    -- no arguments and no terminal: lua5.4 reads its program from stdin
    code, out = gptoss_in(dir, { "lua" }, nil, "print(require('gptoss').VERSION)")
    assert.are.same({ 0, gptoss.VERSION .. "\n" }, { code, out })
  end)

  it("runs a script as lua5.4 does: arg, ..., os.exit, and an error with its traceback", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/args.lua", "print(arg[0], #arg, ...)")
    local code, out = gptoss_in(dir, { "args.lua", "a", "" })
    assert.are.same({ 0, "args.lua\t2\ta\t\n" }, { code, out })
    H.write_file(dir .. "/noext", "os.exit(4)")
    assert.are.equal(4, (gptoss_in(dir, { "noext" })))
    H.write_file(dir .. "/boom.lua", "local function f() error('boom') end f()")
    local err
    code, out, err = gptoss_in(dir, { "boom.lua" })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("^gptoss: boom%.lua:1: boom\nstack traceback:\n"), err)
    code, _, err = gptoss_in(dir, { "missing.lua" })
    assert.are.same({ 1, "gptoss: cannot open missing.lua: No such file or directory\n" }, { code, err })
  end)

  it("answers a name that is neither a command nor a file, or lua5.4's option, in one line", function()
    local dir = H.tmpdir()
    local list = table.concat(commands.names(), ", ")
    local code, out, err = gptoss_in(dir, { "chatt", "7m" })
    assert.are.same({ 1, "", ("gptoss: 'chatt' is neither a command nor a file (commands: %s)\n"):format(list) },
      { code, out, err })
    code, out, err = gptoss_in(dir, { "-e", "print(1)" })
    assert.are.same({ 1, "", "gptoss: unknown option '-e': gptoss --help lists the commands; gptoss lua -e ... "
      .. "passes it to lua5.4\n" }, { code, out, err })
    code, out, err = gptoss_in(dir, { "help", "chatt" })
    assert.are.same({ 1, "", ("gptoss: help: 'chatt' is not a command (commands: %s)\n"):format(list) },
      { code, out, err })
  end)

  it("names the Lua module a command needs when it is missing, and its packages", function()
    -- a LUA_PATH without ";;" leaves out Lua's default paths, where Debian puts argparse
    local code, out, err = gptoss_in(H.tmpdir(), { "demo" }, { LUA_PATH = "/nonexistent/?.lua" })
    assert.are.same({ 1, "", "gptoss: the Lua module 'argparse' is missing: apt install lua-argparse (Debian), "
      .. "or luarocks install argparse\n" }, { code, out, err })
  end)
end)
