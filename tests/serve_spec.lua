-- gptoss serve through real clients: the official openai npm package (tests/serve-client,
-- npm ci there) and curl, against servers of the synthetic 7m model on the CPU, on loopback
-- ports chosen by the system. Every server is a child process (the clients block, the server
-- must not) stopped with SIGTERM; every client call is bounded by timeout(1).
local gptoss = require "gptoss"
local dkjson = require "dkjson"
local getp = require "gptoss.getp"
local valid_utf8 = require("gptoss.harmony_parser").valid_utf8
local H = require "helpers"
local SH = require "serve_helpers"

local q = H.shell_quote
local ROOT = SH.ROOT
local UNSANITIZED = SH.UNSANITIZED
local why_not_http = SH.why_not_http
local why_not = SH.why_not_client
local start, stop, kill_leftovers, curl, metric, metric_reaches, client = SH.start, SH.stop, SH.kill_leftovers,
  SH.curl, SH.metric, SH.metric_reaches, SH.client

-- gptoss bench_serve against s with words (a string): its report (the JSON line) and all it printed.
local function bench_serve(s, words)
  local cmd = ("cd %s && LUA_PATH=%s LUA_CPATH=%s timeout 120 %s bin/gptoss.lua bench_serve --url %s %s 2>&1"):format(
    q(ROOT), q(package.path), q(package.cpath), q(H.TREE.lua), q(("http://127.0.0.1:%d"):format(s.port)), words)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return dkjson.decode(out:match("[^\n]*\n?$")), out
end

local TOOLS = { { type = "function", ["function"] = { name = "get_weather", description = "The weather in a city.",
  parameters = { type = "object", properties = { city = { type = "string" } }, required = { "city" } } } } }

