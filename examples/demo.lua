#!/usr/bin/env lua5.4
-- Text generation on a GPU (or the CPU golden engine, --device cpu): a synthetic model (or a
-- course .bin file, a checkpoint directory), a prompt encoded with the course tokenizer and
-- prefilled in one step, then one decode step per generated token, sampled from the logits
-- (greedy unless --temperature is set) and printed as it streams out. Stops at
-- <|endoftext|> or <|return|>, as the course's generate does.
--   gptoss demo [MODEL] [--prompt "text"] [--max-tokens N] [--device cpu|N]
--               [--temperature T --top-p P --top-k K --seed S]
--               [--presence-penalty P --frequency-penalty F]
-- MODEL (default 7m), --device (default: the first GPU, else cpu), --max-tokens, --seed and
-- the penalties as every command spells them (gptoss.naming, gptoss.flags).
-- Exit status: 0 done, 1 anything wrong (usage, files, model), with one message on stderr.
local argparse = require "argparse"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local script = require "gptoss.script"

local parser = argparse(script.name, "Text generation on a GPU or the CPU golden engine.")
naming.add_generation(parser, { prompt = "Hello world" })
flags.add_max_tokens(parser, 16)
flags.retire(parser, "--steps", "--max-tokens")
parser:option("--temperature", "Sampling temperature (0: greedy).", "0")
  :convert(script.named("--temperature", cmdline.non_negative))
parser:option("--top-p", "Nucleus sampling mass (1: off).", "1"):convert(script.named("--top-p", cmdline.non_negative))
parser:option("--top-k", "Keep the K most likely tokens (0: off).", "0"):convert(cmdline.integer("--top-k", 0))
flags.add_seed(parser, 1)
flags.retire(parser, "--sample-seed")
flags.add_penalties(parser)
parser:option("--threads", "CPU threads (0: all; the CPU only).", "0"):convert(cmdline.integer("--threads", 0))
local args = script.parse(parser)

script.run(function()
  local model, tok, ropts, prompt = naming.open_generation(args)
  print(model)

  local sampler = gptoss.sampler(flags.with_penalties(args, { temperature = args.temperature, top_p = args.top_p,
    top_k = args.top_k, seed = args.seed }))
  local stop = { [tok.special.endoftext] = true, [tok.special["return"]] = true }

  local replica <close> = model:replica { device = ropts.device, weights = ropts.weights, slots = 1,
    ctx = #prompt + args.max_tokens, threads = ropts.device == "cpu" and args.threads or nil }
  print(replica)
  print(("prompt:    %q -> %s"):format(args.prompt, table.concat(prompt, " ")))

  local started = gptoss.clock()
  local slots, positions = {}, {}
  for i = 1, #prompt do slots[i], positions[i] = 1, i - 1 end
  local logits = replica:step { slots = slots, positions = positions, tokens = prompt }:logits()
  local row = logits[#prompt]
  local generated, decoder = {}, tok:decoder()
  io.write("text:      ")
  for pos = #prompt, #prompt + args.max_tokens - 1 do
    local token = sampler:sample(row, pos)
    generated[#generated + 1] = token
    if stop[token] then break end
    io.write(decoder:add(token))
    io.flush()
    if pos == #prompt + args.max_tokens - 1 then break end
    row = replica:step { slots = { 1 }, positions = { pos }, tokens = { token } }:logits()[1]
  end
  io.write(decoder:flush(), "\n")
  print("generated: " .. table.concat(generated, " "))
  print(("%d forward rows in %.3f s"):format(#prompt + #generated - 1, gptoss.clock() - started))
end)
