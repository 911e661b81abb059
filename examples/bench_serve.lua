#!/usr/bin/env lua5.4
-- A load generator for an OpenAI-compatible server (gptoss serve, or any other), as vLLM's
-- `bench serve` reports: N streamed completions sent at a Poisson rate or at a fixed
-- concurrency, each a prompt of random token ids and a max_tokens drawn from a length
-- distribution; prints TTFT, TPOT and inter-token latency (p50, p90, p99, ms), request and
-- output token throughput, and one JSON line; --record appends it to examples/results.jsonl
-- with this host for the machine (run it beside the server; gptoss.results).
--   gptoss bench_serve [--url http://127.0.0.1:8000] [--requests 1000] [--rate inf | --concurrency N]
--                      [--lengths sharegpt | fixed] [--input N --output N] [--seed S] [--api-key KEY]
--                      [--chat-fraction F [--json-schema FILE | typical]] [--record]
-- Lengths (--lengths sharegpt, the default): input and output token counts drawn from
-- lognormal distributions whose means are those of vLLM's ShareGPT benchmark (ShareGPT_V3's
-- conversations as it samples them: input about 220 tokens, output about 200), sigma 0.8 for
-- input and 0.7 for output, each clamped to 4..(--max-len) tokens; --lengths fixed sends
-- --input and --output exactly. The server may stop a request before its max_tokens (a stop
-- id): output throughput counts what came back (the usage the server reports).
-- --chat-fraction F sends that share of the requests, drawn with the seed, as streamed chat
-- completions (their text and the counting: the option's help), carrying --json-schema's
-- response_format when it is given, so that runs with and without it send the same load.
-- When the server's /metrics has gptoss serve's step histograms, it also prints the
-- server's host and waited ms a step over the run, its host µs a generated id and its rows a step.
-- Exit status 1 when a request fails or the server cannot be reached, with one message.
local argparse = require "argparse"
local bench_requests = require "gptoss.bench_requests"
local cjson = require "cjson"
local cmdline = require "gptoss.cmdline"
local cqueues = require "cqueues"
local condition = require "cqueues.condition"
local files = require "gptoss.files"
local gptoss = require "gptoss"
local results = require "gptoss.results"
local script = require "gptoss.script"
require "gptoss.serve_http" -- lua-http on Lua 5.4's path (its header says why)
local http_request = require "http.request"

local parser = argparse(script.name, "Load an OpenAI-compatible server with streamed completions, a share of them chat "
  .. "completions with a JSON schema or without (docs/serve.md).")
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
parser:option("--chat-fraction", "The share of the requests (each drawn with --seed) sent as streamed chat "
  .. "completions: one user message of as many words as the drawn input length, each word one o200k token "
  .. "(the message is exactly that many tokens; the chat template adds about 60 of its own, a schema's "
  .. "section more), max_tokens the drawn output length, temperature 0, reasoning_effort none (below). "
  .. "Their TTFT, TPOT and ITL count from the first and each later delta with content or reasoning text "
  .. "(gptoss serve streams no reasoning under reasoning_effort none), their output tokens from the usage.", "0")
  :convert(cmdline.number("--chat-fraction", 0, 1))
parser:option("--json-schema", "The chat requests carry response_format json_schema (strict) with the "
  .. "schema in FILE (a JSON object), or with typical: a built-in one of 10 properties (strings with "
  .. "maxLength, an enum, bounded integers, a bounded array, one nested object). All chat requests send "
  .. "reasoning_effort none, with a schema or without: gptoss serve then opens the final channel at once, so "
  .. "every token of a schema's answer is drawn under its grammar and none goes to an analysis channel, and "
  .. "a run without the schema differs from one with it in the response_format alone.")
  :argname("<FILE | typical>")
results.add_option(parser)
local args = script.parse(parser)

-- --json-schema's value as the response_format's JSON text: {source =, format =}; a usage
-- error naming the problem for a file that cannot be read or does not hold a JSON object.
local function response_format(source)
  local name, text = "typical", bench_requests.TYPICAL_SCHEMA
  if source ~= "typical" then
    local ok, read = pcall(files.read, "--json-schema", source)
    if not ok then script.usage_error(parser, read) end
    local parsed, why = pcall(cjson.decode, read)
    if not parsed then script.usage_error(parser, ("--json-schema: '%s' is not JSON: %s"):format(source, why)) end
    if not read:find("^%s*{") then
      script.usage_error(parser, ("--json-schema: '%s' is not a JSON object (a schema is one)"):format(source))
    end
    -- OpenAI's names are [a-zA-Z0-9_-]{1,64}: the file's name made one
    name, text = source:match("([^/]*)$"):gsub("%.json$", ""):gsub("[^%w_-]", "_"):sub(1, 64), read
    if name == "" then name = "schema" end
  end
  return { source = source, format = bench_requests.response_format(name, text) }
end
if args.json_schema and args.chat_fraction == 0 then
  script.usage_error(parser, "--json-schema: only chat requests carry it: give --chat-fraction above 0")
end
local schema = args.json_schema and response_format(args.json_schema)

local function percentiles(list)
  table.sort(list)
  local function at(p) return #list > 0 and list[math.max(1, math.ceil(p / 100 * #list))] * 1000 or 0 end
  return { p50 = at(50), p90 = at(90), p99 = at(99) }
end

local key = args.api_key or os.getenv("GPTOSS_API_KEY")

-- The server's answer to a GET of path, or to a POST of body (JSON text); raises naming the
-- URL and the status unless it is 200.
local function request(path, body)
  local req = http_request.new_from_uri(args.url .. path)
  if key then req.headers:upsert("authorization", "Bearer " .. key) end
  if body then
    req.headers:upsert(":method", "POST")
    req.headers:upsert("content-type", "application/json")
    req:set_body(body)
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

-- The server's step figures from /metrics: {host =, waited =, steps =, generated =, prefilled =} summed
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
  t.prefilled = tonumber(text:match("\ngptoss_prefill_rows_total (%S+)")) or 0
  return t
end

-- A streamed event's string field (a text, a finish_reason), or nil when it is empty or null.
local function text_of(v)
  return type(v) == "string" and v ~= "" and v or nil
end

-- One streamed request (body: JSON text) to path: {ttft =, latency =, itl = {gaps}, output =
-- tokens, input = prompt tokens, content = its text, finish = finish_reason}. A chat delta's
-- reasoning times like its content; only the content is kept.
local function run_one(path, body)
  local started = gptoss.clock()
  local stream = request(path, body)
  local r, last, buffer, content = { itl = {}, output = 0, input = 0 }, nil, "", {}
  while true do
    local chunk = stream:get_next_chunk(120)
    if not chunk then break end
    buffer = buffer .. chunk
    for event in buffer:gmatch("data: (.-)\n\n") do
      if event ~= "[DONE]" then
        local data = cjson.decode(event)
        local now = gptoss.clock()
        local choice = data.choices[1]
        if choice then
          local delta = choice.delta or choice -- a completion's choice holds its text itself
          local text = text_of(delta.content) or text_of(delta.text)
          if text or text_of(delta.reasoning_content) or text_of(delta.reasoning) then
            if last then r.itl[#r.itl + 1] = now - last else r.ttft = now - started end
            last = now
          end
          content[#content + 1] = text
          r.finish = text_of(choice.finish_reason) or r.finish
        end
        if data.usage ~= cjson.null and data.usage then
          r.output, r.input = math.tointeger(data.usage.completion_tokens), math.tointeger(data.usage.prompt_tokens)
        end
      end
    end
    buffer = buffer:match(".*\n\n(.*)$") or buffer
  end
  r.latency = gptoss.clock() - started
  r.ttft = r.ttft or r.latency
  r.content = table.concat(content)
  return r
end

-- Adds the chat requests' figures to report and prints them: how many went as chat and, with
-- a schema, how many of them finished (the grammar's end), parsed as JSON, or were cut by max_tokens.
local function chat_figures(report, done)
  report.chat_fraction, report.json_schema = args.chat_fraction, schema and schema.source or false
  if args.chat_fraction == 0 then return end
  local chats, outputs = 0, { finished = 0, valid_json = 0, cut = 0 }
  for _, r in ipairs(done) do
    if r.chat then
      chats = chats + 1
      if r.finish == "length" then
        outputs.cut = outputs.cut + 1
      elseif r.finish == "stop" then
        outputs.finished = outputs.finished + 1
        if pcall(cjson.decode, r.content) then outputs.valid_json = outputs.valid_json + 1 end
      end
    end
  end
  report.chat_requests = chats
  local line = ("chat: %d of %d requests (--chat-fraction %g), "):format(chats, #done, args.chat_fraction)
  if not schema then return print(line .. "no response_format") end
  report.schema_outputs = outputs
  print(line .. ("json_schema %s: %d finished, %d of them valid JSON; %d cut by max_tokens"):format(schema.source,
    outputs.finished, outputs.valid_json, outputs.cut))
end

script.run(function()
  local record = results.recorder(args.record)
  math.randomseed(args.seed)
  local cq = cqueues.new()
  local done, failures, in_flight, freed = {}, {}, 0, condition.new()
  local started, before
  cq:wrap(function()
    local model = args.model or cjson.decode(request("/v1/models"):get_body_as_string(30)).data[1].id
    before = server_steps()
    started = gptoss.clock()
    for i = 1, args.requests do
      local path, body, chat = bench_requests.draw { model = model, lengths = args.lengths, input = args.input,
        output = args.output, max_len = args.max_len, chat_fraction = args.chat_fraction,
        response_format = schema and schema.format }
      while args.concurrency and in_flight >= args.concurrency do freed:wait() end
      in_flight = in_flight + 1
      cq:wrap(function()
        local ok, r = pcall(run_one, path, body)
        if ok then
          r.chat, done[#done + 1] = chat, r
        else
          failures[#failures + 1] = r
        end
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
  if #failures > 0 then
    error(("%d of %d requests failed; the first: %s"):format(#failures, args.requests, failures[1]), 0)
  end
  local after
  cq:wrap(function() after = before and server_steps() end)
  assert(cq:loop())
  local ttft, tpot, itl, output, input = {}, {}, {}, 0, 0
  for _, r in ipairs(done) do
    ttft[#ttft + 1], output, input = r.ttft, output + r.output, input + r.input
    if r.output > 1 then tpot[#tpot + 1] = (r.latency - r.ttft) / (r.output - 1) end
    table.move(r.itl, 1, #r.itl, #itl + 1, itl)
  end
  local report = { bench = "serve", url = args.url, requests = #done,
    rate = args.rate < math.huge and args.rate or "inf", concurrency = args.concurrency, lengths = args.lengths,
    elapsed = elapsed, input_tokens = input, output_tokens = output, request_per_s = #done / elapsed,
    output_tok_per_s = output / elapsed, ttft_ms = percentiles(ttft), tpot_ms = percentiles(tpot),
    itl_ms = percentiles(itl) }
  print(("%d requests in %.2f s: %.2f req/s, %.1f output tok/s"):format(#done, elapsed, report.request_per_s,
    report.output_tok_per_s))
  for _, m in ipairs { "ttft_ms", "tpot_ms", "itl_ms" } do
    local p = report[m]
    print(("%-8s p50 %9.2f   p90 %9.2f   p99 %9.2f"):format(m, p.p50, p.p90, p.p99))
  end
  chat_figures(report, done)
  if after then
    local steps = math.max(after.steps - before.steps, 1)
    report.server = { steps = after.steps - before.steps, host_ms_per_step = (after.host - before.host) * 1000 / steps,
      waited_ms_per_step = (after.waited - before.waited) * 1000 / steps,
      host_us_per_token = (after.host - before.host) * 1e6 / math.max(after.generated - before.generated, 1),
      generated_per_step = (after.generated - before.generated) / steps,
      prefill_rows_per_step = (after.prefilled - before.prefilled) / steps }
    print(("server: %d steps, host %.3f ms a step (%.1f µs a generated id), waited %.3f ms a step; rows a step: "
      .. "%.1f generated, %.1f prompt"):format(report.server.steps, report.server.host_ms_per_step,
      report.server.host_us_per_token, report.server.waited_ms_per_step, report.server.generated_per_step,
      report.server.prefill_rows_per_step))
  end
  print(require("dkjson").encode(report))
  record({ report })
end)
