#!/usr/bin/env lua5.4
-- Text generation on the CPU golden engine: a synthetic model (or a course
-- .bin file), a prompt encoded with the course tokenizer and prefilled in one
-- step, then one decode step per generated token, sampled from the logits
-- (greedy unless --temperature is set) and printed as it streams out. Stops
-- at <|endoftext|> or <|return|>, as the course's generate does.
--   ./gptoss demo [--model 7m|20b-2l|path.bin] [--prompt "text"] [--steps N]
--                 [--temperature T --top-p P --top-k K --sample-seed S]
-- Exit status: 0 done, 1 anything wrong (usage, files, model), with one message on stderr.
local argparse = require "argparse"
local gptoss = require "gptoss"
local cli = require "gptoss.cli"
local script = require "gptoss.script"

local parser = argparse("demo.lua", "Text generation with the CPU golden engine.")
parser:option("--model", "Synthetic shape name, a course .bin file or a checkpoint directory.", "7m")
parser:option("--seed", "Seed of the synthetic weights (default: gptoss.synthetic's).")
  :convert(cli.integer("--seed"))
parser:option("--steps", "Tokens to generate at most.", "16"):convert(cli.integer("--steps", 1))
parser:option("--prompt", "Prompt text.", "Hello world")
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
parser:option("--temperature", "Sampling temperature (0: greedy).", "0")
  :convert(script.named("--temperature", cli.non_negative))
parser:option("--top-p", "Nucleus sampling mass (1: off).", "1"):convert(script.named("--top-p", cli.non_negative))
parser:option("--top-k", "Keep the K most likely tokens (0: off).", "0"):convert(cli.integer("--top-k", 0))
parser:option("--sample-seed", "Seed of the sampler's draws.", "1"):convert(cli.integer("--sample-seed"))
parser:option("--threads", "CPU threads (0: all).", "0"):convert(cli.integer("--threads", 0))
local args = script.parse(parser)

script.run(function()
  local model, tok, _, prompt = cli.open_model { model = args.model, seed_weights = args.seed,
    tokenizer = args.tokenizer, prompt = args.prompt }
  print(model)

  local sampler = gptoss.sampler { temperature = args.temperature, top_p = args.top_p, top_k = args.top_k,
    seed = args.sample_seed }
  local stop = { [tok.special.endoftext] = true, [tok.special["return"]] = true }

  local replica <close> = model:replica { device = "cpu", slots = 1, ctx = #prompt + args.steps,
    threads = args.threads }
  print(replica)
  print(("prompt:    %q -> %s"):format(args.prompt, table.concat(prompt, " ")))

  local started = gptoss.clock()
  local slots, positions = {}, {}
  for i = 1, #prompt do slots[i], positions[i] = 1, i - 1 end
  local logits = replica:step { slots = slots, positions = positions, tokens = prompt }:logits()
  local row = logits[#prompt]
  local generated, decoder = {}, tok:decoder()
  io.write("text:      ")
  for pos = #prompt, #prompt + args.steps - 1 do
    local token = sampler:sample(row, pos)
    generated[#generated + 1] = token
    if stop[token] then break end
    io.write(decoder:add(token))
    io.flush()
    if pos == #prompt + args.steps - 1 then break end
    row = replica:step { slots = { 1 }, positions = { pos }, tokens = { token } }:logits()[1]
  end
  io.write(decoder:flush(), "\n")
  print("generated: " .. table.concat(generated, " "))
  print(("%d forward rows in %.3f s"):format(#prompt + #generated - 1, gptoss.clock() - started))
end)
