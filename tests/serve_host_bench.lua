-- gptoss serve's host work an id, on the CPU and without a model: many streamed requests
-- served at once over a fake replica (tests/fake_replica.lua: its ids drawn at once), each
-- answered by the server's own route handler (gptoss.serve_api) into a response that keeps
-- no bytes, so what is timed is what the server does with a step's ids: the engine loop and
-- runner, ids into deltas, events made, metrics. --http serves them over loopback instead,
-- to gptoss bench_serve run as a child process, so that the writes count too. Run as its
-- own process, from the tree's root (docs/serve.md#measuring has the environment):
--   lua5.4 tests/serve_host_bench.lua [--requests 512] [--output 200] [--input 14]
--                                     [--lengths fixed | sharegpt] [--seed 0]
--                                     [--endpoint completions | chat] [--http] [--profile]
--                                     [--delay seconds]
-- --lengths sharegpt draws each request's lengths as gptoss bench_serve does (gptoss.lengths,
-- at most MAX_LEN each) instead of sending --input and --output. --delay makes each step take
-- that long, as a device's does: each stream then gets one id a write, as a GPU server's do,
-- and the CPU time spent polling for it counts, where the server's figure leaves it out.
-- It prints the process's CPU seconds (os.clock) an id, less the fake replica's own, the
-- server's host µs an id (its step_summary, as gptoss serve logs at shutdown), and one JSON
-- line. --profile samples where the time goes (a debug.sethook count hook) and prints the
-- functions holding the most samples.
local argparse = require "argparse"
local cjson = require "cjson"
local cmdline = require "gptoss.cmdline"
local condition = require "cqueues.condition"
local cqueues = require "cqueues"
local fake_replica = require "fake_replica"
local gptoss = require "gptoss"
local lengths = require "gptoss.lengths"
local serve = require "gptoss.serve"
local serve_api = require "gptoss.serve_api"

-- A response of serve_http's shape that keeps nothing but the bytes' count.
local Sink = {}
Sink.__index = Sink
function Sink:open_events() return true end
function Sink:write_events(text) self.bytes = self.bytes + #text return true end
function Sink:wait(cond) cond:wait() return true end
function Sink:send(status) self.status = status end

local parser = argparse("serve_host_bench", "gptoss serve's host work an id, over a fake replica.")
parser:option("--requests", "Streamed requests, all at once (one slot each).", "512"):convert(cmdline.integer("--requests", 1))
parser:option("--output", "Tokens each request generates (max_tokens).", "200"):convert(cmdline.integer("--output", 1))
parser:option("--input", "Prompt tokens of each request.", "14"):convert(cmdline.integer("--input", 1))
parser:option("--lengths", "fixed (--input and --output) or sharegpt (drawn as gptoss bench_serve draws them).",
  "fixed"):choices { "fixed", "sharegpt" }
parser:option("--seed", "Seed of the lengths drawn.", "0"):convert(cmdline.integer("--seed"))
parser:option("--endpoint", "completions (prompt ids, as gptoss bench_serve) or chat.", "completions")
  :choices { "completions", "chat" }
parser:option("--delay", "Seconds a step of the fake replica takes, as a device's would (0: ready at once).", "0")
  :convert(cmdline.number("--delay", 0, 10))
parser:flag("--http", "Serve over loopback to gptoss bench_serve (a child process; completions only).")
parser:flag("--profile", "Print the functions holding the most samples.")
local args = parser:parse()
if args.http and args.endpoint ~= "completions" then parser:error("--http sends completions only (bench_serve's)") end

-- Each request's prompt and output lengths: {input, output}.
local MAX_LEN = 1024 -- bench_serve's default --max-len
local drawn = {}
math.randomseed(args.seed)
for i = 1, args.requests do
  drawn[i] = args.lengths == "fixed" and { args.input, args.output } or { lengths.draw_sharegpt(MAX_LEN) }
end
local longest = args.lengths == "fixed" and args.input + args.output or 2 * MAX_LEN

local tok = gptoss.tokenizer()
local TEXT = fake_replica.plain_text(tok)
local replica = fake_replica.new { slots = args.requests + 1, ctx = longest + 64, text = TEXT, delay = args.delay }
-- the fake replica's own seconds, which are a device's work, not the server's
local replica_seconds, step = 0, replica.step
function replica.step(r, batch)
  local t = os.clock()
  local h = step(r, batch)
  replica_seconds = replica_seconds + os.clock() - t
  return h
end
local server = serve.new { model = gptoss.synthetic("7m"), model_name = "bench", tokenizer = tok,
  replicas = { replica }, max_queue = args.requests, port = 0, access_log = false, log = function() end }

