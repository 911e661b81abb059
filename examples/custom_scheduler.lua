#!/usr/bin/env lua5.4
-- A scheduler written in a few lines of Lua, run by gptoss.getp next to the built-in ones
-- on CPU replicas of a synthetic model: chunked prefill, which admits a new request only
-- while fewer than two prompts are being fed and feeds each at most 8 tokens a step, so
-- that the running sequences' decode steps stay small. Greedy outputs do not depend on
-- the schedule, so all three runs must agree; they differ in steps and speed.
--   gptoss custom_scheduler [MODEL] [--steps 64] [--slots 4] [--replicas 1]
-- MODEL (default 7m) as every command names it (gptoss.naming); --steps is the course's -n,
-- prompt + generated tokens, as getp counts them (gptoss.flags).
-- Exit status: 0 done, 1 anything wrong (usage, tokenizer, model), with one message on stderr.
local argparse = require "argparse"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local getp = require "gptoss.getp"
local naming = require "gptoss.naming"
local script = require "gptoss.script"

local parser = argparse(script.name, "getp with a custom scheduler on the CPU.")
naming.add_model(parser, { default = "7m" })
flags.add_course_steps(parser, 64)
parser:option("--slots", "Slots of each CPU replica.", "4"):convert(cmdline.integer("--slots", 1))
parser:option("--replicas", "CPU replicas.", "1"):convert(cmdline.integer("--replicas", 1))
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
local args = script.parse(parser)

local chunked = {
  name = "chunked prefill",
  admit = function(_, state)
    local feeding = 0
    for _, seq in ipairs(state.running) do
      if seq.position < #seq.prompt then feeding = feeding + 1 end
    end
    return math.max(0, math.min(state.free, #state.waiting, 2 - feeding))
  end,
  prefill_chunk = function(_, seq, state)
    return math.min(8, #seq.prompt - seq.position, state.rows_left, state.chunk)
  end,
  on_finish = function(_, seq)
    io.write(("  request %2d ended (%s) after %d ids\n"):format(seq.index, seq.finish, #seq.output))
  end,
}

local prompts = {
  "Hello", "Write a short haiku about the ocean.", "What is the biggest misconception about the sea?",
  "Once upon a time, in a land far away, there lived a dragon who collected teapots of every colour.",
  "1 2 3 4 5 6 7 8 9 10", "ฉันรักทะเล 🌊", "Explain continuous batching to a five-year-old.", "Hi",
}
script.run(function()
  local model = naming.open(args.model, args.seed_weights)
  local tok = gptoss.tokenizer(args.tokenizer, { vocab_size = model.config.vocab_size })
  local devices = {}
  for k = 1, args.replicas do devices[k] = "cpu" end

  local first
  for _, sched in ipairs { "continuous", "static", chunked } do
    local g <close> = getp.new { model = model, tokenizer = tok, devices = devices, steps = args.steps,
      replica = { slots = args.slots }, scheduler = sched, requests = prompts }
    print(g:describe())
    local result = g:run()
    print(("  %d tokens in %d steps, %.3f s: %.1f tok/s"):format(result.tokens, result.steps, result.elapsed,
      result.tokens / result.elapsed))
    first = first or result.outputs
    for i, out in ipairs(result.outputs) do
      assert(table.concat(out, " ") == table.concat(first[i], " "), "outputs differ between schedulers")
    end
  end
  print("request 2: " .. prompts[2])
  print("generated: " .. tok:decode(first[2]))
end)
