#!/usr/bin/env lua5.4
-- A load generator for an OpenAI-compatible server (gptoss serve, or any other), as vLLM's
-- `bench serve` reports: N streamed completions sent at a Poisson rate or at a fixed
-- concurrency, each a prompt of random token ids and a max_tokens drawn from a length
-- distribution; prints TTFT, TPOT and inter-token latency (p50, p90, p99, ms), request and
-- output token throughput, and one JSON line; --record appends it to examples/results.jsonl
-- with this host for the machine (run it beside the server; gptoss.results).
--   gptoss bench_serve [--url http://127.0.0.1:8000] [--requests 1000] [--rate inf | --concurrency N]
--                      [--lengths sharegpt | fixed] [--input N --output N] [--seed S] [--api-key KEY]
--                      [--record]
-- Lengths (--lengths sharegpt, the default): input and output token counts drawn from
-- lognormal distributions whose means are those of vLLM's ShareGPT benchmark (ShareGPT_V3's
-- conversations as it samples them: input about 220 tokens, output about 200), sigma 0.8 for
-- input and 0.7 for output, each clamped to 4..(--max-len) tokens; --lengths fixed sends
-- --input and --output exactly. The server may stop a request before its max_tokens (a stop
-- id): output throughput counts what came back (the usage the server reports).
-- When the server's /metrics has gptoss serve's step histograms, it also prints the
-- server's host and waited ms a step over the run and its host µs a generated id.
-- Exit status 1 when a request fails or the server cannot be reached, with one message.
local argparse = require "argparse"
local cjson = require "cjson"
local cmdline = require "gptoss.cmdline"
local cqueues = require "cqueues"
local condition = require "cqueues.condition"
local gptoss = require "gptoss"
local results = require "gptoss.results"
local script = require "gptoss.script"
require "gptoss.serve_http" -- lua-http on Lua 5.4's path (its header says why)
local http_request = require "http.request"

local parser = argparse(script.name, "Load an OpenAI-compatible server with streamed completions (docs/serve.md).")
parser:option("--url", "The server.", "http://127.0.0.1:8000")
parser:option("--model", "The model's name (default: the first /v1/models lists).")
parser:option("--requests", "Requests to send.", "1000"):convert(cmdline.integer("--requests", 1))
parser:option("--rate", "Requests a second, arriving as a Poisson process (inf: all at once).", "inf")
  :convert(function(s)
    if s == "inf" then return math.huge end
    local v = tonumber(s)
    if not v or v ~= v or v <= 0 then return nil, ("--rate: '%s' is not a positive number or inf"):format(s) end
    return v
  end)
parser:option("--concurrency", "Requests in flight at most (default: no bound).")
  :convert(cmdline.integer("--concurrency", 1))
parser:option("--lengths", "Length distribution: sharegpt or fixed.", "sharegpt"):choices { "sharegpt", "fixed" }
parser:option("--input", "Prompt tokens with --lengths fixed.", "220"):convert(cmdline.integer("--input", 1))
parser:option("--output", "Output tokens with --lengths fixed.", "200"):convert(cmdline.integer("--output", 1))
parser:option("--max-len", "Longest prompt or output drawn.", "1024"):convert(cmdline.integer("--max-len", 4))
parser:option("--seed", "Seed of the lengths and prompts drawn.", "0"):convert(cmdline.integer("--seed"))
parser:option("--api-key", "Bearer key (default: $GPTOSS_API_KEY).")
results.add_option(parser)
local args = script.parse(parser)

local SHAREGPT = { input = { mean = 220, sigma = 0.8 }, output = { mean = 200, sigma = 0.7 } }
local PROMPT_IDS = 100000 -- prompt ids drawn below this: ordinary text tokens of o200k

-- A lognormal draw of the given mean (mu = log(mean) - sigma^2 / 2), as a token count.
local function lognormal(d)
  local z = math.sqrt(-2 * math.log(1 - math.random())) * math.cos(2 * math.pi * math.random())
  local v = math.exp(math.log(d.mean) - d.sigma ^ 2 / 2 + d.sigma * z)
  return math.max(4, math.min(args.max_len, math.floor(v + 0.5)))
end

local function percentiles(list)
  table.sort(list)
  local function at(p) return #list > 0 and list[math.max(1, math.ceil(p / 100 * #list))] * 1000 or 0 end
  return { p50 = at(50), p90 = at(90), p99 = at(99) }
end

local key = args.api_key or os.getenv("GPTOSS_API_KEY")

local function request(path, body)
  local req = http_request.new_from_uri(args.url .. path)
  if key then req.headers:upsert("authorization", "Bearer " .. key) end
  if body then
    req.headers:upsert(":method", "POST")
    req.headers:upsert("content-type", "application/json")
    req:set_body(cjson.encode(body))
    -- lua-http asks a body over 1 KB to wait for 100 Continue, for up to a second: a load
    -- generator sends it at once, as vLLM's does
    req.headers:delete("expect")
  end
  local headers, stream = req:go(60)
  if not headers then error(("%s%s: %s"):format(args.url, path, tostring(stream)), 0) end
  if headers:get(":status") ~= "200" then
    error(("%s%s: HTTP %s: %s"):format(args.url, path, headers:get(":status"), stream:get_body_as_string(10) or ""), 0)
  end
  return stream
end

