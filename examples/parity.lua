#!/usr/bin/env lua5.4
-- Runs the same tokens through two replicas of one model, stage by stage (gptoss.parity),
-- and prints each stage's largest error, the first stage over tolerance and the routing
-- and bf16 rounding flips (docs/parity.md#examplesparitylua).
--   gptoss parity MODEL [--seed-weights N] [--a SPEC] [--b SPEC]
--          (--tokens "1,2,3" | --prompt TEXT [--tokenizer PATH]) [--atol X] [--rtol X] [--layers] [--json]
-- MODEL as every command names it (gptoss.naming): a course .bin, a checkpoint directory or
-- a synthetic shape.
-- SPEC is DEVICE:WEIGHTS[/KV]: DEVICE "cpu" or a GPU number (from 0), WEIGHTS a weight
-- format (gptoss.weight_format_names), KV a KV format (gptoss.kv_formats), the same as
-- WEIGHTS when left out: cpu:fp32, cpu:bf16/fp32, 0:mxfp4/bf16. a is the replica checked (default cpu:bf16/fp32), b the reference (default
-- cpu:fp32, the golden); the tolerance is the numeric mode's default (lua/gptoss/parity.lua)
-- unless --atol/--rtol replace it.
-- Exit status: 0 every stage within tolerance, 1 not, 2 usage or bad input.
local argparse = require "argparse"
local gptoss = require "gptoss"
local parity = require "gptoss.parity"
local cmdline = require "gptoss.cmdline"
local naming = require "gptoss.naming"
local script = require "gptoss.script"

local BAD_INPUT = 2 -- the exit status of usage errors and bad input

local function replica_spec(s)
  local device, weights, kv = s:match("^([^:]+):(%w+)/?(%w*)$")
  if kv == "" then kv = weights end
  local weight_names, kv_names = gptoss.weight_format_names(), gptoss.kv_formats()
  local function listed(names, name)
    for _, n in ipairs(names) do if n == name then return true end end
    return false
  end
  local gpu = device and math.tointeger(tonumber(device))
  if not device or not listed(weight_names, weights) or not listed(kv_names, kv)
      or (device ~= "cpu" and not (gpu and gpu >= 0)) then
    return nil, ("'%s' is not a replica DEVICE:WEIGHTS[/KV] (DEVICE cpu or a GPU number from 0, WEIGHTS %s, KV %s)")
      :format(s, table.concat(weight_names, ", "), table.concat(kv_names, ", "))
  end
  return { device = gpu or "cpu", weights = weights, kv = kv, text = s }
end

local function token_list(s)
  local ids = {}
  for item in (s .. ","):gmatch("([^,]*),") do
    local id = math.tointeger(tonumber(item:match("^%s*(.-)%s*$")))
    if id == nil or id < 0 then return nil, ("'%s' is not a comma-separated list of token ids"):format(s) end
    ids[#ids + 1] = id
  end
  return ids
end

local parser = argparse(script.name, "Compares two replicas of a model stage by stage on the same tokens.")
naming.add_model(parser, { old_seed = true })
parser:option("--a", "The replica checked, DEVICE:WEIGHTS[/KV].", "cpu:bf16/fp32")
  :convert(script.named("--a", replica_spec))
parser:option("--b", "The reference replica, DEVICE:WEIGHTS[/KV].", "cpu:fp32")
  :convert(script.named("--b", replica_spec))
parser:option("--tokens", "Token ids, comma-separated."):convert(script.named("--tokens", token_list))
parser:option("--prompt", "Text to encode with the tokenizer instead of --tokens.")
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
parser:option("--atol", "Absolute tolerance of every stage (replaces the mode's).")
  :convert(script.named("--atol", cmdline.non_negative))
parser:option("--rtol", "Tolerance relative to each stage's largest reference value (replaces the mode's).")
  :convert(script.named("--rtol", cmdline.non_negative))
parser:flag("--layers", "Print one line per layer and stage as well.")
parser:flag("--json", "Print the report as one JSON line instead of the table.")

local args = script.parse(parser, BAD_INPUT)
if (args.tokens == nil) == (args.prompt == nil) then
  script.usage_error(parser, "give --tokens or --prompt, one of them", BAD_INPUT)
end
local tokens = args.tokens

local result
script.run(function()
  local model = naming.open(args.model, args.seed_weights)
  if args.prompt then
    local tok = gptoss.tokenizer(args.tokenizer, { vocab_size = model.config.vocab_size })
    tokens = tok:encode(args.prompt)
    if #tokens == 0 then error("--prompt: the prompt encodes to no tokens", 0) end
  end
  local function replica(spec)
    return model:replica { device = spec.device, slots = 1, ctx = #tokens, weights = spec.weights, kv = spec.kv }
  end
  local a, b = replica(args.a), replica(args.b)
  result = parity.compare(a, b, { tokens = tokens, tolerance = { abs = args.atol, rel = args.rtol },
    print = not args.json, layers = args.layers })
end, BAD_INPUT)

if args.json then
  print(require("dkjson").encode(result))
end
os.exit(result.ok and 0 or 1, true)
