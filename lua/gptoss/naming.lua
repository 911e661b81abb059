--- gptoss.naming: how every command names a model and a device (docs/building.md#models-and-devices),
-- added to each command's argparse parser from here so that they cannot drift apart.
--
-- MODEL, an argument: a course .bin file, a checkpoint directory, or a synthetic shape of
-- gptoss.SHAPES (7m, 20b, 20b-2l, 120b), whose weights --seed-weights seeds. A shape's name is
-- always the shape, wherever the command runs, so that a command reads the same in any
-- directory (a file of that name is ./7m). Any other name is a path.
-- --device cpu|N: the device of a command's one replica, N a GPU number from 1; --devices
-- cpu|1,2: one replica each, where a command runs several.
--
-- The spellings these replace (--model NAME, --synthetic NAME, synthetic:NAME, and --seed
-- for the weights' seed) are refused with a message giving the new one, rather than taken
-- for something else.
local gptoss = require "gptoss"

local naming = {}

local SHAPES = table.concat(gptoss.SHAPES, ", ")
local IS_SHAPE = {}
for _, name in ipairs(gptoss.SHAPES) do IS_SHAPE[name] = true end

naming.MODEL_HELP = ("A course .bin file, a checkpoint directory or a synthetic shape (%s)."):format(SHAPES)

-- An argparse converter that refuses any value with a message; fmt gets the value twice.
local function refusal(fmt)
  return function(s) return nil, fmt:format(s, s) end
end

-- MODEL's converter: the name, unless it is the old synthetic:NAME
local function model_name(s)
  local shape = s:match("^synthetic:(.*)$")
  if shape then
    return nil, ("'%s' is now written %s: a synthetic shape is named as the model"):format(s, shape)
  end
  return s
end

local function seed(s)
  local v = math.tointeger(tonumber(s))
  if v == nil then return nil, ("--seed-weights: '%s' is not an integer"):format(s) end
  return v
end

--- Adds MODEL and --seed-weights to argparse parser p, and the refusals of the old spellings.
-- opts.default: the model when none is given (nil: MODEL is required); opts.seed:
-- --seed-weights' default (gptoss.DEFAULT_SEED); opts.old_seed: the command's --seed
-- seeded the weights before, so it is refused rather than unknown.
function naming.add_model(p, opts)
  opts = opts or {}
  local model = p:argument("model", naming.MODEL_HELP):convert(model_name)
  -- argparse fills a positional's default in only when it takes one value (not args "?")
  if opts.default then model:default(opts.default) end
  p:option("--seed-weights", "Seed of a synthetic shape's weights.", tostring(opts.seed or gptoss.DEFAULT_SEED))
    :argname("<int>"):convert(seed)
  p:option("--model"):hidden(true)
    :convert(refusal("--model %s is now written %s: the model is the command's argument"))
  p:option("--synthetic"):hidden(true)
    :convert(refusal("--synthetic %s is now written %s: a synthetic shape is named as the model"))
  if opts.old_seed then
    p:option("--seed"):hidden(true):convert(refusal("--seed %s is now written --seed-weights %s"))
  end
end

--- "cpu" or a GPU number from 1 (an argparse converter for --device).
function naming.device(s)
  if s == "cpu" then return s end
  local id = math.tointeger(tonumber(s))
  if id == nil or id < 1 then return nil, ("--device: '%s' is not \"cpu\" or a GPU number from 1"):format(s) end
  return id
end

--- "cpu" -> {"cpu"}; "1,2" -> {1, 2} (GPU numbers from 1, each once); else nil, message
-- (an argparse converter for --devices).
function naming.devices(s)
  if s == "cpu" then return { "cpu" } end
  local list, seen = {}, {}
  for item in (s .. ","):gmatch("([^,]*),") do
    local id = math.tointeger(tonumber(item:match("^%s*(.-)%s*$")))
    if id == nil or id < 1 or seen[id] then
      return nil, ("--devices: '%s' is not \"cpu\" or a list of distinct GPU numbers from 1 (\"1,2\")"):format(s)
    end
    seen[id] = true
    list[#list + 1] = id
  end
  return list
end

--- Adds --device to p; default: "cpu", a GPU number, or nil (the command chooses, and says
-- so in what: the help's words for its default).
function naming.add_device(p, default, what)
  local help = "\"cpu\" or a GPU number from 1" .. (what and (" (default: %s)."):format(what) or ".")
  return p:option("--device", help, default and tostring(default)):argname("<cpu|N>"):convert(naming.device)
end

--- Adds --devices to p (default: every GPU, else the CPU, unless what says otherwise).
function naming.add_devices(p, what)
  return p:option("--devices", ("\"cpu\" or GPU numbers \"1,2\", one replica each (default: %s).")
    :format(what or "every GPU, else cpu")):argname("<list>"):convert(naming.devices)
end

--- The model `name` names (MODEL): a synthetic shape with weights of `seed`, else what
-- gptoss.load opens there. A name without "/" or "." that is neither is one message. Whether
-- something is there is asked of gptoss.regular_file: io.open would wait on a named pipe.
function naming.open(name, seed_weights)
  if IS_SHAPE[name] then return gptoss.synthetic(name, { seed = seed_weights }) end
  if gptoss.regular_file(name) == nil and not name:find("[/.]") then
    error(("'%s' is neither a file, a directory nor a synthetic shape (%s)"):format(name, SHAPES), 0)
  end
  return gptoss.load(name)
end

--- The positions of a slot that a command gives model's conversations: ctx when given and
-- within the model's max_seq_len (the positions its RoPE is made for), else the model's, at
-- most 8192 (a slot's KV cache grows with it). nil and a message saying so for a ctx past
-- the model's; what names the option in it ("--ctx").
function naming.context(model, ctx, what)
  local limit = model.config.seq_len
  if ctx and ctx > limit then
    return nil, ("%s %d is past the model's context: %d positions (its max_seq_len)"):format(what, ctx, limit)
  end
  return ctx or math.min(limit, 8192)
end

--- How --json and messages name the model: "synthetic 7m", else the path.
function naming.describe(name)
  return IS_SHAPE[name] and "synthetic " .. name or name
end

--- The options the generation examples (demo.lua, speculative.lua, beam_search.lua,
-- best_of_n.lua) share: MODEL (default 7m), --seed-weights, --device (default cpu),
-- --weights, --prompt (default opts.prompt) and --tokenizer; opts.old_seed as add_model's.
function naming.add_generation(p, opts)
  naming.add_model(p, { default = "7m", old_seed = opts.old_seed })
  naming.add_device(p, "cpu")
  p:option("--weights", "Weight format (default: fp32 on the CPU, the replica's choice on a GPU).")
    :choices(gptoss.weight_format_names())
  p:option("--prompt", "Prompt text.", opts.prompt)
  p:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
end

--- The model, the tokenizer, the base of replica options ({device =, weights =}) and the
-- prompt's ids that naming.add_generation's values name. A prompt of no ids is an error.
function naming.open_generation(a)
  local model = naming.open(a.model, a.seed_weights)
  local tok = gptoss.tokenizer(a.tokenizer, { vocab_size = model.config.vocab_size })
  local prompt = tok:encode(a.prompt)
  if #prompt == 0 then error("the prompt encodes to no tokens", 0) end
  return model, tok, { device = a.device, weights = a.weights }, prompt
end

return naming