-- Request i's body.
local function body(i)
  local input, output = drawn[i][1], drawn[i][2]
  local b = { model = "bench", max_tokens = output, temperature = 0, stream = true,
    stream_options = { include_usage = true } }
  if args.endpoint == "chat" then
    b.messages = { { role = "user", content = ("word "):rep(input) } }
  else
    b.prompt = {}
    for k = 1, input do b.prompt[k] = TEXT[k % #TEXT + 1] end
  end
  return cjson.encode(b)
end

-- Samples a function's frame every 1000 instructions, in every coroutine the controller
-- wraps from now on (a hook belongs to one coroutine).
local function profile_hook()
  local counts = {}
  local function hook()
    local info = debug.getinfo(2, "S")
    local key = info.short_src .. ":" .. info.linedefined
    counts[key] = (counts[key] or 0) + 1
  end
  local wrap
  wrap = cqueues.interpose("wrap", function(cq, f, ...)
    return wrap(cq, function(...)
      debug.sethook(hook, "", 1000)
      return f(...)
    end, ...)
  end)
  debug.sethook(hook, "", 1000)
  return counts
end

local function print_profile(counts)
  local keys, total = {}, 0
  for key, n in pairs(counts) do keys[#keys + 1], total = key, total + n end
  table.sort(keys, function(a, b) return counts[a] > counts[b] end)
  print(("%d samples (thousands of Lua instructions)"):format(total))
  for i = 1, math.min(25, #keys) do print(("%5.1f%%  %s"):format(100 * counts[keys[i]] / total, keys[i])) end
end

-- Runs the requests (their bodies, encoded before the clock starts: the client's work)
-- through the route handler into sinks; returns the bytes they took.
local function serve_sinks(bodies)
  local done, sinks, all_done = 0, {}, condition.new()
  local route = serve_api.routes(server)["POST /v1/" .. (args.endpoint == "chat" and "chat/completions"
    or "completions")]
  server.cq:wrap(function() server.engine:run() end)
  for i = 1, args.requests do
    sinks[i] = setmetatable({ bytes = 0 }, Sink)
    server.cq:wrap(function()
      route(sinks[i], bodies[i])
      done = done + 1
      if done == args.requests then all_done:signal() end
    end)
  end
  server.cq:wrap(function()
    all_done:wait()
    server.engine:stop()
  end)
  while not server.cq:empty() do assert(server.cq:step()) end
  local bytes = 0
  for _, s in ipairs(sinks) do bytes = bytes + s.bytes end
  return bytes
end

-- Serves over loopback to gptoss bench_serve, run as a child process (its CPU is not this
-- one's; it draws its lengths alike), until it ends; raises its output if it failed.
local function serve_http()
  server:start()
  local log = os.tmpname()
  local client = ("(./gptoss bench_serve --url http://127.0.0.1:%d --requests %d --lengths %s --input %d "
    .. "--output %d --seed %d --max-len %d >%s 2>&1; echo $? >>%s) &"):format(server.port, args.requests, args.lengths,
      args.input, args.output, args.seed, MAX_LEN, log, log)
  assert(os.execute(client))
  -- the log is looked at twice a second, not once a pass of the loop (which comes once a
  -- turn of the engine's): its opening would count as the server's host work
  local next_look, status = 0, nil
  while not status do
    assert(server.cq:step(0.5))
    if cqueues.monotime() >= next_look then
      next_look = cqueues.monotime() + 0.5
      local f = io.open(log)
      local out = f:read("a")
      f:close()
      status = out:match("(%d+)\n$")
      if status and status ~= "0" then error("gptoss bench_serve failed:\n" .. out, 0) end
    end
  end
  os.remove(log)
end

local bodies = {}
for i = 1, args.http and 0 or args.requests do bodies[i] = body(i) end
local counts = args.profile and profile_hook()
local t0 = os.clock()
local bytes
if args.http then serve_http() else bytes = serve_sinks(bodies) end
local cpu = os.clock() - t0
if counts then debug.sethook() end

local ids = server.metrics.generation_tokens
local host_us = (cpu - replica_seconds) * 1e6 / ids
print(("%d requests, %d ids%s; %.2f µs of host CPU an id (%.2f with the fake replica's)")
  :format(args.requests, ids, bytes and (", %d bytes streamed"):format(bytes) or " over HTTP", host_us, cpu * 1e6 / ids))
for _, line in ipairs(server.metrics:step_summary()) do print("server: " .. line) end
print(cjson.encode { requests = args.requests, ids = ids, endpoint = args.endpoint, host_us_per_id = host_us })
if counts then print_profile(counts) end
