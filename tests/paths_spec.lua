-- How a script finds gptoss and tokenizer.bin from any directory: the ./gptoss wrapper at
-- the tree's root (docs/building.md#running-from-the-source-tree) and
-- gptoss.tokenizer_path()'s order ($GPTOSS_TOKENIZER, build/tokenizer.bin, the copy
-- installed beside the modules). Each runs as a child process in a fresh directory outside
-- the tree, with the interpreter and the build folder of these specs.
local H = require "helpers"

local shell_quote, run_in = H.shell_quote, H.run_in
local ROOT, BUILD, LUA = H.TREE.root, H.TREE.build, H.TREE.lua

describe("./gptoss", function()
  after_each(H.cleanup)

  local function wrapper(dir, args, env)
    return H.gptoss(pending, dir, args, env)
  end

  it("runs a script from another directory with the tree's modules and tokenizer", function()
    -- where the wrapper looks for it
    if not package.searchpath("tokenizer", BUILD .. "/?.bin;" .. ROOT .. "build/?.bin") then
      pending("needs the tokenizer: make tokenizer")
    end
    local dir = H.tmpdir()
    H.write_file(dir .. "/hello.lua", [[
      local gptoss = require "gptoss"
      print(package.searchpath("gptoss", package.path))
      print(table.concat(gptoss.tokenizer():encode("Hello world"), " "), ...)
    ]])
    local code, out, err = wrapper(dir, { "hello.lua", "and", "args" })
    assert.are.equal(0, code, err)
    assert.are.equal(ROOT .. "lua/gptoss/init.lua\n13225 2375\tand\targs\n", out)
  end)

  it("runs a command by its name, and lua5.4 through a symlink", function()
    local dir = H.tmpdir()
    local code, out, err = wrapper(dir, { "parity", "7m", "--tokens", "1,2", "--a", "cpu:fp32" })
    assert.are.equal(0, code, err)
    assert.truthy(out:find("\nall stages within tolerance\n$"), out)
    assert(os.execute(("ln -s %s %s/g"):format(shell_quote(ROOT .. "gptoss"), shell_quote(dir))))
    code, out, err = run_in(dir, { GPTOSS_LUA = LUA, GPTOSS_BUILD = BUILD },
      { "./g", "lua", "-e", "print(require('gptoss').platform)" })
    assert.are.same({ 0, require("gptoss").platform .. "\n" }, { code, out }, err)
  end)

  it("says in one line that the module is not built, and what is neither a command nor a file", function()
    local dir = H.tmpdir()
    local code, out, err = wrapper(dir, { "demo" }, { GPTOSS_BUILD = dir .. "/build" })
    assert.are.same({ 1, "", dir .. "/build/gptoss/core.so missing: run make\n" }, { code, out, err })
    code, out, err = wrapper(dir, { "demos" })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("^gptoss: 'demos' is neither a command nor a file %(commands: run, chat, demo, "), err)
  end)
end)

describe("gptoss.tokenizer_path", function()
  after_each(H.cleanup)

  -- what the lookup returns in dir, with the tree's modules and `paths` before them
  local function lookup(dir, env, paths)
    if not (ROOT and BUILD) then pending("gptoss was not loaded from a source tree and a build folder") end
    env.LUA_PATH = (paths or "") .. ROOT .. "lua/?.lua;" .. ROOT .. "lua/?/init.lua;;"
    env.LUA_CPATH = BUILD .. "/?.so;;"
    local code, out, err = run_in(dir, env, { LUA, "-e", [[
      local gptoss = require "gptoss"
      print(gptoss.tokenizer_path())
      print(select(2, pcall(gptoss.tokenizer)))]] })
    assert.are.equal(0, code, err)
    return out:match("^([^\n]*)\n(.*)\n$")
  end

  it("takes $GPTOSS_TOKENIZER, else build/tokenizer.bin here, else the installed copy", function()
    local dir = H.tmpdir()
    assert.are.equal("/elsewhere/t.bin", (lookup(dir, { GPTOSS_TOKENIZER = "/elsewhere/t.bin" })))
    local path, err = lookup(dir, {})
    assert.are.equal("nil\tno tokenizer.bin found: $GPTOSS_TOKENIZER is not set, build/tokenizer.bin is not in "
      .. "the current directory (make tokenizer writes it) and none is installed beside the gptoss modules", path)
    assert.are.equal("tokenizer: no tokenizer.bin found: ", err:sub(1, 35))
    -- a tree luarocks --local installed (~/.luarocks/share/lua/5.4): tokenizer.bin beside the
    -- modules, found from where gptoss's init.lua was loaded ("?.lua" made "?.bin" in
    -- package.path once turned .luarocks into .binrocks)
    local share = dir .. "/.luarocks/share/lua/5.4"
    assert(os.execute(("mkdir -p %s/gptoss"):format(shell_quote(share))))
    -- copied in Lua: cp, run with make test-sanitized's preloaded ASan, reports leaks of its own
    for _, name in ipairs(H.list_dir(ROOT .. "lua/gptoss")) do
      H.write_file(share .. "/gptoss/" .. name, H.read_file(ROOT .. "lua/gptoss/" .. name))
    end
    H.write_file(share .. "/gptoss/tokenizer.bin", "")
    local installed = share .. "/?.lua;" .. share .. "/?/init.lua;"
    assert.are.equal(share .. "/gptoss/tokenizer.bin", (lookup(dir, {}, installed)))
    assert(os.execute(("mkdir %s/build"):format(dir)))
    H.write_file(dir .. "/build/tokenizer.bin", "")
    assert.are.equal("build/tokenizer.bin", (lookup(dir, {}, installed)))
    assert.are.equal("/elsewhere/t.bin", (lookup(dir, { GPTOSS_TOKENIZER = "/elsewhere/t.bin" })))
  end)
end)
