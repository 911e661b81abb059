-- How every command names a model (gptoss.naming) and spells what it shares (gptoss.flags):
-- MODEL a path or a shape of gptoss.SHAPES, --seed-weights of one default, --device cpu|N or
-- a list of GPU numbers from 0 and its defaults, --max-tokens, --seed, and the spellings before
-- them refused by every command that took them, naming the new one; the loader naming a
-- checkpoint's file or a tokenizer.bin given as the model (src/core/model_load.c); and output
-- paths checked before any work (cmdline.check_writable), without truncating a file that is
-- there.
local argparse = require "argparse"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local H = require "helpers"

local NEITHER = "is neither a file, a directory nor a synthetic shape (7m, 20b, 20b-2l, 120b)"

describe("gptoss.naming", function()
  after_each(H.cleanup)

  local function parse(opts, ...)
    local p = argparse("cmd")
    naming.add_model(p, opts)
    return p:pparse { ... }
  end

  it("takes MODEL as an argument, its default when given one, and --seed-weights of one default", function()
    local ok, a = parse({ default = "7m" })
    assert.is_true(ok, a)
    assert.are.same({ "7m", gptoss.DEFAULT_SEED }, { a.model, a.seed_weights })
    ok, a = parse({}, "x.bin", "--seed-weights", "5")
    assert.are.same({ true, "x.bin", 5 }, { ok, a.model, a.seed_weights })
    assert.are.same({ false, "missing argument 'model'" }, { parse({}) })
  end)

  it("refuses the spellings it replaces, naming the right one", function()
    for _, case in ipairs {
      { { "--model", "20b" }, "--model 20b is now written 20b: the model is the command's argument" },
      { { "--synthetic", "7m" }, "--synthetic 7m is now written 7m: a synthetic shape is named as the model" },
      { { "synthetic:20b-2l" }, "'synthetic:20b-2l' is now written 20b-2l: a synthetic shape is named as the model" },
      { { "7m", "--seed", "3" }, "--seed 3 is now written --seed-weights 3" },
      { { "7m", "--seed-weights", "x" }, "--seed-weights: 'x' is not an integer" },
    } do
      local ok, err = parse({ old_seed = true }, table.unpack(case[1]))
      assert.is_false(ok, table.concat(case[1], " "))
      assert.are.equal(case[2], err:sub(1, #case[2]))
    end
    -- --seed is another option's where it never seeded the weights
    assert.are.same({ false, "unknown option '--seed'" }, { parse({}, "7m", "--seed", "3") })
  end)

  it("opens a shape as a synthetic model wherever it runs, any other name as a path", function()
    local m = naming.open("20b-2l", 3)
    assert.are.same({ "synthetic", 2, 3 }, { m.format, m.config.n_layers, m.seed })
    assert.are.same({ "synthetic 7m", "models/7m.bin" }, { naming.describe("7m"), naming.describe("models/7m.bin") })
    local dir = H.tmpdir()
    gptoss.synthetic("7m", { seed = 2 }):save(dir .. "/7m")
    local tree = H.TREE
    if not (tree.root and tree.build) then pending("gptoss was not loaded from a source tree and a build folder") end
    local paths = { LUA_PATH = tree.root .. "lua/?.lua;" .. tree.root .. "lua/?/init.lua;;",
      LUA_CPATH = tree.build .. "/?.so;;" }
    local code, out, err = H.run_in(dir, paths, { tree.lua, "-e", [[
      local naming = require "gptoss.naming"
      print(naming.open("7m").format, naming.open("./7m").format)
      for _, name in ipairs { "9m", "gpt-oss-20b", "gpt-oss-20b.bin", "models/x/7m" } do
        print((select(2, pcall(naming.open, name)):gsub("^[^\n]-%.lua:%d+: ", "")))
      end]] })
    assert.are.equal(0, code, err)
    assert.are.equal(table.concat({ "synthetic\tcourse", "'9m' " .. NEITHER, "'gpt-oss-20b' " .. NEITHER,
      "load: cannot open model file 'gpt-oss-20b.bin': No such file or directory",
      "load: cannot open model file 'models/x/7m': No such file or directory", "" }, "\n"), out)
  end)
end)

-- every command that names a model: the script, the arguments before MODEL, the exit status
-- of a usage error, and whether it had --seed for the weights
local COMMANDS = {
  { "run.lua", {}, 1 }, { "chat.lua", {}, 1 }, { "demo.lua", {}, 1 }, { "parity.lua", {}, 2, true },
  { "checker.lua", { "dump" }, 2, true }, { "speculative.lua", {}, 1 }, { "beam_search.lua", {}, 1 },
  { "best_of_n.lua", {}, 1 }, { "custom_scheduler.lua", {}, 1 }, { "bench_golden.lua", {}, 1 },
  { "bench_gpu.lua", {}, 1 }, { "bench_prefill.lua", {}, 1 }, { "bench_getp.lua", {}, 1 },
}

describe("gptoss.flags", function()
  local function parse(setup, ...)
    local p = argparse("cmd")
    setup(p)
    return p:pparse { ... }
  end

  it("reads --device as cpu or one GPU number from 0, or a list where a command runs several", function()
    local function one(p) flags.add_device(p) end
    local function several(p) flags.add_device(p, true) end
    for _, case in ipairs {
      { one, { "--device", "cpu" }, "cpu" }, { one, { "--device", "0" }, 0 }, { one, { "--device", "3" }, 3 },
      { several, { "--device", "cpu" }, { "cpu" } }, { several, { "--device", "0, 2" }, { 0, 2 } },
      { several, { "--device", "1" }, { 1 } }, { one, {}, nil }, { several, {}, nil },
    } do
      local ok, a = parse(case[1], table.unpack(case[2]))
      assert.is_true(ok, a)
      assert.are.same(case[3], a.device, table.concat(case[2], " "))
    end
    for _, case in ipairs {
      { one, { "--device=-1" }, "--device: '-1' is not \"cpu\" or a GPU number from 0" },
      { one, { "--device", "gpu" }, "--device: 'gpu' is not \"cpu\" or a GPU number from 0" },
      { one, { "--device", "0,1" }, "--device: '0,1': this command runs one replica, on \"cpu\" or a GPU number from 0" },
      { several, { "--device", "1,1" }, "--device: '1,1' is not \"cpu\" or distinct GPU numbers from 0 (\"0,1\")" },
      { several, { "--device", "cpu,1" }, "--device: 'cpu,1' is not" },
      { several, { "--device=-1" }, "--device: '-1' is not" },
      { one, { "--devices", "1" }, "--devices 1 is now written --device 1" },
      { several, { "--devices", "0,1" }, "--devices 0,1 is now written --device 0,1" },
    } do
      local ok, err = parse(case[1], table.unpack(case[2]))
      assert.is_false(ok, table.concat(case[2], " "))
      assert.are.equal(case[3], err:sub(1, #case[3]))
    end
  end)

  it("defaults to the GPUs when there are any (the first for one replica), else the CPU", function()
    local devices = gptoss.devices
    finally(function() gptoss.devices = devices end)
    gptoss.devices = function() return { { id = 0, name = "a" }, { id = 1, name = "b" } } end
    assert.are.same({ 0, { 0, 1 } }, { flags.one_device(nil), flags.devices(nil) })
    assert.are.same({ "cpu", { 1 } }, { flags.one_device("cpu"), flags.devices({ 1 }) })
    assert.are.same({ name = "b", id = 1 }, gptoss.device(1))
    assert.is_nil(gptoss.device(2))
    gptoss.devices = function() return {} end
    assert.are.same({ "cpu", { "cpu" } }, { flags.one_device(nil), flags.devices(nil) })
  end)

  it("reads --max-tokens, --seed and the course's --steps, and refuses a retired spelling with the new one", function()
    local function all(p)
      flags.add_max_tokens(p, 16)
      flags.add_seed(p, nil, "random")
      flags.add_course_steps(p, 64)
      flags.retire(p, "--sample-seed")
      flags.retire(p, "--max-new")
    end
    local ok, a = parse(all)
    assert.are.same({ true, 16, nil, 64 }, { ok, a.max_tokens, a.seed, a.steps })
    ok, a = parse(all, "--max-tokens", "3", "--seed=-5", "--steps", "7")
    assert.are.same({ true, 3, -5, 7 }, { ok, a.max_tokens, a.seed, a.steps })
    for _, case in ipairs {
      { { "--max-tokens", "0" }, "--max-tokens: '0' is not an integer >= 1" },
      { { "--seed", "x" }, "--seed: 'x' is not an integer" },
      { { "--sample-seed", "3" }, "--sample-seed 3 is now written --seed 3" },
      { { "--max-new", "3" }, "--max-new 3 is now written --max-tokens 3" },
    } do
      assert.are.same({ false, case[2] }, { parse(all, table.unpack(case[1])) })
    end
  end)

  it("reads --presence-penalty and --frequency-penalty in [-2, 2] into the sampler's options", function()
    local function penalties(p) flags.add_penalties(p) end
    local ok, a = parse(penalties)
    assert.are.same({ true, false }, { ok, flags.penalized(a) })
    assert.are.same({ temperature = 1 }, flags.with_penalties(a, { temperature = 1 }))
    ok, a = parse(penalties, "--presence-penalty", "0.5", "--frequency-penalty=-2")
    assert.are.same({ true, true }, { ok, flags.penalized(a) })
    assert.are.same({ temperature = 1, presence_penalty = 0.5, frequency_penalty = -2 },
      flags.with_penalties(a, { temperature = 1 }))
    assert.is_false(flags.penalized(select(2, parse(penalties, "--presence-penalty", "0", "--frequency-penalty", "0"))))
    for _, flag in ipairs { "--presence-penalty", "--frequency-penalty" } do
      for _, bad in ipairs { "2.5", "-3", "nan", "x" } do
        local refused = ("%s: '%s' is not a number in [-2, 2]"):format(flag, bad)
        assert.are.same({ false, refused }, { parse(penalties, flag .. "=" .. bad) })
      end
    end
  end)

  it("puts the Lua API's errors a command's user meets in the command line's terms, keeping the others", function()
    for _, case in ipairs {
      { "chat.lua:12: session:ask: the conversation is 357 tokens with no older turn left to drop, the replica's "
        .. "context 256", "your message is 357 tokens; --ctx is 256" },
      { "replica: device 3 is out of range 0..1", "--device 3: this machine's GPUs are 0..1" },
      { "getp: building the replica on gpu 2: replica: device 2: no GPU is available (gptoss.devices() is empty)",
        "getp: building the replica on gpu 2: --device 2: this build sees no GPU here (--device cpu runs on the CPU)" },
      { "x.lua:3: step: tokens[1] = 201088 is out of range 0..201087", "step: tokens[1] = 201088 is out of range 0..201087" },
    } do
      assert.are.equal(case[2], cmdline.message(case[1]))
    end
  end)
end)

describe("every command that names a model", function()
  after_each(H.cleanup)

  it("refuses --model, --synthetic and synthetic:NAME with the new spelling, before any work", function()
    for _, c in ipairs(COMMANDS) do
      local script, before, status, old_seed = table.unpack(c)
      local run = H.runner("examples/" .. script, pending)
      local cases = {
        { { "--model", "7m" }, ": --model 7m is now written 7m: the model is the command's argument\n" },
        { { "--synthetic", "7m" }, ": --synthetic 7m is now written 7m: a synthetic shape is named as the model\n" },
        { { "synthetic:7m" }, ": 'synthetic:7m' is now written 7m: a synthetic shape is named as the model\n" },
      }
      if old_seed then cases[4] = { { "7m", "--seed", "2" }, ": --seed 2 is now written --seed-weights 2\n" } end
      for _, case in ipairs(cases) do
        local args = table.move(case[1], 1, #case[1], #before + 1, table.move(before, 1, #before, 1, {}))
        local code, out, err = run(args)
        local what = script .. " " .. table.concat(args, " ")
        assert.are.same({ status, "" }, { code, out }, what)
        assert.truthy(err:find(case[2], 1, true), what .. "\n" .. err)
      end
    end
  end)
end)

describe("the context a command gives a model", function()
  after_each(H.cleanup)

  it("is --ctx within the model's max_seq_len, else the model's at most 8192, and a --ctx past it is refused", function()
    local m = gptoss.synthetic("7m")
    local limit = m.config.seq_len
    assert.are.equal(math.min(limit, 8192), naming.context(m))
    assert.are.equal(limit, naming.context(m, limit, "--ctx"))
    local ctx, why = naming.context(m, limit + 1, "--ctx")
    assert.is_nil(ctx)
    assert.are.equal(("--ctx %d is past the model's context: %d positions (its max_seq_len)"):format(limit + 1, limit),
      why)
  end)

  it("is checked by chat and serve before they serve anything, and serve's port before the model loads", function()
    local chat, serve = H.runner("examples/chat.lua", pending), H.runner("examples/serve.lua", pending)
    local code, out, err = chat({ "7m", "--device", "cpu", "--ctx", "100000" })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("--ctx 100000 is past the model's context: 2048 positions", 1, true), err)
    code, out, err = serve({ "7m", "--device", "cpu", "--ctx", "100000", "--port", "0" })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("--ctx 100000 is past the model's context: 2048 positions", 1, true), err)
    code, out, err = serve({ "7m", "--device", "cpu", "--port", "99999" })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("--port: '99999' is not an integer in 0..65535", 1, true), err)
  end)
end)

describe("a file given as the model that is not one", function()
  after_each(H.cleanup)

  it("is named for what it is: a checkpoint's config.json or safetensors, a JSON, a tokenizer.bin", function()
    local dir = H.tmpdir() .. "/ckpt"
    gptoss.synthetic("7m"):save(dir, { format = "hf" })
    H.expect_error(function() gptoss.load(dir .. "/config.json") end,
      ("load: '%s/config.json' is a checkpoint's config.json: pass the checkpoint's directory, '%s'"):format(dir, dir))
    H.expect_error(function() gptoss.load(dir .. "/model.safetensors") end, ("load: '%s/model.safetensors' is a "
      .. "safetensors file, part of a checkpoint: pass the checkpoint's directory, '%s'"):format(dir, dir))
    local json = H.tmp()
    H.write_file(json, ' \n{"added_tokens": []}')
    H.expect_error(function() gptoss.load(json) end,
      ("load: '%s' is a JSON file, not a model: pass a course .bin or a checkpoint's directory"):format(json))
    local tok = H.need_tokenizer(pending)
    H.expect_error(function() gptoss.load(tok) end,
      ("load: '%s' is a tokenizer.bin, not a model: pass it as the tokenizer"):format(tok))
    -- a course file of a small vocabulary cut short is still a truncated model
    local small = H.tmp()
    gptoss.synthetic(H.TINY):save(small)
    H.write_file(small, H.read_file(small):sub(1, 100))
    H.expect_error(function() gptoss.load(small) end, "truncated: expected ")
  end)
end)

describe("output paths", function()
  after_each(H.cleanup)

  it("are checked before any work, an existing file left as it is", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/kept", "kept\n")
    cmdline.check_writable("-o", dir .. "/kept")
    assert.are.equal("kept\n", H.read_file(dir .. "/kept"))
    cmdline.check_writable("-o", dir .. "/new")
    assert.are.same({ "kept" }, H.list_dir(dir))
    H.expect_error(function() cmdline.check_writable("-o", dir) end, ("-o: cannot write '%s': Is a directory"):format(dir))
    H.expect_error(function() cmdline.check_writable("--ids", dir .. "/no/x") end,
      ("--ids: cannot write '%s/no/x': No such file or directory"):format(dir))
  end)

  it("keep what they hold when the run fails before it writes them, with no header printed", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/in.txt", "1\nHello\n")
    H.write_file(dir .. "/out.txt", "kept\n")
    local run = H.runner("examples/run.lua", pending)
    local code, out, err = run { "7m", "-m", "getp", "-i", dir .. "/in.txt", "-o", dir .. "/out.txt", "-z",
      dir .. "/none.bin" }
    assert.are.same({ 1, "", "kept\n" }, { code, out, H.read_file(dir .. "/out.txt") })
    assert.truthy(err:find("^run%.lua: cannot open tokenizer file '"), err)
  end)
end)
