#!/usr/bin/env lua5.4
-- Best-of-n sampling with a shared prompt (gptoss.generate.parallel): the prompt is
-- prefilled once and forked into n slots, each slot samples with its own seed, and the
-- sample of the highest score (summed logprob over length^alpha) is the answer. Prints
-- every sample with its score, the best marked, and the prompt rows stepped against n
-- separate prefills.
--   gptoss best_of_n [MODEL] [--n 4] [--temperature 0.8] [--seed 1]
--                    [--presence-penalty P --frequency-penalty F]
--                    [--max-tokens 24] [--stop TEXT] [--device cpu|N]
-- MODEL (default 7m), --device (default: the first GPU, else cpu), --max-tokens, --seed and
-- the penalties (counted per sample) as every command spells them (gptoss.naming, gptoss.flags).
local argparse = require "argparse"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local script = require "gptoss.script"
local generate = require "gptoss.generate"
local harmony = require "gptoss.harmony"

local parser = argparse(script.name, "Best-of-n sampling from one prefill.")
naming.add_generation(parser, { prompt = "Write one sentence about the sea:" })
parser:option("--n", "Samples.", "4"):convert(cmdline.integer("--n", 1))
parser:option("--temperature", "Sampling temperature.", "0.8"):convert(cmdline.non_negative)
parser:option("--top-p", "Nucleus sampling mass (1: off).", "1"):convert(cmdline.non_negative)
flags.add_seed(parser, 1, "1; sample i draws with seed + i - 1")
flags.add_penalties(parser, "counted per sample")
flags.add_max_tokens(parser, 24, "24; a sample each")
parser:option("--alpha", "Score = summed logprob / length^alpha.", "1"):convert(cmdline.non_negative)
parser:option("--stop", "Stop a sample where its text contains TEXT (repeatable).", {}):count("*")
local a = script.parse(parser)

script.run(function()
  local model, tok, ropts, prompt = naming.open_generation(a)
  local r <close> = model:replica { device = ropts.device, weights = ropts.weights, kv = ropts.kv, slots = a.n,
    ctx = #prompt + a.max_tokens }
  io.stderr:write(tostring(r), "\n")
  local stop_ids = {}
  for i, id in ipairs(harmony.stop_ids) do stop_ids[i] = { id } end
  local result = generate.parallel { replica = r, prompt = prompt, n = a.n, max_tokens = a.max_tokens, alpha = a.alpha,
    sampling = flags.with_penalties(a, { temperature = a.temperature, top_p = a.top_p, seed = a.seed }),
    stop = { tokenizer = tok, ids = stop_ids, text = #a.stop > 0 and a.stop or nil } }
  print(("prompt: %q (%d ids)"):format(a.prompt, #prompt))
  for i, s in ipairs(result.samples) do
    print(("%s %2d  seed %d  score %8.4f  logprob %8.3f  %2d ids (%s)  %q"):format(i == result.best and "*" or " ", i,
      a.seed + i - 1, s.score, s.logprob, #s.ids, s.finish, s.text))
  end
  print(("%d steps; %d prompt rows stepped, where %d separate prefills would step %d"):format(result.steps,
    result.prefill_rows, a.n, a.n * #prompt))
end)
