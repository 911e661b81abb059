-- Helpers shared by the specs: files, temporary paths and directories, safetensors files
-- read and written plainly, error checks, tables and the course's config fields
-- (docs/course.md: #header order, #named-configurations-and-constants values).
local helpers = {}

-- Header fields in file order.
helpers.CONFIG_FIELDS = {
  "vocab_size", "hidden_dim", "n_experts", "experts_per_token", "intermediate_dim", "n_layers",
  "head_dim", "n_attn_heads", "n_kv_heads", "seq_len", "initial_context_length", "rope_theta",
  "rope_scaling_factor", "sliding_window", "swiglu_limit",
}

-- The 7m column of docs/course.md#named-configurations-and-constants.
helpers.CONFIG_7M = {
  vocab_size = 201088, hidden_dim = 32, n_experts = 32, experts_per_token = 4, intermediate_dim = 64,
  n_layers = 2, head_dim = 32, n_attn_heads = 2, n_kv_heads = 1, seq_len = 2048,
  initial_context_length = 4096, rope_theta = 150000.0, rope_scaling_factor = 32.0,
  sliding_window = 128, swiglu_limit = 7.0,
}

-- A small but complete shape (GQA, a window of 4 positions, 8 experts) whose steps cost
-- little: the loops' specs run many.
helpers.TINY = {
  vocab_size = 97, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
  n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64, sliding_window = 4,
}

--- A copy of base with changes applied.
function helpers.with(base, changes)
  local c = {}
  for k, v in pairs(base) do c[k] = v end
  for k, v in pairs(changes or {}) do c[k] = v end
  return c
end

--- The values of a (nested) table or a host tensor in order, as one list (util.flatten).
helpers.flatten = require("gptoss.util").flatten

--- Two batches of the rows of `order` (slots) at position pos after a step whose rows were
-- the slots of `prev` and sampled `ids`: one fed from that step (`from` = it, token -j: its
-- row j), except slot `told` given its id, and one given every id. A fed replica and a
-- told one stepping these must agree.
function helpers.fed_and_told(prev, order, pos, ids, from, told)
  local row_of = {}
  for j, s in ipairs(prev) do row_of[s] = j end
  local fed = { slots = order, positions = {}, tokens = {}, from = from }
  local given = { slots = order, positions = {}, tokens = {} }
  for i, s in ipairs(order) do
    local j = row_of[s]
    fed.positions[i], fed.tokens[i] = pos, s == told and ids[j] or -j
    given.positions[i], given.tokens[i] = pos, ids[j]
  end
  return fed, given
end

--- The ids slot `slot` of replica r generates after prompt, one position a step, the
-- prompt fed one id a step too (no chunks, no fed steps, the slot's own sampling): the
-- plainest loop, for the loops' specs to compare with. Stops after n ids or after an id of
-- the set opts.ends (kept). With opts.logprobs (the slot reports them) also returns each
-- id's logprob.
function helpers.plain_generate(r, slot, prompt, n, opts)
  opts = opts or {}
  local out, logprobs, token = {}, {}, prompt[1]
  for pos = 0, #prompt + n - 2 do
    local h = r:step { slots = { slot }, positions = { pos }, tokens = { token } }
    if pos + 1 < #prompt then
      token = prompt[pos + 2]
    else
      token = h:tokens()[1]
      out[#out + 1] = token
      if opts.logprobs then logprobs[#out] = h:logprobs()[1].logprob end
      if opts.ends and opts.ends[token] then break end
    end
  end
  return out, logprobs
end

--- SplitMix64's finaliser (src/core/synth.h gptoss_mix64); Lua integers wrap mod 2^64 and
-- >> is logical, so this is the C function exactly.
function helpers.mix64(z)
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return z ~ (z >> 31)
end

--- The default sampler's draw u in [0, 1) for (seed, position) (sampler.h
-- gptoss_sample_uniform).
function helpers.sample_uniform(seed, position)
  local key = helpers.mix64(seed ~ 0x243F6A8885A308D3)
  return (helpers.mix64(key + (position + 1) * 0x9E3779B97F4A7C15) >> 11) * 2.0 ^ -53
end

--- n deterministic pseudo-random token ids below vocab, a different list for each seed.
function helpers.token_ids(seed, n, vocab)
  local out, x = {}, seed * 2654435761 % 4294967296
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = x % vocab
  end
  return out
end

--- For a describe of GPU specs (tag gpu): true, the describe marked pending (pending:
-- busted's, passed on), when this build sees no GPU; the describe then returns.
function helpers.no_gpu(pending)
  if #require("gptoss").devices() > 0 then return false end
  pending("no GPU visible to this build (gptoss.devices() is empty)")
  return true
end

--- A float's 32 bits rounded to bf16, nearest even (not for NaNs).
function helpers.bf16_bits(u)
  return (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
end

function helpers.read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

function helpers.write_file(path, s)
  local f = assert(io.open(path, "wb"))
  assert(f:write(s))
  assert(f:close())
end

--- A host tensor's raw bytes (through its save), signed zeros and NaNs included.
function helpers.tensor_bytes(t)
  local p = helpers.tmp()
  t:save(p)
  return helpers.read_file(p)
end

--- Raises unless fn raises an error containing every given substring (plain match).
function helpers.expect_error(fn, ...)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error, the call succeeded")
  err = tostring(err)
  for _, needle in ipairs({ ... }) do
    assert(err:find(needle, 1, true), ("error %q does not contain %q"):format(err, needle))
  end
  return err
end

--- A copy of model m, saved to a temporary file and loaded back, whose unembedding row of
-- `token` is NaN: a row sampled from it holds a NaN logit there. Needs gptoss.
function helpers.nan_row_model(m, token)
  local gptoss = require "gptoss"
  local path = helpers.tmp()
  m:save(path)
  local out = m.tensors.out
  local H = m.config.hidden_dim
  local data = helpers.read_file(path)
  local at, nan = out.offset + token * H * 4, string.pack("<f", 0 / 0):rep(H)
  helpers.write_file(path, data:sub(1, at) .. nan .. data:sub(at + #nan + 1))
  return gptoss.load(path)
end

--- The first GPU number this build does not see, and what a refusal of it says.
function helpers.absent_device()
  local n = #require("gptoss").devices()
  return n, n == 0 and "no GPU is available" or ("out of range 0..%d"):format(n - 1)
end

--- s as one word of a shell command line.
local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end
helpers.shell_quote = shell_quote

local tmpfiles, tmpdirs = {}, {}

--- A fresh temporary path, removed (with its ".tmp" sibling) by cleanup().
function helpers.tmp()
  local p = os.tmpname()
  tmpfiles[#tmpfiles + 1] = p
  return p
end

--- A fresh empty temporary directory, removed with everything in it by cleanup().
function helpers.tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir " .. shell_quote(p)))
  tmpdirs[#tmpdirs + 1] = p
  return p
end

function helpers.cleanup()
  for _, p in ipairs(tmpfiles) do
    os.remove(p)
    os.remove(p .. ".tmp")
  end
  for _, p in ipairs(tmpdirs) do os.execute("rm -rf " .. shell_quote(p)) end
  tmpfiles, tmpdirs = {}, {}
  collectgarbage()
end

--- The names in a directory, sorted.
function helpers.list_dir(dir)
  local names, p = {}, assert(io.popen("ls -A " .. shell_quote(dir)))
  for name in p:lines() do names[#names + 1] = name end
  p:close()
  table.sort(names)
  return names
end

--- A safetensors file read plainly (docs/checkpoints.md#safetensors), with dkjson rather
-- than the library's reader: {header = decoded JSON, data = the bytes after the header,
-- tensors = {name, dtype, shape, offsets, bytes} sorted by their offsets}.
function helpers.read_safetensors(path)
  local raw = helpers.read_file(path)
  local n = string.unpack("<I8", raw)
  local header = assert(require("dkjson").decode(raw:sub(9, 8 + n)))
  local data = raw:sub(9 + n)
  local tensors = {}
  for name, e in pairs(header) do
    if name ~= "__metadata__" then
      local b, e2 = e.data_offsets[1], e.data_offsets[2]
      tensors[#tensors + 1] = { name = name, dtype = e.dtype, shape = e.shape, offsets = { b, e2 },
        bytes = data:sub(b + 1, e2) }
    end
  end
  table.sort(tensors, function(x, y) return x.offsets[1] < y.offsets[1] end)
  return { header = header, data = data, tensors = tensors }
end

--- Writes a safetensors file of `tensors` ({name, dtype, shape, offsets}) in their order, the
-- JSON built here (metadata: a JSON object text, or nil), then `data`; header_text, when
-- given, replaces the JSON.
function helpers.write_safetensors(path, tensors, data, metadata, header_text)
  local parts = {}
  for _, t in ipairs(tensors) do
    parts[#parts + 1] = ('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'):format(t.name, t.dtype,
      table.concat(t.shape, ","), t.offsets[1], t.offsets[2])
  end
  if metadata then parts[#parts + 1] = '"__metadata__":' .. metadata end
  local text = header_text or ("{" .. table.concat(parts, ",") .. "}")
  helpers.write_file(path, string.pack("<I8", #text) .. text .. data)
end

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  local p = assert(io.popen("pwd"))
  local cwd = p:read("l")
  p:close()
  return cwd .. "/" .. path
end

-- the interpreter running the specs: the lowest negative index of arg
local function interpreter()
  if type(arg) ~= "table" or arg[-1] == nil then return nil end
  local i = -1
  while arg[i - 1] ~= nil do i = i - 1 end
  return arg[i]
end

--- The source tree and build folder the specs load gptoss from, as absolute paths, and
-- their interpreter: {root = ".../" (with its "/"), build = ".../build", lua = "lua5.4"};
-- a field is nil where the specs did not load gptoss from a tree.
helpers.TREE = (function()
  local module = package.searchpath("gptoss.getp", package.path)
  local core = package.searchpath("gptoss.core", package.cpath)
  return { root = module and absolute(module:match("^(.-)lua/gptoss/getp%.lua$")),
    build = core and absolute(core:match("^(.*)/gptoss/core%.so$")), lua = interpreter() }
end)()

-- Runs the shell command line `before ENV words...` (ENV: env's NAME=value assignments, for
-- the command alone), stdin (a string) its standard input when given: exit code, stdout,
-- stderr. what names the command in a failed assertion.
local function execute(before, env, words, stdin, what)
  local out, err = helpers.tmp(), helpers.tmp()
  local cmd = { before }
  for name, value in pairs(env or {}) do cmd[#cmd + 1] = name .. "=" .. shell_quote(value) end
  table.move(words, 1, #words, #cmd + 1, cmd)
  if stdin then
    local input = helpers.tmp()
    helpers.write_file(input, stdin)
    cmd[#cmd + 1] = "<" .. shell_quote(input)
  end
  local _, how, code = os.execute(("%s >%s 2>%s"):format(table.concat(cmd, " "), shell_quote(out), shell_quote(err)))
  assert(how == "exit", ("%s ended by %s %s"):format(what, tostring(how), tostring(code)))
  return code, helpers.read_file(out), helpers.read_file(err)
end

local function quoted(words)
  local q = {}
  for i, w in ipairs(words) do q[i] = shell_quote(w) end
  return q
end

--- Runs command (a list of words) in dir with env ({NAME = value}) set, GPTOSS_TOKENIZER
-- unset unless env sets it, and stdin (a string) as its input when given: exit code,
-- stdout, stderr.
function helpers.run_in(dir, env, command, stdin)
  return execute(("cd %s && env -u GPTOSS_TOKENIZER"):format(shell_quote(dir)), env, quoted(command), stdin,
    table.concat(command, " "))
end

-- helpers.TREE, or the test marked pending (pending: busted's) where the specs did not load
-- gptoss from a source tree and a build folder.
local function tree_or_pending(pending)
  local tree = helpers.TREE
  if not (tree.root and tree.build) then pending("gptoss was not loaded from a source tree and a build folder") end
  return tree
end

--- For use inside an `it`: runs the tree's ./gptoss with args in dir, with the specs'
-- interpreter and build folder unless env names others (GPTOSS_LUA, GPTOSS_BUILD), as
-- helpers.run_in; the test is marked pending (pending: busted's) without a tree.
function helpers.gptoss(pending, dir, args, env, stdin)
  local tree = tree_or_pending(pending)
  env = env or {}
  env.GPTOSS_LUA, env.GPTOSS_BUILD = env.GPTOSS_LUA or tree.lua, env.GPTOSS_BUILD or tree.build
  return helpers.run_in(dir, env, { tree.root .. "gptoss", table.unpack(args) }, stdin)
end

--- For use inside an `it`: the shell command line that runs the tree's ./gptoss with args
-- as helpers.gptoss does (GPTOSS_TOKENIZER unset), for a caller that runs it its own way (in the background, in a
-- terminal); the test is marked pending without a tree.
function helpers.gptoss_line(pending, args)
  local tree = tree_or_pending(pending)
  return ("env -u GPTOSS_TOKENIZER GPTOSS_LUA=%s GPTOSS_BUILD=%s %s"):format(shell_quote(tree.lua), shell_quote(tree.build),
    table.concat(quoted({ tree.root .. "gptoss", table.unpack(args) }), " "))
end

-- The interpreter running the specs, the shell words that give a child process their
-- LUA_PATH/LUA_CPATH, and the repository's root; or nil and why.
local function child_lua()
  local lua = interpreter()
  if not lua then return nil, "arg[-1] (the interpreter) is not set" end
  local module = package.searchpath("gptoss.getp", package.path)
  local root = module and module:match("^(.-)lua/gptoss/getp%.lua$")
  if not root then return nil, "gptoss.getp was not found as <root>/lua/gptoss/getp.lua" end
  return lua, ("LUA_PATH=%s LUA_CPATH=%s"):format(shell_quote(package.path), shell_quote(package.cpath)), root
end

--- A runner of a script of the repository as a child process, with the interpreter
-- running the specs and their LUA_PATH/LUA_CPATH:
-- run(args [, env [, stdin]]) -> exit code, stdout, stderr, env ({NAME = value}) set for the
-- child alone, stdin a string it reads as its standard input. Returns nil and why when it cannot be run
-- (`SCRIPT --help` must exit 0), for the caller to mark its test pending.
function helpers.script_runner(script)
  local lua, paths, root = child_lua()
  if not lua then return nil, paths end
  local prefix = ("%s %s %s"):format(paths, shell_quote(lua), shell_quote((root == "" and "./" or root) .. script))
  if not os.execute(("%s --help >/dev/null 2>&1"):format(prefix)) then
    return nil, ("'%s %s --help' does not run"):format(lua, script)
  end
  return function(args, env, stdin)
    local words = quoted(args)
    table.insert(words, 1, prefix)
    return execute("", env, words, stdin, script)
  end
end

--- A named pipe at a fresh temporary path (removed by cleanup()), or at dir/name: what every
-- reader must refuse rather than wait on for a writer.
function helpers.fifo(dir, name)
  local p = dir and (dir .. "/" .. name) or helpers.tmp()
  os.remove(p)
  assert(os.execute("mkfifo " .. shell_quote(p)))
  return p
end

--- Raises unless `code` (a Lua chunk) raises an error containing every given substring
-- (plain match) within a second. It runs in a child interpreter (the specs', with their
-- module paths) that timeout(1) ends after 10 seconds: code that waits forever when it
-- regresses (a reader opening a named pipe) then fails the spec instead of hanging the suite.
-- env: words put before the command (assignments, `ulimit -v N;`), or nil. Returns the error.
function helpers.expect_error_soon(code, env, ...)
  local lua, paths = child_lua()
  assert(lua, paths)
  local chunk, out = helpers.tmp(), helpers.tmp()
  helpers.write_file(chunk, ("local clock = require('gptoss').clock\nlocal t = clock()\n"
    .. "local ok, err = pcall(function() %s end)\nio.stderr:write(('%%.3f '):format(clock() - t), tostring(err))\n"
    .. "os.exit(ok and 0 or 1)\n"):format(code))
  local _, how, status = os.execute(("%s %s timeout 10 %s %s 2>%s"):format(env or "", paths, shell_quote(lua),
    shell_quote(chunk), shell_quote(out)))
  local seconds, err = helpers.read_file(out):match("^(%S+) (.*)$")
  assert(how == "exit" and status ~= 124, ("%s did not end in 10 seconds (%s %s)"):format(code, how, status))
  assert(status == 1 and seconds, ("%s: expected an error, the child ended with %s: %s"):format(code, status,
    helpers.read_file(out)))
  assert(tonumber(seconds) < 1, ("%s took %s s to raise %s"):format(code, seconds, err))
  for _, needle in ipairs({ ... }) do
    assert(err:find(needle, 1, true), ("error %q does not contain %q"):format(err, needle))
  end
  return err
end

--- expect_error_soon's env that holds the child to 8 GiB, so that a regression allocating
-- for a size read from a file fails there instead of taking the machine's memory: its address
-- space limited, or under AddressSanitizer (whose shadow needs more address space) each
-- allocation, a larger one failing as malloc fails.
helpers.SANITIZED = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true) ~= nil -- make test-sanitized
helpers.LIMIT_MEMORY = helpers.SANITIZED
  and ("ASAN_OPTIONS=%s:allocator_may_return_null=1:max_allocation_size_mb=8192")
    :format(os.getenv("ASAN_OPTIONS") or "")
  or "ulimit -v 8388608;"

--- The exported tokenizer the specs read: $GPTOSS_TOKENIZER (make test sets it), else
-- build/tokenizer.bin.
helpers.TOKENIZER = os.getenv("GPTOSS_TOKENIZER") or "build/tokenizer.bin"

--- For use inside an `it` that needs the tokenizer: helpers.TOKENIZER, or the test marked
-- pending when that file is missing. pending: busted's, passed on by the spec.
function helpers.need_tokenizer(pending)
  local f = io.open(helpers.TOKENIZER, "rb")
  if not f then pending("needs the tokenizer: make tokenizer") end
  f:close()
  return helpers.TOKENIZER
end

function helpers.tokenizer(pending) --- helpers.TOKENIZER's tokenizer, loaded once (pending: need_tokenizer's)
  helpers.loaded_tokenizer = helpers.loaded_tokenizer or require("gptoss").tokenizer(helpers.need_tokenizer(pending))
  return helpers.loaded_tokenizer
end

local runners = {} -- script -> {run =, why =}, made once

--- For use inside an `it`: the runner of a script of the repository (script_runner's),
-- or the test marked pending when it cannot be run. pending: busted's, which only the
-- spec sees, passed on.
function helpers.runner(script, pending)
  local r = runners[script]
  if not r then
    local run, why = helpers.script_runner(script)
    r = { run = run, why = why }
    runners[script] = r
  end
  if not r.run then pending("cannot run the command line: " .. r.why) end
  return r.run
end

--- Runs each case {args, text} through a script's runner: exit status `status`, nothing on
-- stdout, and on stderr text (plain) and, when given, usage too ("Usage: NAME.lua").
function helpers.expect_exits(run, status, cases, usage)
  local check = require "luassert" -- busted's assert, which only the specs see as a global
  for _, case in ipairs(cases) do
    local code, out, err = run(case[1])
    check.are.equal(status, code, table.concat(case[1], " "))
    check.are.equal("", out)
    if usage then check.truthy(err:find(usage, 1, true), err) end
    check.truthy(err:find(case[2], 1, true), err)
  end
end

return helpers