describe("gptoss serve", function()
  if why_not then
    pending(why_not)
    return
  end
  local s
  setup(function() s = start { "7m", "--port", "0", "--slots", "4", "--ctx", "256", "--max-body", "4096" } end)
  teardown(function() SH.teardown_server(s) end)
  after_each(H.cleanup)

  it("answers the openai client: models, chat streamed and not, completions", function()
    local models = client(s, "models")
    assert.are.equal("7m", models[1].id)
    local chat = { model = "7m", messages = { { role = "user", content = "Hello" } }, max_tokens = 6, seed = 5,
      temperature = 0.7 }
    local whole = client(s, "chat", chat)
    assert.are.equal("chat.completion", whole.object)
    assert.are.equal("length", whole.choices[1].finish_reason)
    assert.are.equal(6, whole.usage.completion_tokens)
    assert.is_true(whole.usage.prompt_tokens > 0)
    local chunks = client(s, "chat_stream", H.with(chat, { stream_options = { include_usage = true } }))
    local text = {}
    for _, c in ipairs(chunks) do
      for _, choice in ipairs(c.choices) do text[#text + 1] = choice.delta.content or "" end
    end
    -- the same seed gives the same text, streamed or not
    assert.are.equal(whole.choices[1].message.content or "", table.concat(text))
    assert.are.same(whole.usage, chunks[#chunks].usage)
    local done = client(s, "completion", { model = "7m", prompt = "Once upon a time", max_tokens = 5, temperature = 0 })
    assert.are.equal("text_completion", done.object)
    assert.are.equal(5, done.usage.completion_tokens)
    assert.is_string(done.choices[1].text)
  end)

  it("gives OpenAI error objects the client raises: unknown model 404, bad field 400", function()
    local e = client(s, "chat", { model = "gpt-4", messages = { { role = "user", content = "x" } } }).error
    assert.are.equal(404, e.status)
    assert.are.equal("model", e.param)
    e = client(s, "chat", { model = "7m", messages = { { role = "user", content = "x" } }, temperature = 3 }).error
    assert.are.same({ 400, "temperature", "invalid_request_error" }, { e.status, e.param, e.type })
    e = client(s, "completion", { model = "7m", prompt = "x", max_tokens = 1000 }).error
    assert.are.same({ 400, "max_tokens", "context_length_exceeded" }, { e.status, e.param, e.code })
    e = client(s, "chat", { model = "7m", messages = { { role = "user", content = "x" } },
      tool_choice = { type = "function", ["function"] = { name = "nope" } }, tools = TOOLS }).error
    assert.are.same({ 400, "tool_choice" }, { e.status, e.param })
  end)

  it("frames server-sent events as data: lines and ends them with data: [DONE]", function()
    local headers, body = curl(s, "/v1/completions", "-d " .. q('{"model":"7m","prompt":"Hi","max_tokens":3,"stream":true}'))
    assert.truthy(headers:find("content-type: text/event-stream", 1, true))
    local events = {}
    for event in body:gmatch("(.-)\n\n") do events[#events + 1] = event end
    assert.are.equal("data: [DONE]", events[#events])
    assert.are.equal(#body, #table.concat(events, "\n\n") + 2) -- nothing outside the events
    for i = 1, #events - 1 do
      local chunk = dkjson.decode(events[i]:match("^data: (.*)$"))
      assert.are.equal("text_completion", chunk.object)
    end
  end)

  it("refuses a malformed body with 400 and an oversized one with 413", function()
    local headers, body = curl(s, "/v1/chat/completions", "-d " .. q('{"model": "7m", "messages": ['))
    assert.truthy(headers:find("^HTTP/1.1 400"))
    assert.are.equal("invalid_request_error", dkjson.decode(body).error.type)
    headers, body = curl(s, "/v1/completions", "-d " .. q(('{"model":"7m","prompt":"%s"}'):format(("x"):rep(5000))))
    assert.truthy(headers:find("^HTTP/1.1 413"))
    assert.truthy(dkjson.decode(body).error.message:find("4096 bytes", 1, true))
    headers = curl(s, "/v1/nothing")
    assert.truthy(headers:find("^HTTP/1.1 404"))
  end)

  -- The two disconnect specs run over the fake replica at 20 ms a step (tests/serve_scripted.lua),
  -- which never draws a stop id: 250 ids take 5 s whatever the machine's load (the 7m model on
  -- the CPU took 0.7 s on an idle machine, and could draw a stop id early).
  it("frees the slot of a client that goes away mid-stream", function()
    local f = start({ "--unscripted", "--delay", "0.02" }, "tests/serve_scripted.lua")
    curl(f, "/v1/completions", "-m 1 -d " .. q('{"model":"scripted","prompt":"Hi","max_tokens":250,"stream":true}'))
    assert.are.equal(0, metric_reaches(f, "gptoss_slots_in_use", 0))
    assert.truthy(H.read_file(f.log):find("the client went away", 1, true))
    local generated = metric(f, "gptoss_generation_tokens_total")
    assert.is_true(generated < 250, ("the sequence ran on: %d tokens"):format(generated))
    assert.are.equal(0, stop(f))
  end)

  it("frees the slot of a client that goes away while it waits for a whole answer, and goes on answering", function()
    local f = start({ "--unscripted", "--delay", "0.02" }, "tests/serve_scripted.lua")
    local function went_away()
      local n = 0
      for _ in H.read_file(f.log):gmatch("the client went away") do n = n + 1 end
      return n
    end
    local before, logged = metric(f, "gptoss_generation_tokens_total"), went_away()
    -- a client of our own, which hangs up once its request runs
    local client_socket = require("cqueues.socket").connect("127.0.0.1", f.port)
    client_socket:setmode("b", "b") -- the CRLFs as written
    local body = '{"model":"scripted","prompt":"Hi","max_tokens":250}'
    client_socket:write(("POST /v1/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
      .. "content-length: %d\r\n\r\n%s"):format(#body, body))
    client_socket:flush()
    assert.are.equal(1, metric_reaches(f, "gptoss_slots_in_use", 1))
    client_socket:close()
    assert.are.equal(0, metric_reaches(f, "gptoss_slots_in_use", 0))
    assert.are.equal(logged + 1, went_away())
    local generated = metric(f, "gptoss_generation_tokens_total") - before
    assert.is_true(generated < 250, ("the sequence ran on: %d tokens"):format(generated))
    local headers, answer = curl(f, "/v1/completions", "-d " .. q('{"model":"scripted","prompt":"Hi","max_tokens":2}'))
    assert.truthy(headers:find("^HTTP/1.1 200"), headers)
    assert.are.equal(2, dkjson.decode(answer).usage.completion_tokens)
    assert.are.equal(0, stop(f))
  end)

  it("gives n seeded choices the answers of n requests of seeds seed, seed + 1, ..., prefilling the prompt once",
    function()
    local prompt = {}
    for i = 1, 30 do prompt[i] = 1000 + 7 * i end
    local function answer(fields)
      local _, body = curl(s, "/v1/completions", "-d " .. q(dkjson.encode(H.with({ model = "7m", prompt = prompt,
        max_tokens = 6, temperature = 0.9 }, fields))))
      return dkjson.decode(body).choices
    end
    local function prefill_rows() return metric(s, "gptoss_prefill_rows_total") end
    local at = prefill_rows()
    local together = answer { n = 3, seed = 41 }
    local fed_together = prefill_rows() - at
    at = prefill_rows()
    for i = 1, 3 do
      local alone = answer { seed = 41 + i - 1 }
      assert.are.equal(alone[1].text, together[i].text, "choice " .. i)
      assert.are.equal(alone[1].finish_reason, together[i].finish_reason, "choice " .. i)
    end
    local fed_alone = prefill_rows() - at
    -- alone, each feeds the whole prompt; together, choices 2 and 3 fork choice 1's and feed
    -- only its last token
    assert.are.same({ 3 * #prompt, #prompt + 2 }, { fed_alone, fed_together })
  end)

  it("counts what it answered in /metrics", function()
    local function count(endpoint, status)
      return metric(s, ('gptoss_requests_total{endpoint="%s",status="%s"}'):format(endpoint, status)) or 0
    end
    local ok, bad = count("/v1/completions", "200"), count("/v1/completions", "400")
    for _ = 1, 3 do curl(s, "/v1/completions", "-d " .. q('{"model":"7m","prompt":"Hi","max_tokens":2}')) end
    curl(s, "/v1/completions", "-d " .. q('{"model":"7m","prompt":"Hi","n":0}'))
    local unknown = count("other", "404")
    curl(s, "/no/such/path")
    assert.are.same({ ok + 3, bad + 1, unknown + 1 },
      { count("/v1/completions", "200"), count("/v1/completions", "400"), count("other", "404") })
    assert.truthy(select(2, curl(s, "/metrics")):find("gptoss_time_to_first_token_seconds_count", 1, true))
  end)

  it("is measured by examples/bench_serve.lua: one JSON line with latencies and throughput", function()
    local report, out = bench_serve(s, "--requests 5 --concurrency 2 --lengths fixed --input 6 --output 4")
    assert.are.same({ 5, 20, 2 }, { report.requests, report.output_tokens, report.concurrency }, out)
    for _, m in ipairs { "ttft_ms", "tpot_ms", "itl_ms" } do
      assert.is_true(report[m].p50 >= 0 and report[m].p50 <= report[m].p90 and report[m].p90 <= report[m].p99, m)
    end
    assert.is_true(report.output_tok_per_s > 0)
  end)

  it("sends bench_serve's --chat-fraction as chats of one-token words; --json-schema's answers are JSON", function()
    -- its own server: a schema's section in the prompt needs more context than s has, and the
    -- fake replica of tests/serve_scripted.lua draws its ids without the grammar
    local wide = start { "7m", "--port", "0", "--slots", "8", "--ctx", "1024" }
    local load = "--requests 8 --lengths fixed --input 20 --output 300 --seed 3 --chat-fraction 0.5"
    local with, out = bench_serve(wide, load .. " --json-schema typical")
    assert.are.same({ 8, 0.5, "typical" }, { with.requests, with.chat_fraction, with.json_schema }, out)
    local chats, outputs = with.chat_requests, with.schema_outputs
    assert.is_true(chats >= 1 and chats < 8, out)
    assert.are.equal(chats, outputs.finished + outputs.cut, out)
    assert.are.same({ outputs.finished, true }, { outputs.valid_json, outputs.finished >= 1 }, out)
    local line = ("chat: %d of 8 requests (--chat-fraction 0.5), json_schema typical: %d finished, %d of them valid JSON; "
      .. "%d cut by max_tokens"):format(chats, outputs.finished, outputs.valid_json, outputs.cut)
    assert.truthy(out:find(line, 1, true), out)
    -- the same seed draws the same requests without the schema, whose section was in each chat's prompt
    local without
    without, out = bench_serve(wide, load)
    assert.are.same({ chats, false }, { without.chat_requests, without.json_schema }, out)
    assert.is_nil(without.schema_outputs)
    line = ("chat: %d of 8 requests (--chat-fraction 0.5), no response_format"):format(chats)
    assert.truthy(out:find(line, 1, true), out)
    assert.are.equal(0, (with.input_tokens - without.input_tokens) % chats)
    assert.is_true(with.input_tokens > without.input_tokens)
    -- a schema file, sent as its text is
    local file = H.tmp()
    H.write_file(file, '{"type":"object","additionalProperties":false,"required":["zeta","alpha"],'
      .. '"properties":{"zeta":{"type":"boolean"},"alpha":{"enum":["a","b"]}}}')
    local small = bench_serve(wide, "--requests 2 --lengths fixed --input 8 --output 40 --chat-fraction 1 "
      .. "--json-schema " .. q(file))
    assert.are.same({ finished = 2, valid_json = 2, cut = 0 }, small.schema_outputs)
    -- every word is one token: 20 more words a message are 20 more prompt tokens a chat
    local short = bench_serve(wide, "--requests 4 --lengths fixed --input 20 --output 4 --chat-fraction 1")
    local long = bench_serve(wide, "--requests 4 --lengths fixed --input 40 --output 4 --chat-fraction 1")
    assert.are.same({ 4, 4, 4 * 20 },
      { short.chat_requests, long.chat_requests, long.input_tokens - short.input_tokens })
    assert.are.equal(0, stop(wide))
  end)

  it("gives 32 concurrent seeded requests the ids getp gives the same prompts", function()
    local tok = gptoss.tokenizer()
    local prompts, requests = {}, {}
    for i = 1, 32 do
      prompts[i] = ("Request number %d asks about %s."):format(i, ("things "):rep(i % 5 + 1))
      requests[i] = { model = "7m", prompt = getp.prompt_ids(tok, prompts[i], false, 4096), max_tokens = 12,
        temperature = 0.8, seed = 100 + i - 1 }
    end
    local answers = client(s, "concurrent_completions", { requests = requests })
    local result = getp.run { model = gptoss.synthetic("7m"), tokenizer = tok, devices = { "cpu" }, steps = 64,
      sampling = { temperature = 0.8, top_p = 1, seed = 100 }, requests = prompts }
    -- getp's first 12 ids up to a stop id, as the server's streaming decoder writes them (an
    -- invalid byte as U+FFFD: JSON strings are UTF-8)
    for i, out in ipairs(result.outputs) do
      local d, text = tok:decoder(), {}
      for k, id in ipairs(out) do
        if id == 199999 or id == 200002 or id == 200012 or k > 12 then break end
        text[#text + 1] = d:add(id)
      end
      text[#text + 1] = d:flush()
      assert.are.equal(valid_utf8(table.concat(text)), answers[i].choices[1].text, "request " .. i)
    end
  end)
end)

describe("gptoss serve's limits", function()
  if why_not then
    pending(why_not)
    return
  end
  after_each(H.cleanup)
  teardown(kill_leftovers)

  it("answers 429 with Retry-After when the queue is full, 401 without the key", function()
    local s = start { "7m", "--port", "0", "--slots", "1", "--max-queue", "1", "--ctx", "1024", "--api-key", "sesame" }
    -- seconds on a busy machine; the stop ids barred, so that neither ends early
    local long = q('{"model":"7m","prompt":"Hi","max_tokens":1000,"stream":true,'
      .. '"logit_bias":{"199999":-100,"200002":-100,"200012":-100}}')
    local auth = "-H 'Authorization: Bearer sesame' "
    local function long_stream()
      os.execute(("timeout 60 " .. UNSANITIZED .. "curl -sN %s-d %s http://127.0.0.1:%d/v1/completions >/dev/null &")
        :format(auth, long, s.port))
    end
    -- the second only once the first holds the slot: arriving together, both would wait, and the
    -- second find the queue of one full
    long_stream()
    assert.are.equal(1, metric_reaches(s, "gptoss_slots_in_use", 1), "the first long stream never took the slot")
    long_stream()
    -- one runs in the slot, one waits: the queue is full
    assert.are.equal(1, metric_reaches(s, "gptoss_queue_length", 1),
      "the second long stream never waited in the queue")
    local headers = curl(s, "/v1/completions", auth .. "-d " .. q('{"model":"7m","prompt":"Hi","max_tokens":1}'))
    assert.truthy(headers:find("^HTTP/1.1 429"))
    assert.truthy(headers:lower():find("retry%-after: 1"))
    local e = client(s, "models", nil, "wrong").error
    assert.are.same({ 401, "invalid_api_key" }, { e.status, e.code })
    assert.are.equal("7m", client(s, "models", nil, "sesame")[1].id)
    assert.are.equal(0, stop(s)) -- SIGTERM: the two long streams finish, then it exits 0
  end)

  it("round-trips a tool call through the openai client (a scripted model)", function()
    local s = start({}, "tests/serve_scripted.lua")
    local r = client(s, "tool_round_trip", { model = "scripted", max_tokens = 100, temperature = 0,
      messages = { { role = "user", content = "What is the weather in Paris?" } }, tools = TOOLS })
    assert.are.equal("tool_calls", r.first.choices[1].finish_reason)
    assert.are.equal("get_weather", r.first.choices[1].message.tool_calls[1]["function"].name)
    assert.are.same({ city = "Paris" }, r.args)
    assert.are.equal("It is sunny in Paris.", r.second.choices[1].message.content)
    assert.are.equal("The tool says sunny.", r.second.choices[1].message.reasoning_content)
    assert.are.equal("stop", r.second.choices[1].finish_reason)
    assert.are.equal(0, stop(s))
  end)
end)

describe("gptoss serve over a fake replica (tests/serve_scripted.lua --unscripted)", function()
  if why_not_http then
    pending(why_not_http)
    return
  end
  after_each(H.cleanup)
  teardown(kill_leftovers)

  it("streams the text a whole answer has, one chunk of OpenAI's shape an event, its text escaped", function()
    local s = start({ "--unscripted" }, "tests/serve_scripted.lua")
    local body = '{"model":"scripted","prompt":[1,2,3],"max_tokens":40%s}'
    local text = dkjson.decode(select(2, curl(s, "/v1/completions", "-d " .. q(body:format(""))))).choices[1].text
    -- the fake's text has quotes, a backslash and a newline to escape
    assert.truthy(text:find('"quotes" \\ backslashes', 1, true) and text:find("\n", 1, true), text)
    local _, streamed = curl(s, "/v1/completions", "-d " .. q(body:format(',"stream":true')))
    for _, escaped in ipairs { '"text":"\\""', '"text":" \\\\"', '"text":".\\n"' } do
      assert.truthy(streamed:find(escaped, 1, true), escaped)
    end
    local parts, last = {}, nil
    for event in streamed:gmatch("data: (.-)\n\n") do
      if event ~= "[DONE]" then
        local head = '^{"id":"cmpl%-%d+","object":"text_completion","created":%d+,"model":"scripted",'
        assert.truthy(event:find(head), event)
        last = dkjson.decode(event).choices
        assert.are.same({ 1, 0 }, { #last, last[1].index })
        parts[#parts + 1] = last[1].text
      end
    end
    assert.are.equal("length", last[1].finish_reason)
    assert.are.equal(text, table.concat(parts))
    assert.are.equal(0, stop(s))
  end)

  it("answers Expect: 100-continue at once, ignores it from HTTP/1.0 and answers any other with 417", function()
    local s = start({ "--unscripted" }, "tests/serve_scripted.lua")
    local ids = {}
    for i = 1, 400 do ids[i] = i end
    local file = H.tmp()
    H.write_file(file, dkjson.encode { model = "scripted", prompt = ids, max_tokens = 2, stream = true })
    assert.is_true(#H.read_file(file) > 1024) -- curl too would ask to wait for 100 Continue
    local function post(expect, extra)
      return curl(s, "/v1/completions", ("-H %s --data-binary @%s -w 'first byte after %%{time_starttransfer} s' %s")
        :format(q("Expect: " .. expect), q(file), extra or ""))
    end
    local headers, out = post("100-continue")
    assert.truthy(headers:find("^HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"), headers)
    local waited = tonumber(out:match("first byte after (%S+) s"))
    assert.is_true(waited < 0.5, ("the first token came after %.3f s"):format(waited))
    headers, out = post("100-continue", "--http1.0")
    assert.truthy(headers:find("^HTTP/1.0 200"), headers)
    -- its events come unframed (HTTP/1.0 has no chunks), whole to the last
    assert.truthy(out:find("^data: {") and out:find("\n\ndata: [DONE]\n\n", 1, true), out)
    headers, out = post("a-pony")
    assert.truthy(headers:find("^HTTP/1.1 417"), headers)
    assert.truthy(out:find("Expect: a-pony", 1, true), out)
    assert.are.equal(0, stop(s))
  end)

  it("times each step's host work and wait: in /metrics, bench_serve's report and the log at shutdown", function()
    local s = start({ "--unscripted", "--slots", "257", "--delay", "0.02" }, "tests/serve_scripted.lua")
    local report, out = bench_serve(s, "--requests 256 --lengths fixed --input 14 --output 20")
    assert.are.equal(256 * 20, report.output_tokens, out)
    local server = report.server
    assert.are.equal(metric(s, 'gptoss_step_host_seconds_count{replica="1"}'), server.steps)
    assert.is_true(server.steps >= 20, out)
    -- a loose bound that catches a regression, not the bar: the fake device's 20 ms a step
    -- are mostly waited for
    assert.is_true(server.host_us_per_token > 0 and server.host_us_per_token < 1000, out)
    assert.is_true(server.waited_ms_per_step > 0, out)
    -- the rows a step: every id generated, every prompt token the fake replica was fed
    assert.is_true(math.abs(server.generated_per_step * server.steps - 256 * 20) < 1e-6, out)
    assert.is_true(math.abs(server.prefill_rows_per_step * server.steps - metric(s, "gptoss_prefill_rows_total")) < 1e-6,
      out)
    assert.truthy(out:find("server: %d+ steps, host [%d.]+ ms a step %([%d.]+ µs a generated id%), waited [%d.]+ ms "
      .. "a step; rows a step: [%d.]+ generated, [%d.]+ prompt"), out)
    local code, log = stop(s)
    assert.are.equal(0, code)
    assert.truthy(log:find("replica 1: %d+ steps, 5120 ids; host [%d.]+ ms a step %([%d.]+ µs an id%), waited"), log)
  end)
end)

describe("gptoss bench_serve's options", function()
  after_each(H.cleanup)

  it("refuses a --chat-fraction out of 0..1 and a --json-schema that is not a JSON object's file, naming them",
    function()
      local run = H.runner("examples/bench_serve.lua", pending)
      local not_json, array = H.tmp(), H.tmp()
      H.write_file(not_json, "{\"type\": ")
      H.write_file(array, "[{\"type\": \"object\"}]")
      H.expect_exits(run, 1, {
        { { "--chat-fraction", "1.5" }, "--chat-fraction: '1.5' is not a number in [0, 1]" },
        { { "--chat-fraction=-0.1" }, "--chat-fraction: '-0.1' is not a number in [0, 1]" },
        { { "--chat-fraction", "half" }, "--chat-fraction: 'half' is not a number in [0, 1]" },
        { { "--chat-fraction", "0.5", "--json-schema", "/no/such/schema.json" },
          "--json-schema: cannot open '/no/such/schema.json': No such file or directory" },
        { { "--chat-fraction", "0.5", "--json-schema", not_json },
          ("--json-schema: '%s' is not JSON: "):format(not_json) },
        { { "--chat-fraction", "0.5", "--json-schema", array },
          ("--json-schema: '%s' is not a JSON object (a schema is one)"):format(array) },
        { { "--json-schema", "typical" }, "--json-schema: only chat requests carry it: give --chat-fraction above 0" },
      }, "Usage: bench_serve.lua")
    end)
end)