-- The server's step figures from /metrics: {host =, waited =, steps =, generated =} summed
-- over its replicas, or nil when it has none (another server).
local function server_steps()
  local ok, text = pcall(function() return request("/metrics"):get_body_as_string(30) end)
  if not ok or not text:find("gptoss_step_host_seconds", 1, true) then return nil end
  local t = { host = 0, waited = 0, steps = 0 }
  for name, value in text:gmatch("\n(gptoss_step_%w+_seconds_%w+){[^}]*} (%S+)") do
    if name == "gptoss_step_host_seconds_sum" then t.host = t.host + tonumber(value)
    elseif name == "gptoss_step_waited_seconds_sum" then t.waited = t.waited + tonumber(value)
    elseif name == "gptoss_step_host_seconds_count" then t.steps = t.steps + tonumber(value) end
  end
  t.generated = tonumber(text:match("\ngptoss_generation_tokens_total (%S+)")) or 0
  return t
end

-- One streamed completion: {ttft =, latency =, itl = {gaps}, output = tokens}.
local function run_one(model, prompt, max_tokens)
  local started = gptoss.clock()
  local stream = request("/v1/completions", { model = model, prompt = prompt, max_tokens = max_tokens,
    temperature = 0, stream = true, stream_options = { include_usage = true } })
  local r, last, buffer = { itl = {}, output = 0 }, nil, ""
  while true do
    local chunk = stream:get_next_chunk(120)
    if not chunk then break end
    buffer = buffer .. chunk
    for event in buffer:gmatch("data: (.-)\n\n") do
      if event ~= "[DONE]" then
        local data = cjson.decode(event)
        local now = gptoss.clock()
        if data.choices[1] and data.choices[1].text ~= "" then
          if last then r.itl[#r.itl + 1] = now - last else r.ttft = now - started end
          last = now
        end
        if data.usage ~= cjson.null and data.usage then r.output = math.tointeger(data.usage.completion_tokens) end
      end
    end
    buffer = buffer:match(".*\n\n(.*)$") or buffer
  end
  r.latency = gptoss.clock() - started
  r.ttft = r.ttft or r.latency
  return r
end

script.run(function()
  local record = results.recorder(args.record)
  math.randomseed(args.seed)
  local cq = cqueues.new()
  local results, failures, in_flight, freed = {}, {}, 0, condition.new()
  local started, before
  cq:wrap(function()
    local model = args.model or cjson.decode(request("/v1/models"):get_body_as_string(30)).data[1].id
    before = server_steps()
    started = gptoss.clock()
    for i = 1, args.requests do
      local lengths = args.lengths == "fixed" and { args.input, args.output }
          or { lognormal(SHAREGPT.input), lognormal(SHAREGPT.output) }
      local prompt = {}
      for k = 1, lengths[1] do prompt[k] = math.random(0, PROMPT_IDS - 1) end
      while args.concurrency and in_flight >= args.concurrency do freed:wait() end
      in_flight = in_flight + 1
      cq:wrap(function()
        local ok, r = pcall(run_one, model, prompt, lengths[2])
        if ok then results[#results + 1] = r else failures[#failures + 1] = r end
        in_flight = in_flight - 1
        freed:signal()
      end)
      if args.rate < math.huge and i < args.requests then
        cqueues.sleep(-math.log(1 - math.random()) / args.rate)
      end
    end
  end)
  local ok, err = cq:loop()
  if not ok then error(err, 0) end
  local elapsed = gptoss.clock() - started
  if #failures > 0 then error(("%d of %d requests failed; the first: %s"):format(#failures, args.requests, failures[1]), 0) end
  local after
  cq:wrap(function() after = before and server_steps() end)
  assert(cq:loop())
  local ttft, tpot, itl, output = {}, {}, {}, 0
  for _, r in ipairs(results) do
    ttft[#ttft + 1], output = r.ttft, output + r.output
    if r.output > 1 then tpot[#tpot + 1] = (r.latency - r.ttft) / (r.output - 1) end
    table.move(r.itl, 1, #r.itl, #itl + 1, itl)
  end
  local report = { bench = "serve", url = args.url, requests = #results, rate = args.rate < math.huge and args.rate or "inf",
    concurrency = args.concurrency,
    lengths = args.lengths, elapsed = elapsed, output_tokens = output, request_per_s = #results / elapsed,
    output_tok_per_s = output / elapsed, ttft_ms = percentiles(ttft), tpot_ms = percentiles(tpot),
    itl_ms = percentiles(itl) }
  print(("%d requests in %.2f s: %.2f req/s, %.1f output tok/s"):format(#results, elapsed, report.request_per_s,
    report.output_tok_per_s))
  for _, m in ipairs { "ttft_ms", "tpot_ms", "itl_ms" } do
    local p = report[m]
    print(("%-8s p50 %9.2f   p90 %9.2f   p99 %9.2f"):format(m, p.p50, p.p90, p.p99))
  end
  if after then
    local steps = math.max(after.steps - before.steps, 1)
    report.server = { steps = after.steps - before.steps, host_ms_per_step = (after.host - before.host) * 1000 / steps,
      waited_ms_per_step = (after.waited - before.waited) * 1000 / steps,
      host_us_per_token = (after.host - before.host) * 1e6 / math.max(after.generated - before.generated, 1) }
    print(("server: %d steps, host %.3f ms a step (%.1f µs a generated id), waited %.3f ms a step"):format(
      report.server.steps, report.server.host_ms_per_step, report.server.host_us_per_token,
      report.server.waited_ms_per_step))
  end
  print(require("dkjson").encode(report))
  record({ report })
end)
