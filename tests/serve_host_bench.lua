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
--                                     [--delay seconds] [--max-len 1024]
--                                     [--chat-fraction F [--json-schema typical]]
-- The requests are those gptoss bench_serve sends for the same --seed and options
-- (gptoss.bench_requests): completions of random prompt ids; --lengths sharegpt draws their
-- lengths as it does (gptoss.lengths, at most --max-len each) instead of --input and
-- --output. --delay makes each step take
-- that long, as a device's does: each stream then gets one id a write, as a GPU server's do,
-- and the CPU time spent polling for it counts, where the server's figure leaves it out.
-- It prints the process's CPU seconds (os.clock) an id, less the fake replica's own, the
-- server's host µs an id (its step_summary, as gptoss serve logs at shutdown), and one JSON
-- line. --chat-fraction makes that share of them chats of words (reasoning_effort none), and
-- --json-schema typical gives its chats bench_serve's schema: the fake replica then draws
-- their final channel under its matcher, whose masks and accepts count as the server's host
-- work (a device's step takes them on the host); the line then says how many of them finished
-- and were valid JSON. --profile samples where the time goes (a debug.sethook count hook: the
-- CPU time between samples goes to the function sampled) and prints the functions holding
-- the most of it. --model SHAPE_OR_PATH --device N --ctx C serves the same requests on a real
-- replica instead (no sockets): its output tok/s beside an HTTP run's and bench_gpu's
-- separate the server's share of a load from its steps'; the process's CPU time then holds the
-- replica's threads, so only the server's host figure is printed, and --profile samples wall
-- time (a step's wait goes to the function that waits).
local argparse = require "argparse"
local bench_requests = require "gptoss.bench_requests"
local cjson = require "cjson"
local cmdline = require "gptoss.cmdline"
local condition = require "cqueues.condition"
local cqueues = require "cqueues"
local fake_replica = require "fake_replica"
local flags = require "gptoss.flags"
local gptoss = require "gptoss"
local lengths = require "gptoss.lengths"
local naming = require "gptoss.naming"
local serve = require "gptoss.serve"
local serve_api = require "gptoss.serve_api"

-- A response of serve_http's shape that keeps nothing but the bytes' count.
local Sink = {}
Sink.__index = Sink
function Sink:open_events() return true end
function Sink:write_events(text)
  self.bytes = self.bytes + #text
  if self.text then self.text[#self.text + 1] = text end
  return true
end
function Sink:wait(cond) cond:wait() return true end
function Sink:send(status) self.status = status end

local parser = argparse("serve_host_bench", "gptoss serve's host work an id, over a fake replica.")
parser:option("--requests", "Streamed requests, all at once (one slot each).", "512"):convert(cmdline.integer("--requests", 1))
parser:option("--output", "Tokens each request generates (max_tokens).", "200"):convert(cmdline.integer("--output", 1))
parser:option("--input", "Prompt tokens of each request.", "14"):convert(cmdline.integer("--input", 1))
parser:option("--lengths", "fixed (--input and --output) or sharegpt (drawn as gptoss bench_serve draws them).",
  "fixed"):choices { "fixed", "sharegpt" }
parser:option("--seed", "Seed of the lengths and prompts drawn (bench_serve's).", "0")
  :convert(cmdline.integer("--seed"))
parser:option("--endpoint", "completions (prompt ids, as gptoss bench_serve) or chat.", "completions")
  :choices { "completions", "chat" }
parser:option("--delay", "Seconds a step of the fake replica takes, as a device's would (0: ready at once).", "0")
  :convert(cmdline.number("--delay", 0, 10))
parser:option("--max-len", "Longest prompt or output drawn with --lengths sharegpt (bench_serve's).", "1024")
  :convert(cmdline.integer("--max-len", 4))
parser:option("--chat-fraction", "Send bench_serve's requests: this share of them chats (replaces --endpoint).", "0")
  :convert(cmdline.number("--chat-fraction", 0, 1))
parser:option("--json-schema", "The chats carry bench_serve's typical response_format.")
  :choices { "typical" }
parser:flag("--http", "Serve over loopback to gptoss bench_serve (a child process; completions only).")
parser:flag("--profile", "Print the functions holding the most CPU time (wall time with --model) between samples.")
parser:option("--model", "Serve on a real replica of this model (a synthetic shape or a path) instead.")
flags.add_device(parser, false)
parser:option("--ctx", "Positions a slot of --model's replica holds.", "2048"):convert(cmdline.integer("--ctx", 2))
local args = parser:parse()
if args.model and (args.http or args.delay > 0) then
  parser:error("--model serves on its replica without sockets: leave --http and --delay out")
end
if args.http and args.endpoint ~= "completions" then parser:error("--http sends completions only (bench_serve's)") end
if args.chat_fraction > 0 and args.endpoint ~= "completions" then
  parser:error("--chat-fraction sends bench_serve's load: leave --endpoint out")
end
if args.json_schema and args.chat_fraction == 0 then parser:error("--json-schema: give --chat-fraction above 0") end
local schema_format = args.json_schema and bench_requests.response_format("typical", bench_requests.TYPICAL_SCHEMA)

-- positions a slot needs at most: a chat's template and schema section come on top of its words
local longest = (args.lengths == "fixed" and args.input + args.output or 2 * args.max_len) + 1024

local tok = gptoss.tokenizer()
local TEXT = fake_replica.plain_text(tok)
local server, replica
-- the fake replica's own seconds, which are a device's work, not the server's
local replica_seconds = 0
if args.model then
  server = serve.new { model = naming.open(args.model), model_name = "bench", tokenizer = tok,
    devices = { flags.one_device(args.device) }, ctx = args.ctx, max_queue = args.requests, port = 0,
    access_log = false, log = function() end }
else
  replica = fake_replica.new { slots = args.requests + 1, ctx = longest, text = TEXT, delay = args.delay }
  local step = replica.step
  function replica.step(r, batch)
    local t = os.clock()
    local h = step(r, batch)
    replica_seconds = replica_seconds + os.clock() - t
    return h
  end
  server = serve.new { model = gptoss.synthetic("7m"), model_name = "bench", tokenizer = tok,
    replicas = { replica }, max_queue = args.requests, port = 0, access_log = false, log = function() end }
end

-- A chat body of --endpoint chat: input words, output tokens at most.
local function chat_body(input, output)
  return cjson.encode { model = "bench", max_tokens = output, temperature = 0, stream = true,
    stream_options = { include_usage = true }, messages = { { role = "user", content = ("word "):rep(input) } } }
end

-- The requests, {path =, body =, chat =} each, drawn from --seed: bench_serve's load (the
-- same requests as it sends for that seed and these options), or --endpoint chat's chats.
local function requests()
  local list = {}
  math.randomseed(args.seed)
  for i = 1, args.requests do
    if args.endpoint == "chat" then
      local input, output = args.input, args.output
      if args.lengths == "sharegpt" then input, output = lengths.draw_sharegpt(args.max_len) end
      list[i] = { path = "/v1/chat/completions", body = chat_body(input, output) }
    else
      local path, text, chat = bench_requests.draw { model = "bench", lengths = args.lengths, input = args.input,
        output = args.output, max_len = args.max_len, chat_fraction = args.chat_fraction,
        response_format = schema_format }
      list[i] = { path = path, body = text, chat = chat }
    end
  end
  return list
end

-- Samples a function's frame every 1000 instructions, in every coroutine the controller
-- wraps from now on (a hook belongs to one coroutine): counts[key] = {samples, seconds of
-- clock since the sample before}, so that the time of a C function (a mask, a decode) goes to
-- the Lua function running when it returns, most often its caller.
local function profile_hook(clock)
  local counts, last = {}, clock()
  local function hook()
    local info = debug.getinfo(2, "S")
    local key, now = info.short_src .. ":" .. info.linedefined, clock()
    local c = counts[key] or { 0, 0 }
    c[1], c[2], last = c[1] + 1, c[2] + now - last, now
    counts[key] = c
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

local function print_profile(counts, what)
  local keys, samples, seconds = {}, 0, 0
  for key, c in pairs(counts) do keys[#keys + 1], samples, seconds = key, samples + c[1], seconds + c[2] end
  table.sort(keys, function(a, b) return counts[a][2] > counts[b][2] end)
  print(("%d samples (thousands of Lua instructions), %.3f %s seconds between them; by %s time:"):format(samples,
    seconds, what, what))
  for i = 1, math.min(25, #keys) do
    local c = counts[keys[i]]
    print(("%5.1f%% of %s %5.1f%% of samples  %s"):format(100 * c[2] / seconds, what, 100 * c[1] / samples, keys[i]))
  end
end

-- Runs the requests (their bodies, encoded before the clock starts: the client's work)
-- through the route handler into sinks; returns the bytes they took and the sinks. A
-- structured chat's sink keeps its text (sink.text), to be judged once the clock stops.
local function serve_sinks(list)
  local done, sinks, all_done = 0, {}, condition.new()
  local routes = serve_api.routes(server)
  server.cq:wrap(function() server.engine:run() end)
  for i = 1, args.requests do
    sinks[i] = setmetatable({ bytes = 0, text = schema_format and list[i].chat and {} or nil }, Sink)
    server.cq:wrap(function()
      routes["POST " .. list[i].path](sinks[i], list[i].body)
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
  return bytes, sinks
end

-- The structured chats' outputs, as bench_serve counts them: {finished =, valid_json =, cut =}.
local function schema_outputs(sinks)
  local outputs = { finished = 0, valid_json = 0, cut = 0 }
  for _, sink in ipairs(sinks) do
    if sink.text then
      local content, finish = {}, nil
      for data in table.concat(sink.text):gmatch("data: (.-)\n\n") do
        local choice = data ~= "[DONE]" and cjson.decode(data).choices[1]
        if choice then
          content[#content + 1] = type(choice.delta.content) == "string" and choice.delta.content or nil
          finish = type(choice.finish_reason) == "string" and choice.finish_reason or finish
        end
      end
      if finish == "length" then
        outputs.cut = outputs.cut + 1
      elseif finish == "stop" then
        outputs.finished = outputs.finished + 1
        if pcall(cjson.decode, table.concat(content)) then outputs.valid_json = outputs.valid_json + 1 end
      end
    end
  end
  return outputs
end

-- Serves over loopback to gptoss bench_serve, run as a child process (its CPU is not this
-- one's; it draws its lengths alike), until it ends; raises its output if it failed.
local function serve_http()
  server:start()
  local log = os.tmpname()
  local client = ("(./gptoss bench_serve --url http://127.0.0.1:%d --requests %d --lengths %s --input %d "
    .. "--output %d --seed %d --max-len %d --chat-fraction %.17g%s >%s 2>&1; echo $? >>%s) &"):format(server.port,
      args.requests, args.lengths, args.input, args.output, args.seed, args.max_len, args.chat_fraction,
      args.json_schema and " --json-schema " .. args.json_schema or "", log, log)
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

local list = not args.http and requests()
local profile_clock = args.model and { gptoss.clock, "wall" } or { os.clock, "CPU" }
local counts = args.profile and profile_hook(profile_clock[1])
local t0, wall0 = os.clock(), gptoss.clock()
local bytes, sinks
if args.http then serve_http() else bytes, sinks = serve_sinks(list) end
local cpu, elapsed = os.clock() - t0, gptoss.clock() - wall0
if counts then debug.sethook() end

local ids = server.metrics.generation_tokens
local streamed = bytes and (", %d bytes streamed"):format(bytes) or " over HTTP"
local host_us, constraint_us
if replica then
  -- the constrained rows' masks and accepts stay in: a device's step takes them on the host
  host_us = (cpu - replica_seconds + replica.constraint_seconds) * 1e6 / ids
  constraint_us = replica.constraint_seconds * 1e6 / ids
  print(("%d requests, %d ids%s; %.2f µs of host CPU an id (%.2f of it masks and accepts; %.2f with the fake "
    .. "replica's)"):format(args.requests, ids, streamed, host_us, constraint_us, cpu * 1e6 / ids))
else
  local s = server.metrics.steps[1]
  host_us = s.host.sum * 1e6 / math.max(s.generated, 1)
  print(("%d requests, %d ids%s on %s: %.2f s, %.1f output tok/s"):format(args.requests, ids, streamed, args.model,
    elapsed, ids / elapsed))
end
for _, line in ipairs(server.metrics:step_summary()) do print("server: " .. line) end
local outputs = sinks and schema_format and schema_outputs(sinks)
if outputs then
  print(("json_schema typical: %d finished, %d of them valid JSON; %d cut by max_tokens"):format(outputs.finished,
    outputs.valid_json, outputs.cut))
end
print(cjson.encode { requests = args.requests, ids = ids, endpoint = args.endpoint, chat_fraction = args.chat_fraction,
  json_schema = args.json_schema or false, host_us_per_id = host_us, constraint_us_per_id = constraint_us,
  schema_outputs = outputs or nil, model = args.model, elapsed = elapsed, output_tok_per_s = ids / elapsed })
if counts then print_profile(counts, profile_clock[2]) end
