--- gptoss: gpt-oss inference from Lua.
-- The C module gptoss.core holds the model loader, the synthetic-weight
-- recipe, host tensors and the engines; this file gives them their Lua shape.
local core = require "gptoss.core"
local util = require "gptoss.util"

local gptoss = {
  VERSION = "0.1.0",
  platform = core.platform, -- what core.so was built for: "cpu", "nvidia" or "amd"
  -- the seed of synthetic weights when none is given: gptoss.synthetic's default, and
  -- the examples' (README, demo, run.lua, parity, checker)
  DEFAULT_SEED = 7,
  -- the named shapes of gptoss.config and gptoss.synthetic (src/core/config.c's table), in
  -- the order messages list them
  SHAPES = { "7m", "20b", "20b-2l", "120b" },
}

-- The folder this file was loaded from, "/"-terminated: in a rock tree (luarocks --local,
-- --tree or system-wide) its share/lua/5.4/gptoss/, which holds what the rock installs
-- beside the modules (tokenizer.bin, the examples); in a source tree lua/gptoss/.
local MODULE_DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

-- f(...)'s one result; its error raised at the caller of the function that called this
-- (a core error then carries the user's position, never this file's). Call it as
-- `return (from_core(...))`: the parentheses keep it from being a tail call, which would
-- shift the level.
local function from_core(f, ...)
  local ok, result = pcall(f, ...)
  if not ok then error(result, 3) end
  return result
end

--- Loads a model, mapped read-only and validated: a course .bin file, or a checkpoint
-- directory in the Hugging Face or OpenAI original/ layout (docs/checkpoints.md).
function gptoss.load(path)
  if type(path) ~= "string" then
    error(("load: path must be a string (got %s)"):format(type(path)), 2)
  end
  return (from_core(core.load, path))
end

local function named_config(name, fn)
  local config = core.named_config(name)
  if not config then
    error(("%s: unknown model shape '%s' (known: %s)"):format(fn, name, table.concat(gptoss.SHAPES, ", ")), 3)
  end
  return config
end

--- Returns the config table of a named shape (gptoss.SHAPES: "7m", "20b", "20b-2l", "120b").
function gptoss.config(name)
  if type(name) ~= "string" then
    error(("config: expected a shape name (got %s)"):format(type(name)), 2)
  end
  return named_config(name, "config")
end

--- A synthetic model: a named shape or a config table (fields not given
-- take the "7m" values), with weights from the seeded recipe.
-- opts.seed: integer, default gptoss.DEFAULT_SEED.
function gptoss.synthetic(shape, opts)
  opts = util.options("synthetic", opts, { "seed" }, 2)
  local seed = opts.seed or gptoss.DEFAULT_SEED
  if math.type(seed) ~= "integer" then
    error(("synthetic: seed must be an integer (got %s)"):format(tostring(seed)), 2)
  end
  local config
  if type(shape) == "string" then
    config = named_config(shape, "synthetic")
  elseif type(shape) == "table" then
    config = named_config("7m", "synthetic")
    for k, v in pairs(shape) do config[k] = v end
  else
    error(("synthetic: expected a shape name or a config table (got %s)"):format(type(shape)), 2)
  end
  return (from_core(core.synthetic, config, seed))
end

--- GPUs visible to this build: { {id=0, name=..., memory=..., warp=..., arch=...}, ... }. GPUs
-- are numbered from 0 as nvidia-smi, CUDA_VISIBLE_DEVICES and HIP count them, so id is the index.
function gptoss.devices()
  return core.devices()
end

--- The entry of gptoss.devices() for GPU number id, or nil when this build does not see it.
function gptoss.device(id)
  for _, d in ipairs(gptoss.devices()) do
    if d.id == id then return d end
  end
end

--- The devices used when none are given (getp, run.lua): every GPU's number, else {"cpu"}.
function gptoss.default_devices()
  local list = {}
  for i, d in ipairs(gptoss.devices()) do list[i] = d.id end
  if #list == 0 then list = { "cpu" } end
  return list
end

local TREE_TOKENIZER = "build/tokenizer.bin"

-- a regular file is there (asked of core.regular_file: io.open would wait for a writer on a named pipe)
local function readable(path)
  return core.regular_file(path) == true
end

--- Where this copy of gptoss keeps a file of the project ("tokenizer.bin", "README.md",
-- "examples/demo.lua"), or nil when it has none. In a rock tree (luarocks --local, --tree or
-- system-wide) the Makefile's install puts them beside the modules (share/lua/5.4/gptoss/NAME);
-- in a source tree NAME is under its root (lua/gptoss/../../NAME), where tokenizer.bin is not
-- (make writes build/tokenizer.bin).
function gptoss.project_file(name)
  for _, path in ipairs { MODULE_DIR .. name, MODULE_DIR .. "../../" .. name } do
    if readable(path) then return path end
  end
  return nil
end

--- Where tokenizer.bin is when no path is given: $GPTOSS_TOKENIZER when set, else
-- build/tokenizer.bin under the current directory (a source tree's, written by make), else
-- the copy installed with the rock beside the modules (gptoss.project_file).
-- Returns the path, or nil and a message naming the places looked at.
function gptoss.tokenizer_path()
  local env = os.getenv("GPTOSS_TOKENIZER")
  if env and env ~= "" then return env end
  if core.regular_file(TREE_TOKENIZER) ~= nil then return TREE_TOKENIZER end -- a pipe there: the reader says so
  local installed = gptoss.project_file("tokenizer.bin")
  if installed then return installed end
  return nil, ("no tokenizer.bin found: $GPTOSS_TOKENIZER is not set, %s is not in the current directory "
    .. "(make tokenizer writes it) and none is installed beside the gptoss modules"):format(TREE_TOKENIZER)
end

--- The course's tokenizer.bin: gptoss.tokenizer([path [, {vocab_size=N}]]), path
-- gptoss.tokenizer_path()'s when nil. encode/decode exactly as the course code; see
-- docs/api.md#tokenizer.
function gptoss.tokenizer(path, opts)
  if path == nil then
    local why
    path, why = gptoss.tokenizer_path()
    if not path then error("tokenizer: " .. why, 2) end
  elseif type(path) ~= "string" then
    error(("tokenizer: path must be a string (got %s)"):format(type(path)), 2)
  end
  return (from_core(core.tokenizer, path, util.options("tokenizer", opts, nil, 2)))
end

--- A sampler over logits rows: gptoss.sampler{temperature=, top_k=, top_p=,
-- min_p=, seed=, logprobs=} or gptoss.sampler{mode="course", ...}; see
-- docs/api.md#sampling for the exact rules.
function gptoss.sampler(opts)
  return (from_core(core.sampler, util.options("sampler", opts, nil, 2)))
end

--- Structured output (docs/structured.md): a grammar from a JSON schema (a table, or its JSON
-- text; {whitespace = N} bounds the whitespace allowed), a regex or an EBNF text, whose
-- g:matcher(tokenizer [, {end_ids = {...}}]) says which tokens may come next.
gptoss.grammar = {
  json_schema = core.grammar_json_schema,
  regex = core.grammar_regex,
  ebnf = core.grammar_ebnf,
}

--- The option names a sampler table may hold (gptoss.sampler's, r:sampling's), in order:
-- a fresh list of the C binding's one list, which getp and speculative derive theirs from.
gptoss.sample_options = core.sample_options

--- Seconds on a monotonic wall clock (for timing steps).
gptoss.clock = core.clock
--- Whole milliseconds since the epoch, truncated as the course's now_ms
-- (docs/course.md#control-flow-and-timing): what the course's elapsed times and TPS are
-- computed from.
gptoss.realtime_ms = core.realtime_ms
--- Whether a file descriptor (0, 1, 2, ...) is a terminal.
gptoss.isatty = core.isatty
--- Lua's garbage collected, then the C allocator's free memory given back to the system where
-- it can (glibc): true then. What a long process calls once idle (gptoss serve does).
function gptoss.trim_memory()
  collectgarbage("collect")
  return core.trim_memory()
end
--- A thread that writes bytes to sockets for the Lua thread ({timeout = seconds a client may
-- read nothing, max_queued = bytes that may wait for it}): s:attach(fd) -> handle,
-- s:send(handle, text), s:flush(), s:pending(handle), s:detach(handle), s:close()
-- (docs/api.md#sockets-written-from-a-thread).
gptoss.sender = core.sender
--- Whether path is a regular file, looked at without opening it (io.open waits for a writer
-- on a named pipe): true; false and why ("'p' is a named pipe, not a regular file"); nil and
-- the system's reason when nothing can be looked at there.
gptoss.regular_file = core.regular_file
--- Ctrl-C for a loop that stops what it does rather than the program (docs/api.md#other-
-- functions): catch_interrupts(true) makes SIGINT raise a flag, which interrupted() reads and
-- clears; catch_interrupts(false) gives SIGINT its action back. wait_readable(fd [, seconds])
-- waits for input on fd: true, or false when the seconds pass or a caught Ctrl-C comes first.
gptoss.catch_interrupts = core.catch_interrupts
gptoss.interrupted = core.interrupted
gptoss.wait_readable = core.wait_readable
gptoss.copy_bandwidth = core.copy_bandwidth
--- Bytes free on GPU id now and bytes in all: gptoss.device_memory(0) --> free, total.
gptoss.device_memory = core.device_memory
--- The stages a trace records, in forward order: { {name = "embedding", per_layer = false}, ... }.
gptoss.trace_stages = core.trace_stages
--- x as a float rounded to the nearest bf16, ties to even: how the bf16 modes round.
gptoss.bf16_round = core.bf16_round
--- How a replica may hold its weights (the weights option), in the core's table order:
-- { {name = "fp32", bits = 32, block = 1, exact_against_bf16 = false, bf16_arithmetic = false,
-- summary = ...}, ... }.
gptoss.weight_formats = core.weight_formats
--- The weight formats' names, in the same order: what the weights option takes.
function gptoss.weight_format_names()
  local names = {}
  for i, f in ipairs(core.weight_formats()) do names[i] = f.name end
  return names
end

--- How a replica may hold its KV cache (the kv option): {"fp32", "bf16"}.
gptoss.kv_formats = core.kv_formats

--- Host tensors (f32, i32), 1-based indexing.
gptoss.tensor = {
  --- zeros of a shape: tensor.zeros({2, 3}, "f32")
  zeros = function(shape, dtype) return (from_core(core.tensor, dtype or "f32", shape)) end,
  --- from (nested) Lua tables: tensor.from({{1, 2}, {3, 4}}, "f32")
  from = function(values, dtype)
    if type(values) ~= "table" then
      error(("tensor.from: expected a table (got %s)"):format(type(values)), 2)
    end
    local flat, shape = util.flatten_shaped(values, "tensor", 2, core.max_dims)
    return (from_core(core.tensor, dtype or "f32", shape, flat))
  end,
  --- raw little-endian values; shape defaults to 1-D
  load = function(path, dtype, shape) return (from_core(core.tensor_load, path, dtype or "f32", shape)) end,
}

return gptoss
