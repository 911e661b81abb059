#!/usr/bin/env lua5.4
-- Speculative decoding (gptoss.speculative) against plain decoding (gptoss.generate.run) of
-- the same prompt on the same target replica: a draft model proposes --k ids a round, the
-- target verifies them in one step. The draft is the target's shape with fewer layers
-- (--draft-layers; with a synthetic model its layers are the target's first ones, its
-- embedding and unembedding the same) or, with --draft-layers 0, the target itself in a
-- second slot. Greedy by default, where both outputs must be the same ids; prints the
-- text, then one JSON line: rounds, accepted ids, tokens per target step, and both wall
-- times.
--   gptoss speculative [MODEL] [--draft-layers 1] [--k 4] [--max-tokens 64]
--                      [--device cpu|N] [--temperature T --seed S]
-- MODEL (default 7m), --device (default: the first GPU, else cpu), --max-tokens and --seed as
-- every command spells them (gptoss.naming, gptoss.flags).
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local script = require "gptoss.script"
local generate = require "gptoss.generate"
local speculative = require "gptoss.speculative"

local parser = argparse(script.name, "Speculative decoding against plain decoding.")
naming.add_generation(parser, { prompt = "Once upon a time, in a land far away," })
parser:option("--draft-layers", "Layers of the draft model (0: the target itself).", "1")
  :convert(cmdline.integer("--draft-layers", 0))
parser:option("--k", "Ids the draft proposes a round.", "4"):convert(cmdline.integer("--k", 1))
flags.add_max_tokens(parser, 64)
parser:option("--temperature", "0: greedy; else sampling from softmax(logits / T).", "0"):convert(cmdline.non_negative)
flags.add_seed(parser, 1, "1; with --temperature above 0")
parser:option("--runs", "Runs of each loop; the fastest is reported (the first warms GPU graphs).", "2")
  :convert(cmdline.integer("--runs", 1))
local a = script.parse(parser)

script.run(function()
  local model, tok, ropts, prompt = naming.open_generation(a)
  local ctx = #prompt + a.max_tokens
  local target <close> = model:replica { device = ropts.device, weights = ropts.weights, kv = ropts.kv, ctx = ctx,
    slots = a.draft_layers == 0 and 2 or 1 }
  local draft, draft_model = target, "the target (slot 2)"
  if a.draft_layers > 0 then
    if model.format ~= "synthetic" then error("--draft-layers needs a synthetic MODEL; 0 drafts with the target", 0) end
    if a.draft_layers >= model.config.n_layers then
      error(("--draft-layers: %d is not fewer than the target's %d"):format(a.draft_layers, model.config.n_layers), 0)
    end
    local config = {}
    for k, v in pairs(model.config) do config[k] = v end
    config.n_layers = a.draft_layers
    draft = gptoss.synthetic(config, { seed = a.seed_weights }):replica { device = ropts.device, weights = ropts.weights,
      kv = ropts.kv, ctx = ctx }
    draft_model = ("%s with %d of its %d layers"):format(a.model, a.draft_layers, model.config.n_layers)
  end
  local sampling = a.temperature > 0 and { temperature = a.temperature, seed = a.seed } or nil
  io.stderr:write(("target: %s\ndraft:  %s\n"):format(tostring(target), draft_model))

  -- the fastest of --runs runs of f, and its result
  local function timed(f)
    local best, result = math.huge, nil
    for _ = 1, a.runs do
      local t0 = gptoss.clock()
      result = f()
      best = math.min(best, gptoss.clock() - t0)
    end
    return result, best
  end
  local plain, plain_s = timed(function()
    return generate.run { replica = target, prompt = prompt, max_tokens = a.max_tokens, sampling = sampling }
  end)
  local spec, spec_s = timed(function()
    return speculative.generate { target = target, draft = draft, draft_slot = draft == target and 2 or 1,
      prompt = prompt, k = a.k, max_tokens = a.max_tokens, sampling = sampling }
  end)
  if draft ~= target then draft:close() end
  io.write(a.prompt, tok:decode(spec.ids), "\n")
  local same = table.concat(plain.ids, " ") == table.concat(spec.ids, " ")
  if not sampling and not same then error("greedy speculative decoding gave other ids than plain decoding", 0) end
  print(json.encode({
    model = a.model, draft = draft_model, device = ropts.device, weights = target.weights, k = a.k,
    temperature = a.temperature, tokens = #spec.ids, rounds = spec.rounds, proposed = spec.proposed,
    accepted = spec.accepted, tokens_per_target_step = spec.tokens_per_round,
    speculative_s = spec_s, plain_s = plain_s, plain_tokens = #plain.ids, speedup = plain_s / spec_s,
    same_ids = same,
  }, { keyorder = { "model", "draft", "device", "weights", "k", "temperature", "tokens", "rounds", "proposed",
    "accepted", "tokens_per_target_step", "speculative_s", "plain_s", "plain_tokens", "speedup", "same_ids" } }))
end)
