#!/usr/bin/env lua5.4
-- Beam search (gptoss.beam) on one replica: each live beam holds a slot, beams with several
-- children are forked, candidates come from the device's top logprobs. Prints every
-- finished hypothesis, best first, with its summed logprob and its score (the sum over
-- length^alpha), and greedy decoding's text for comparison (beam search with width 1).
--   gptoss beam_search [MODEL] [--width 4] [--max-tokens 16] [--alpha 1]
--                      [--device cpu|N] [--prompt "text"]
-- MODEL (default 7m), --device (default: the first GPU, else cpu) and --max-tokens as every
-- command spells them (gptoss.naming, gptoss.flags).
local argparse = require "argparse"
local gptoss = require "gptoss"
local beam = require "gptoss.beam"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local script = require "gptoss.script"
local harmony = require "gptoss.harmony"

local parser = argparse(script.name, "Beam search with forks.")
naming.add_generation(parser, { prompt = "The capital of France is" })
parser:option("--width", "Beams kept a step (at most 20).", "4"):convert(cmdline.integer("--width", 1))
flags.add_max_tokens(parser, 16, "16; a hypothesis each")
parser:option("--alpha", "Length normalisation: score = sum of logprobs / length^alpha.", "1")
  :convert(cmdline.non_negative)
local a = script.parse(parser)

script.run(function()
  local model, tok, ropts, prompt = naming.open_generation(a)
  local r <close> = model:replica { device = ropts.device, weights = ropts.weights, kv = ropts.kv, slots = a.width,
    ctx = #prompt + a.max_tokens }
  io.stderr:write(tostring(r), "\n")
  -- harmony's stop ids end a hypothesis, as they end a reply
  local opts = { replica = r, prompt = prompt, max_tokens = a.max_tokens, end_ids = harmony.stop_ids,
    alpha = a.alpha }
  opts.width = 1
  local greedy = beam.search(opts)
  opts.width = a.width
  local t0 = gptoss.clock()
  local result = beam.search(opts)
  local seconds = gptoss.clock() - t0
  print(("prompt: %q"):format(a.prompt))
  print(("greedy: %q  (logprob %.3f)"):format(tok:decode(greedy.ids), greedy.logprob))
  print(("beam search, width %d, alpha %g: %d hypotheses, %d steps, %.3f s"):format(a.width, a.alpha,
    #result.hypotheses, result.steps, seconds))
  for i, h in ipairs(result.hypotheses) do
    print(("%2d  score %8.4f  logprob %8.3f  %2d ids (%s)  %q"):format(i, h.score, h.logprob, #h.ids, h.finish,
      tok:decode(h.ids)))
  end
end)
