#!/usr/bin/env lua5.4
-- Greedy generation on the CPU golden engine: a synthetic model (or a course
-- .bin file), a few prompt tokens prefilled in one step, then one decode step
-- per generated token. Prints the token ids.
--   lua5.4 examples/demo.lua [--model 7m|20b-2l|path.bin] [--seed N] [--steps N] [--prompt "1 2 3"]
local argparse = require "argparse"
local gptoss = require "gptoss"

local parser = argparse("demo.lua", "Greedy decoding with the CPU golden engine.")
parser:option("--model", "Synthetic shape name or a course .bin file.", "7m")
parser:option("--seed", "Seed of the synthetic weights.", "7"):convert(math.tointeger)
parser:option("--steps", "Tokens to generate.", "16"):convert(math.tointeger)
parser:option("--prompt", "Prompt token ids, space separated.", "13225 2375")
parser:option("--threads", "CPU threads (0: all).", "0"):convert(math.tointeger)
local args = parser:parse()

-- a path that exists is a model file; anything else names a synthetic shape
local file = io.open(args.model, "rb")
local model
if file then
  file:close()
  model = gptoss.load(args.model)
else
  model = gptoss.synthetic(args.model, { seed = args.seed })
end
print(model)

local prompt = {}
for id in args.prompt:gmatch("%S+") do prompt[#prompt + 1] = assert(math.tointeger(tonumber(id)), "bad token id " .. id) end
assert(#prompt > 0, "the prompt needs at least one token")

local replica <close> = model:replica { device = "cpu", slots = 1, ctx = #prompt + args.steps, threads = args.threads }
print(replica)

local started = gptoss.clock()
local slots, positions = {}, {}
for i = 1, #prompt do slots[i], positions[i] = 1, i - 1 end
local prefill = replica:step { slots = slots, positions = positions, tokens = prompt }:tokens()
local generated = { prefill[#prompt] }
-- each generated token but the last is fed back at the next position
for pos = #prompt, #prompt + args.steps - 2 do
  local token = replica:step { slots = { 1 }, positions = { pos }, tokens = { generated[#generated] } }:tokens()[1]
  generated[#generated + 1] = token
end
print("prompt:    " .. table.concat(prompt, " "))
print("generated: " .. table.concat(generated, " "))
print(("%d forward rows in %.3f s"):format(#prompt + #generated - 1, gptoss.clock() - started))
