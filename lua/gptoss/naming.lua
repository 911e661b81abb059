--- gptoss.naming: how every command names a model (README.md#the-gptoss-command),
-- added to each command's argparse parser from here so that they cannot drift apart; the
-- device and the other shared options are gptoss.flags'.
--
-- MODEL, an argument: a course .bin file, a checkpoint directory, or a synthetic shape of
-- gptoss.SHAPES (7m, 20b, 20b-2l, 120b), whose weights --seed-weights seeds. A shape's name is
-- always the shape, wherever the command runs, so that a command reads the same in any
-- directory (a file of that name is ./7m). Any other name is a path, or, where nothing is
-- there, a Hugging Face id (openai/gpt-oss-20b[@REVISION]) found in the local cache (gptoss.hub).
-- The spellings these replace (--model NAME, --synthetic NAME, synthetic:NAME, and --seed
-- for the weights' seed) are refused with a message giving the new one, rather than taken
-- for something else.
local gptoss = require "gptoss"
local hub = require "gptoss.hub"
local flags = require "gptoss.flags"

local naming = {}

local SHAPES = table.concat(gptoss.SHAPES, ", ")
local IS_SHAPE = {}
for _, name in ipairs(gptoss.SHAPES) do IS_SHAPE[name] = true end

naming.MODEL_HELP = ("A course .bin file, a checkpoint directory, a synthetic shape (%s) or a Hugging Face id "
  .. "(openai/gpt-oss-20b) in the local cache."):format(SHAPES)

-- An argparse converter that refuses any value with a message; fmt gets the value twice
-- (these spellings became MODEL, which flags.retire's "is now written NEW VALUE" cannot say).
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
-- opts.default: the model when none is given (nil: MODEL is required); opts.old_seed: the
-- command's --seed seeded the weights before, and it has no sampler for --seed to seed, so
-- --seed is refused with the new spelling rather than unknown. --seed-weights' default is
-- gptoss.DEFAULT_SEED in every command.
function naming.add_model(p, opts)
  opts = opts or {}
  local model = p:argument("model", naming.MODEL_HELP):convert(model_name)
  -- argparse fills a positional's default in only when it takes one value (not args "?")
  if opts.default then model:default(opts.default) end
  p:option("--seed-weights", "Seed of a synthetic shape's weights.", tostring(gptoss.DEFAULT_SEED))
    :argname("<int>"):convert(seed)
  p:option("--model"):hidden(true)
    :convert(refusal("--model %s is now written %s: the model is the command's argument"))
  p:option("--synthetic"):hidden(true)
    :convert(refusal("--synthetic %s is now written %s: a synthetic shape is named as the model"))
  if opts.old_seed then
    flags.retire(p, "--seed", "--seed-weights")
  end
end

--- The model `name` names (MODEL): a synthetic shape with weights of `seed`, else what
-- gptoss.load opens there, else, where nothing is there, the Hugging Face cache's model of
-- that id (hub.load says how to get one it lacks). A name without "/" or "." that is none
-- of these is one message. Whether something is there is asked of gptoss.regular_file:
-- io.open would wait on a named pipe.
function naming.open(name, seed_weights)
  if IS_SHAPE[name] then return gptoss.synthetic(name, { seed = seed_weights }) end
  if gptoss.regular_file(name) == nil then
    if hub.parse(name) then return hub.load(name) end
    if not name:find("[/.]") then
      error(("'%s' is neither a file, a directory nor a synthetic shape (%s)"):format(name, SHAPES), 0)
    end
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
-- best_of_n.lua) share: MODEL (default 7m), --seed-weights, --device (one replica),
-- --weights, --prompt (default opts.prompt) and --tokenizer.
function naming.add_generation(p, opts)
  naming.add_model(p, { default = "7m" })
  flags.add_device(p)
  p:option("--weights", "Weight format (default: fp32 on the CPU, the replica's choice on a GPU).")
    :choices(gptoss.weight_format_names())
  p:option("--prompt", "Prompt text.", opts.prompt)
  p:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
end

--- The model, the tokenizer, the base of replica options ({device =, weights =}, the device
-- flags.one_device's) and the prompt's ids that naming.add_generation's values name. A prompt
-- of no ids is an error.
function naming.open_generation(a)
  local model = naming.open(a.model, a.seed_weights)
  local tok = gptoss.tokenizer(a.tokenizer, { vocab_size = model.config.vocab_size })
  local prompt = tok:encode(a.prompt)
  if #prompt == 0 then error("the prompt encodes to no tokens", 0) end
  return model, tok, { device = flags.one_device(a.device), weights = a.weights }, prompt
end

return naming
