#!/usr/bin/env lua5.4
-- Runs the same tokens through two replicas of one model, stage by stage (gptoss.parity),
-- and prints each stage's largest error, the first stage over tolerance and the routing
-- and bf16 rounding flips.
--   lua5.4 examples/parity.lua (MODEL.bin | --synthetic NAME [--seed N]) [--a SPEC] [--b SPEC]
--          (--tokens "1,2,3" | --prompt TEXT [--tokenizer PATH]) [--atol X] [--rtol X] [--layers] [--json]
-- SPEC is DEVICE:WEIGHTS[/KV]: DEVICE "cpu" or a GPU number (1-based), WEIGHTS and KV
-- "fp32" or "bf16", KV the same as WEIGHTS when left out: cpu:fp32, cpu:bf16/fp32,
-- 1:bf16/bf16. a is the replica checked, b the reference; the tolerance is the numeric
-- mode's default (lua/gptoss/parity.lua) unless --atol/--rtol replace it.
-- Exit status: 0 every stage within tolerance, 1 not, 2 usage or bad input.
local argparse = require "argparse"
local gptoss = require "gptoss"
local parity = require "gptoss.parity"
local cli = require "gptoss.cli"

local non_negative = cli.non_negative
local function fail_usage(msg) cli.exit_with(2, msg) end

local function replica_spec(s)
  local device, weights, kv = s:match("^([^:]+):(%w+)/?(%w*)$")
  if kv == "" then kv = weights end
  local ok_mode = { fp32 = true, bf16 = true }
  local gpu = device and math.tointeger(tonumber(device))
  if not device or not ok_mode[weights] or not ok_mode[kv] or (device ~= "cpu" and not (gpu and gpu >= 1)) then
    return nil, ("'%s' is not a replica DEVICE:WEIGHTS[/KV] (DEVICE cpu or a GPU number from 1, "
      .. "WEIGHTS and KV fp32 or bf16)"):format(s)
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

local parser = argparse("parity.lua", "Compares two replicas of a model stage by stage on the same tokens.")
parser:argument("model", "A course .bin model file (or use --synthetic)."):args("?")
parser:option("--synthetic", "A synthetic model of a named shape (7m, 20b, 20b-2l, 120b).")
parser:option("--seed", "Seed of the synthetic weights.", "0"):convert(cli.integer("--seed"))
parser:option("--a", "The replica checked, DEVICE:WEIGHTS[/KV].", "cpu:bf16"):convert(replica_spec)
parser:option("--b", "The reference replica, DEVICE:WEIGHTS[/KV].", "cpu:fp32"):convert(replica_spec)
parser:option("--tokens", "Token ids, comma-separated.")
parser:option("--prompt", "Text to encode with the tokenizer instead of --tokens.")
parser:option("--tokenizer", "tokenizer.bin path.", os.getenv("GPTOSS_TOKENIZER") or "build/tokenizer.bin")
parser:option("--atol", "Absolute tolerance of every stage (replaces the mode's).")
  :convert(non_negative)
parser:option("--rtol", "Tolerance relative to each stage's largest reference value (replaces the mode's).")
  :convert(non_negative)
parser:flag("--layers", "Print one line per layer and stage as well.")
parser:flag("--json", "Print the report as one JSON line instead of the table.")

local ok, args = parser:pparse()
if not ok then
  fail_usage(("%s\n\nError: %s"):format(parser:get_usage(), args))
end
if (args.model == nil) == (args.synthetic == nil) then
  fail_usage(("%s\n\nError: give a model file or --synthetic NAME, not both"):format(parser:get_usage()))
end
if (args.tokens == nil) == (args.prompt == nil) then
  fail_usage(("%s\n\nError: give --tokens or --prompt, one of them"):format(parser:get_usage()))
end
local tokens
if args.tokens then
  local err
  tokens, err = token_list(args.tokens)
  if not tokens then fail_usage(("%s\n\nError: %s"):format(parser:get_usage(), err)) end
end

-- the library raises Lua errors; here they become a message and status 2
local ok_run, result = pcall(function()
  local model = args.model and gptoss.load(args.model) or gptoss.synthetic(args.synthetic, { seed = args.seed })
  if args.prompt then
    local tok = gptoss.tokenizer(args.tokenizer, { vocab_size = model.config.vocab_size })
    tokens = tok:encode(args.prompt)
    if #tokens == 0 then error("the prompt encodes to no tokens", 0) end
  end
  local function replica(spec)
    return model:replica { device = spec.device, slots = 1, ctx = #tokens, weights = spec.weights, kv = spec.kv }
  end
  local a, b = replica(args.a), replica(args.b)
  return parity.compare(a, b, { tokens = tokens, tolerance = { abs = args.atol, rel = args.rtol },
    print = not args.json, layers = args.layers })
end)
if not ok_run then
  -- errors raised for this script's calls name its lines, which mean nothing to a user
  fail_usage("parity.lua: " .. tostring(result):gsub("^[^\n]-%.lua:%d+: ", ""))
end

if args.json then
  print(require("dkjson").encode(result))
end
os.exit(result.ok and 0 or 1, true)
