-- gptoss serve's surface for what every OpenAI client sends, through the openai npm client
-- and curl against child servers (tests/serve_helpers.lua): unknown fields ignored and
-- logged once, a logprob entry for every token returned (whole and streamed), GET
-- /v1/models/{id}, the access log, CORS, a burst past --max-queue admitted while slots are
-- free, and a streamed client that leaves counted as 499.
local dkjson = require "dkjson"
local valid_utf8 = require("gptoss.harmony_parser").valid_utf8
local H = require "helpers"
local SH = require "serve_helpers"

local q = H.shell_quote
local start, stop, kill_leftovers, curl, metric, metric_reaches, client = SH.start, SH.stop, SH.kill_leftovers,
  SH.curl, SH.metric, SH.metric_reaches, SH.client

-- How many times plain text is in text.
local function count(text, plain)
  return select(2, text:gsub(plain:gsub("%p", "%%%0"), ""))
end

describe("gptoss serve's surface", function()
  if SH.why_not_client then return pending(SH.why_not_client) end
  local s
  setup(function() s = start { "7m", "--port", "0", "--slots", "4", "--ctx", "256" } end)
  teardown(function() SH.teardown_server(s) end)
  after_each(H.cleanup)

  local CHAT = { model = "7m", messages = { { role = "user", content = "Hello" } }, max_tokens = 8, seed = 5 }

  it("ignores unknown fields, logging each name once, and still refuses a known field of a wrong type", function()
    local body = H.with(CHAT, { store = false, metadata = { k = "v" }, service_tier = "auto", user = "me",
      prompt_cache_key = "c", parallel_tool_calls = true, reasoning_effort = "minimal", top_k = 20, min_p = 0.01,
      stop = { "a1", "a2", "a3", "a4", "a5" } })
    for _ = 1, 2 do assert.are.equal("chat.completion", client(s, "chat", body).object) end
    local log = H.read_file(s.log)
    for _, name in ipairs { "store", "metadata", "service_tier", "prompt_cache_key" } do
      assert.are.equal(1, count(log, ("ignoring the unknown field '%s'"):format(name)), name)
    end
    assert.are.equal(0, count(log, "unknown field 'user'"))
    local e = client(s, "chat", H.with(body, { parallel_tool_calls = "yes" })).error
    assert.are.same({ 400, "parallel_tool_calls" }, { e.status, e.param })
    e = client(s, "chat", H.with(body, { frequency_penalty = -3 })).error
    assert.are.same({ 400, "frequency_penalty" }, { e.status, e.param })
  end)

  it("gives every token returned its logprob entry, each streamed chunk those of the text it carries", function()
    local whole = client(s, "chat", H.with(CHAT, { logprobs = true, top_logprobs = 2 }))
    local entries = whole.choices[1].logprobs.content
    assert.are.equal(whole.usage.completion_tokens, #entries)
    for _, e in ipairs(entries) do
      assert.are.same({ "string", "number", "table", 2 }, { type(e.token), type(e.logprob), type(e.bytes),
        #e.top_logprobs })
    end
    local chunks = client(s, "chat_stream", H.with(CHAT, { logprobs = true, stream_options = { include_usage = true } }))
    local streamed = {}
    for _, c in ipairs(chunks) do
      local choice = c.choices[1]
      local lp = choice and choice.logprobs and choice.logprobs.content or {}
      local pieces = {}
      for _, e in ipairs(lp) do
        pieces[#pieces + 1] = e.token
        streamed[#streamed + 1] = e
      end
      -- the random 7m writes no harmony header: its every token is content
      if choice and choice.delta.content and choice.delta.content ~= "" then
        assert.are.equal(choice.delta.content, valid_utf8(table.concat(pieces)))
      end
    end
    assert.are.equal(chunks[#chunks].usage.completion_tokens, #streamed)
    for i, e in ipairs(streamed) do assert.are.same({ entries[i].token, entries[i].logprob }, { e.token, e.logprob }) end
  end)

  it("answers GET /v1/models/{id}, 404 for another id, and logs a line a request", function()
    local m = client(s, "model", { id = "7m" })
    assert.are.same({ "7m", "model", 256 }, { m.id, m.object, m.max_model_len })
    assert.are.same({ 404, "model_not_found" }, { client(s, "model", { id = "gpt-4" }).error.status,
      client(s, "model", { id = "gpt-4" }).error.code })
    local headers = curl(s, "/v1/models/7m", "-X DELETE")
    assert.truthy(headers:find("^HTTP/1.1 405") and headers:find("allow: GET, HEAD"), headers)
    assert.is_nil(headers:find("access-control", 1, true)) -- no origin given, no CORS
    curl(s, "/v1/completions", "-d " .. q('{"model":"7m","prompt":"Hi","max_tokens":3}'))
    local line = "POST /v1/completions 200, 1 tokens in, 3 out, [%d.]+ ms\n"
    local log = SH.log_reaches(s, line)
    assert.truthy(log:find(line), log)
    assert.truthy(log:find("GET /v1/models/gpt%-4 404, 0 tokens in, 0 out, [%d.]+ ms\n"), log)
  end)
end)

describe("gptoss serve --max-queue, --cors-origin and --quiet", function()
  if SH.why_not_client then return pending(SH.why_not_client) end
  after_each(H.cleanup)
  teardown(kill_leftovers)

  it("admits more concurrent requests than --max-queue while slots are free; answers CORS preflights", function()
    local s = start { "7m", "--port", "0", "--slots", "6", "--ctx", "128", "--max-queue", "1", "--quiet",
      "--cors-origin", "https://app.example" }
    local requests = {}
    for i = 1, 6 do requests[i] = { model = "7m", prompt = "Hi " .. i, max_tokens = 3, seed = i } end
    local answers = client(s, "concurrent_completions", { requests = requests })
    assert.is_nil(answers.error, dkjson.encode(answers.error))
    assert.are.equal(6, #answers)
    local headers = curl(s, "/v1/chat/completions", "-X OPTIONS -H 'Origin: https://app.example' "
      .. "-H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type'")
    for _, line in ipairs { "^HTTP/1.1 204", "\naccess%-control%-allow%-origin: https://app.example\r",
      "\naccess%-control%-allow%-methods: OPTIONS, POST\r", "\naccess%-control%-allow%-headers: authorization, content%-type\r" } do
      assert.truthy(headers:find(line), line .. " in " .. headers)
    end
    headers = curl(s, "/v1/models", "-H 'Origin: https://app.example'")
    assert.truthy(headers:find("\naccess%-control%-allow%-origin: https://app.example\r"), headers)
    local code, log = stop(s)
    assert.are.equal(0, code)
    assert.is_nil(log:find("POST /v1/", 1, true), log) -- --quiet: no access log
  end)

  it("counts a streamed client that leaves as 499, also while its stream waits for a slot", function()
    local f = start({ "--unscripted", "--slots", "1", "--ctx", "4096", "--delay", "0.02" }, "tests/serve_scripted.lua")
    local LEFT = 'gptoss_requests_total{endpoint="/v1/chat/completions",status="499"}'
    local chat = { model = "scripted", messages = { { role = "user", content = "Hi" } }, max_tokens = 250 }
    assert.are.equal(3, #client(f, "chat_stream_abort", H.with(chat, { chunks = 3 })))
    assert.are.equal(1, metric_reaches(f, LEFT, 1))
    -- a whole answer of 80 s holds the slot; a stream waits in the queue and leaves before it runs
    local p = assert(io.popen(("timeout 120 %scurl -s -d %s http://127.0.0.1:%d/v1/completions >/dev/null & echo $!")
      :format(SH.UNSANITIZED, q('{"model":"scripted","prompt":"Hi","max_tokens":4000}'), f.port)))
    local holder = assert(tonumber(p:read("l")))
    p:close()
    assert.are.equal(1, metric_reaches(f, "gptoss_slots_in_use", 1))
    curl(f, "/v1/chat/completions", "-m 1 -d " .. q(dkjson.encode(H.with(chat, { stream = true }))))
    assert.are.equal(2, metric_reaches(f, LEFT, 2))
    -- noticed while it waited: the slot is still the first one's, which nothing has ended
    assert.are.same({ 1, 1 }, { metric(f, "gptoss_slots_in_use"), count(H.read_file(f.log), "went away") - 1 })
    os.execute("kill " .. holder)
    assert.are.equal(0, metric_reaches(f, "gptoss_slots_in_use", 0))
    assert.are.equal(0, stop(f))
  end)
end)
