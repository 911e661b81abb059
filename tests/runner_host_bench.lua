-- The host work of a step around a real engine, without the server: gptoss.runner over a
-- CPU replica of a synthetic model (the 7m's shape with a small vocabulary, so that the
-- forward does not drown the rest), many slots decoding at once, each step built one ahead
-- of the one running and fed by it, as gptoss serve's engine loop does. It prints the CPU
-- seconds an id of each host part: r:build (the step's rows), h:tokens (the ids read back
-- through the binding), r:apply (the ids taken), and r:step, whose time is mostly the
-- forward (run it under valgrind --tool=callgrind to see the binding's share: read_batch,
-- push_failures). Run as its own process, from the tree's root (docs/serve.md#measuring):
--   lua5.4 tests/runner_host_bench.lua [--slots 512] [--output 16] [--input 4] [--vocab 1024]
local argparse = require "argparse"
local cjson = require "cjson"
local cmdline = require "gptoss.cmdline"
local gptoss = require "gptoss"
local runner, scheduler = require "gptoss.runner", require "gptoss.scheduler"

local parser = argparse("runner_host_bench", "The host work of a step around a CPU replica, an id.")
parser:option("--slots", "Sequences, all decoding at once (one slot each).", "512"):convert(cmdline.integer("--slots", 1))
parser:option("--output", "Ids each sequence generates.", "16"):convert(cmdline.integer("--output", 1))
parser:option("--input", "Prompt ids of each sequence.", "4"):convert(cmdline.integer("--input", 1))
parser:option("--vocab", "The synthetic model's vocabulary.", "1024"):convert(cmdline.integer("--vocab", 16))
local args = parser:parse()

local model = gptoss.synthetic { vocab_size = args.vocab }
-- one thread: other threads' CPU would count in the host parts' os.clock
local replica = model:replica { slots = args.slots, ctx = args.input + args.output + 1, threads = 1 }
local queue = {}
for i = 1, args.slots do
  local prompt = {}
  for k = 1, args.input do prompt[k] = (i * 7 + k) % args.vocab end
  queue[i] = { index = i, prompt = prompt, limit = args.output, position = 0, output = {} }
end
local rn = runner.new(scheduler.continuous(), replica, 1, queue,
  { rows = args.slots + args.input * args.slots, chunk = args.input, stop = {} })

local seconds = { build = 0, step = 0, tokens = 0, apply = 0 }
local function timed(part, f, ...)
  local t = os.clock()
  local a, b = f(...)
  seconds[part] = seconds[part] + os.clock() - t
  return a, b
end

-- Two steps in flight, the next built (fed by the running one) before the running one is read.
local flights, ids_total = {}, 0
while rn:busy() or #flights > 0 do
  while #flights < 2 and rn:busy() do
    local plan = timed("build", rn.build, rn, flights[#flights])
    if not plan then break end
    plan.batch.from = flights[#flights] and flights[#flights].handle
    plan.handle = timed("step", replica.step, replica, plan.batch)
    flights[#flights + 1] = plan
  end
  local plan = table.remove(flights, 1)
  local ids, failed = timed("tokens", plan.handle.tokens, plan.handle, { partial = true })
  ids_total = ids_total + timed("apply", rn.apply, rn, plan, ids, failed)
end

local us = {}
for part, s in pairs(seconds) do us[part] = s * 1e6 / ids_total end
print(("%d sequences, %d ids: µs an id: build %.3f, tokens %.3f, apply %.3f (host %.3f); step %.1f (the forward's too)")
  :format(args.slots, ids_total, us.build, us.tokens, us.apply, us.build + us.tokens + us.apply, us.step))
print(cjson.encode { slots = args.slots, ids = ids_total, us_per_id = us })
