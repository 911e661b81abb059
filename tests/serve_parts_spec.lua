-- gptoss serve's pieces in this process, without a network: request bodies read into jobs
-- or refused with the OpenAI error naming the field (serve_openai), the runner's arrivals
-- and cancellations, and serve.new's own refusals. tests/serve_spec.lua drives the whole
-- server through real clients.
local gptoss = require "gptoss"
local runner = require "gptoss.runner"
local scheduler = require "gptoss.scheduler"
local H = require "helpers"
local SH = require "serve_helpers"

local ok_http = pcall(require, "gptoss.serve_http")

describe("serve_openai", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local cjson = require "cjson"
  local serve_openai = require "gptoss.serve_openai"
  local tok = gptoss.tokenizer()
  local CTX = 300

  local chat = SH.chat_body
  local function refusal(parse, body) return SH.refusal(parse, body, tok, CTX) end

  it("reads a chat body into a job: harmony prompt, sampling per choice, limit from the context", function()
    local job = serve_openai.chat(chat { n = 2, seed = 9, temperature = 0.5, logprobs = true, top_logprobs = 3,
      stop = "x", logit_bias = { ["42"] = -100 }, reasoning_effort = "low" }, tok, CTX)
    local harmony = require "gptoss.harmony"
    local expected = harmony.render_ids({ harmony.system { reasoning = "low" }, harmony.user("Hi") }, tok)
    assert.are.same(expected, job.prompt)
    assert.are.same({ 2, CTX - #expected, { "x" } }, { job.n, job.limit, job.stop })
    assert.are.same({ temperature = 0.5, top_p = 1, seed = 10, logprobs = 3, logit_bias = { [42] = -100 } },
      serve_openai.sampling_for(job, 2))
  end)

  it("renders system messages as instructions, tool calls and tool answers as harmony does", function()
    local job = serve_openai.chat(chat { messages = {
      { role = "system", content = "Be brief." },
      { role = "user", content = { { type = "text", text = "Weather?" } } },
      { role = "assistant", content = cjson.null, tool_calls = { { id = "c1", type = "function",
        ["function"] = { name = "get_weather", arguments = "{}" } } } },
      { role = "tool", tool_call_id = "c1", content = "sunny" } },
      tools = { { type = "function", ["function"] = { name = "get_weather", parameters = { type = "object" } } } } },
      tok, CTX)
    local text = tok:decode(job.prompt)
    for _, piece in ipairs { "# Instructions\n\nBe brief.", "type get_weather = (_: {\n}) => any;",
      "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{}<|call|>",
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|><|start|>assistant" } do
      assert.truthy(text:find(piece, 1, true), piece)
    end
  end)

  it("reads a completion body: text or token ids, 16 tokens by default", function()
    local job = serve_openai.completion({ model = "m", prompt = { 1, 2, 3 } }, tok, CTX)
    assert.are.same({ { 1, 2, 3 }, 16 }, { job.prompt, job.limit })
    assert.are.same(tok:encode("Hello"), serve_openai.completion({ model = "m", prompt = "Hello" }, tok, CTX).prompt)
  end)

  it("refuses each bad field with a 400 naming it", function()
    local too_many_stops = {}
    for i = 1, 65 do too_many_stops[i] = "s" .. i end
    local chat_cases = {
      { { temperature = "hot" }, "temperature" }, { { temperature = 2.5 }, "temperature" },
      { { top_p = 0 }, "top_p" }, { { n = 17 }, "n" }, { { n = 1.5 }, "n" }, { { seed = "s" }, "seed" },
      { { stop = too_many_stops }, "stop" }, { { stop = { "" } }, "stop" },
      { { logit_bias = { x = 1 } }, "logit_bias" }, { { logit_bias = { ["1"] = 101 } }, "logit_bias" },
      { { logit_bias = { ["999999"] = 1 } }, "logit_bias" }, { { stream = "yes" }, "stream" },
      { { stream_options = { include_usage = true } }, "stream_options" },
      { { stream = true, stream_options = { include_usage = 1 } }, "include_usage" },
      { { frequency_penalty = 2.5 }, "frequency_penalty" }, { { reasoning_effort = "max" }, "reasoning_effort" },
      { { tool_choice = "required" }, "tool_choice" }, { { tools = { { type = "web" } } }, "tools" },
      { { top_logprobs = 2 }, "top_logprobs" }, { { logprobs = true, top_logprobs = 21 }, "top_logprobs" },
      { { max_tokens = 0 }, "max_tokens" }, { { max_completion_tokens = 10000 }, "max_completion_tokens" },
      { { messages = {} }, "messages" }, { { messages = { { role = "robot", content = "x" } } }, "messages" },
      { { messages = { { role = "user", content = { { type = "image_url" } } } } }, "messages[0].content" },
      { { messages = { { role = "tool", tool_call_id = "none", content = "x" } } }, "messages" },
      { { response_format = { type = "xml" } }, "response_format" },
      { { messages = { { role = "user", content = ("word "):rep(400) } } }, "messages" },
    }
    for _, case in ipairs(chat_cases) do
      local err = refusal(serve_openai.chat, chat(case[1]))
      assert.are.same({ 400, case[2], "invalid_request_error" }, { err.status, err.param, err.type },
        require("dkjson").encode(case[1]))
      assert.is_string(err.message)
    end
    for _, case in ipairs { { { prompt = {} }, "prompt" }, { { prompt = { -1 } }, "prompt" },
      { { prompt = { "a" } }, "prompt" }, { { prompt = "" }, "prompt" }, { { prompt = "x", echo = true }, "echo" },
      { { prompt = "x", logprobs = 6 }, "logprobs" }, { { prompt = "x", suffix = "y" }, "suffix" } } do
      local err = refusal(serve_openai.completion, H.with({ model = "m" }, case[1]))
      assert.are.same({ 400, case[2] }, { err.status, err.param })
    end
  end)

  it("refuses what OpenAI refuses: logit_bias keys not in decimal, tool schemas of the wrong type, NaN", function()
    local function param_and_message(body)
      local err = refusal(serve_openai.chat, chat(body))
      assert.are.equal(400, err.status)
      return err.param, err.message
    end
    for _, key in ipairs { "0x10", "1e2", " 5 ", "+5", "5.0", "" } do
      assert.are.same({ "logit_bias", ("'logit_bias' keys must be token ids 0..201087 in decimal digits (got '%s')")
        :format(key) }, { param_and_message { logit_bias = { [key] = 1 } } })
    end
    assert.are.same({ [5] = 1, [7] = 2 }, serve_openai.chat(chat { logit_bias = { ["5"] = 1, ["007"] = 2 } }, tok,
      CTX).sampling.logit_bias)
    local function tool(f) return { tools = { { type = "function", ["function"] = H.with({ name = "f" }, f) } } } end
    for _, case in ipairs { { { parameters = "object" }, "parameters' must be a JSON schema object (got string)" },
      { { parameters = { 1, 2 } }, "parameters' must be a JSON schema object (got array)" },
      { { parameters = true }, "parameters' must be a JSON schema object (got boolean)" },
      { { description = 5 }, "description' must be a string (got number)" } } do
      local param, message = param_and_message(tool(case[1]))
      assert.are.same({ "tools", "'tools[0].function." .. case[2] }, { param, message })
    end
    assert.is_true(serve_openai.chat(chat(tool { description = cjson.null, parameters = cjson.null }), tok, CTX).tools)
    assert.are.same({ "temperature", "'temperature' must be a finite number (got NaN)" },
      { param_and_message { temperature = 0 / 0 } })
    assert.are.same({ "top_p", "'top_p' must be a finite number (got Infinity)" },
      { param_and_message { top_p = math.huge } })
    assert.are.same({ "logit_bias", "'logit_bias' values must be numbers in -100..100 (got NaN for 3)" },
      { param_and_message { logit_bias = { ["3"] = 0 / 0 } } })
  end)

  it("refuses a prompt too long for the context before it is tokenized", function()
    -- a tokenizer that must not be asked: a prompt of more than (CTX - 1) * 128 bytes is more
    -- than CTX - 1 tokens of at most 128 bytes
    local untouched = setmetatable({ vocab_size = tok.vocab_size, max_token_length = tok.max_token_length,
      special = tok.special }, { __index = function(_, k) error("the tokenizer was asked for " .. k) end })
    local long = ("x"):rep((CTX - 1) * tok.max_token_length + 1)
    local err = refusal(serve_openai.completion, { model = "m", prompt = long })
    assert.are.same({ 400, "prompt", "context_length_exceeded" }, { err.status, err.param, err.code })
    assert.truthy(err.message:find("the prompt is 38273 bytes of text, more than the 299 tokens", 1, true), err.message)
    err = refusal(function(body) return serve_openai.chat(body, untouched, CTX) end,
      chat { messages = { { role = "user", content = long } } })
    assert.are.same({ 400, "messages", "context_length_exceeded" }, { err.status, err.param, err.code })
    -- one byte less is tokenized, and then refused by its count of tokens
    err = refusal(serve_openai.completion, { model = "m", prompt = long:sub(2) })
    assert.truthy(err.message:find("this server's context is 300, which leaves no room", 1, true), err.message)
  end)

  it("answers an unknown model with 404 and a model that is not a string with 400", function()
    local function check(body)
      local ok, err = pcall(serve_openai.check_model, body, "m")
      assert.is_false(ok)
      return err
    end
    assert.are.same({ 404, "model", "model_not_found" }, { check { model = "x" }.status, check { model = "x" }.param,
      check { model = "x" }.code })
    assert.are.same({ 400, "model" }, { check { model = 3 }.status, check { model = 3 }.param })
    assert.are.same({ 400, "body" }, { check { 1, 2 }.status, check { 1, 2 }.param })
    -- a name that is not UTF-8 is never echoed as it came: the answer is JSON, UTF-8
    local message = check({ model = "a\xff\xc3" }).message
    assert.are.equal("The model 'a\u{FFFD}\u{FFFD}' does not exist; this server serves 'm'", message)
    assert.has_no.errors(function() serve_openai.check_model({ model = "m" }, "m") end)
  end)

  it("compares API keys whole (serve_http.same_key)", function()
    local same = require("gptoss.serve_http").same_key
    assert.is_true(same("sesame", "sesame"))
    for _, given in ipairs { "", "sesam", "sesamee", "Sesame", "sesame\0" } do assert.is_false(same(given, "sesame")) end
  end)

  it("escapes a string's text as dkjson quotes it (serve_http.escape, quote)", function()
    local serve_http, dkjson = require "gptoss.serve_http", require "dkjson"
    for _, text in ipairs { "", "plain words", 'a "quote" \\ and \n\t\1', "\u{2028} \u{feff} \127", "é€😀" } do
      assert.are.equal(dkjson.quotestring(text), serve_http.quote(text))
      assert.are.equal(dkjson.quotestring(text), '"' .. serve_http.escape(text) .. '"')
    end
  end)
end)

describe("the runner's arrivals and cancellations (gptoss serve's)", function()
  local r = gptoss.synthetic("7m"):replica { slots = 3, ctx = 64 }
  local function seq(prompt, limit) return { prompt = prompt, output = {}, limit = limit, position = 0, index = 1 } end

  it("queues arrivals where told, frees a cancelled running sequence's slot and drops its rows", function()
    local rn = runner.new(scheduler.continuous(), r, 1, {}, { rows = 64, chunk = 64, stop = {} })
    local a, b, c = seq({ 1, 2, 3 }, 5), seq({ 4, 5 }, 5), seq({ 6 }, 5)
    rn:arrive(a, 1)
    rn:arrive(b, 1) -- b first
    local plan = rn:build()
    assert.are.same({ b, a }, rn.state.running)
    rn:arrive(c, 1)
    rn:cancel(c, "disconnected") -- still waiting: it leaves the queue
    assert.are.same({ {}, "disconnected" }, { rn.state.waiting, c.finish })
    rn:cancel(a, "disconnected")
    assert.are.same({ { b }, 2 }, { rn.state.running, rn.state.free })
    local h = r:step(plan.batch)
    local generated = rn:apply(plan, h:tokens())
    assert.are.same({ 1, {} }, { generated, a.output }) -- a's row yielded nothing
    rn:cancel(a, "stop")
    assert.are.equal("disconnected", a.finish)
  end)

  it("forks the prefix only into prompts that begin with it and go on past it", function()
    local prefix = { slot = 3, ids = { 7, 8 }, length = 2 }
    r:step { slots = { 3, 3 }, positions = { 0, 1 }, tokens = { 7, 8 } }
    local rn = runner.new(scheduler.continuous(), r, 1, {}, { rows = 64, chunk = 64, stop = {}, prefix = prefix })
    local shares, other, short = seq({ 7, 8, 9 }, 2), seq({ 7, 9, 9 }, 2), seq({ 7, 8 }, 2)
    for i, s in ipairs { shares, other } do rn:arrive(s, i) end
    -- the first position each slot's rows feed
    local function first_positions(plan)
      local first = {}
      for i, slot in ipairs(plan.batch.slots) do first[slot] = first[slot] or plan.batch.positions[i] end
      return first
    end
    local first = first_positions(rn:build())
    assert.are.same({ 2, 0 }, { first[shares.slot], first[other.slot] })
    assert.are.equal(2, r:length(shares.slot)) -- forked before the step
    local rn2 = runner.new(scheduler.continuous(), r, 1, { short }, { rows = 64, chunk = 64, stop = {}, prefix = prefix })
    assert.are.equal(0, first_positions(rn2:build())[short.slot]) -- a prompt that is the prefix is fed whole
  end)
end)

describe("the serve engine's loop over a fake replica (tests/fake_replica.lua)", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local cqueues = require "cqueues"
  local fake_replica = require "fake_replica"
  local serve_engine = require "gptoss.serve_engine"

  it("keeps two steps in flight, hands each id to its sequence, times every step and counts its prompt rows", function()
    -- a device counted in the loop's polls, not in seconds: a step is done at its fourth
    -- look, so the loop finds each one still running after its host work whatever the load
    local r = fake_replica.new { slots = 4, ctx = 64, text = { 11, 12, 13, 14, 15 } }
    -- whether the step before was still unread when each was enqueued, and the steps in
    -- flight when each is read
    local enqueued, read, in_flight, unread_before, last = 0, 0, {}, {}, nil
    local step = r.step
    r.step = function(self, batch)
      if last then unread_before[#unread_before + 1] = not last.was_read end
      local h = step(self, batch)
      enqueued, last = enqueued + 1, h
      local tokens, looks = h.tokens, 0
      h.ready = function()
        looks = looks + 1
        return looks > 3
      end
      h.tokens = function(handle)
        in_flight[#in_flight + 1] = enqueued - read
        read, handle.was_read = read + 1, true
        return tokens(handle)
      end
      return h
    end
    local steps, generated, waited, prefilled = 0, 0, 0, {}
    local engine = serve_engine.new { replicas = { r }, scheduler = scheduler.continuous(), max_queue = 8,
      on_step = function(k, host, wait, n, fed)
        assert.are.equal(1, k)
        assert.is_true(host >= 0 and wait >= 0)
        steps, generated, waited = steps + 1, generated + n, waited + wait
        prefilled[#prefilled + 1] = fed
      end }
    local outputs, ended = {}, 0
    local seqs = {}
    for i = 1, 3 do
      outputs[i] = {}
      seqs[i] = { prompt = { 1, 2 }, limit = 5, sampling = {},
        on_id = function(_, id) table.insert(outputs[i], id) end, on_end = function() ended = ended + 1 end }
    end
    assert.is_true(engine:submit(seqs))
    engine:stop() -- the loop returns once they have ended
    local cq = cqueues.new()
    cq:wrap(function() engine:run() end)
    assert(cq:loop())
    -- a prefill step, four decode steps, each enqueued before the one before was read; the
    -- last is read with nothing after it to build
    assert.are.same({ true, true, true, true }, unread_before)
    assert.are.same({ 2, 2, 2, 2, 1 }, in_flight)
    -- the fake's id at a row's position, the first from the prompt's last row (position 1)
    for i = 1, 3 do assert.are.same({ 12, 13, 14, 15, 11 }, outputs[i]) end
    assert.are.same({ 3, 5, 15 }, { ended, steps, generated })
    assert.are.same({ 6, 0, 0, 0, 0 }, prefilled) -- the prompts' rows, in the first step
    assert.is_true(waited > 0) -- the steps still running after the host work are waited for
  end)

  it("reports the steps' host and waited seconds per replica and the prompt rows fed in /metrics, and a summary line",
    function()
    local metrics = require("gptoss.serve_metrics").new()
    metrics:step(2, 0.0003, 0.002, 10, 40)
    metrics:step(2, 0.0005, 0.001, 6, 0)
    local text = metrics:text(0, 0, 4)
    for _, line in ipairs { 'gptoss_step_host_seconds_bucket{replica="2",le="0.00025"} 0',
      'gptoss_step_host_seconds_bucket{replica="2",le="0.0005"} 2', 'gptoss_step_host_seconds_count{replica="2"} 2',
      'gptoss_step_waited_seconds_bucket{replica="2",le="+Inf"} 2', 'gptoss_step_host_seconds_count{replica="1"} 0',
      'gptoss_prefill_rows_total 40' } do
      assert.truthy(text:find("\n" .. line .. "\n", 1, true), line)
    end
    assert.are.near(0.003, tonumber(text:match('\ngptoss_step_waited_seconds_sum{replica="2"} (%S+)')), 1e-12)
    assert.are.same({ "replica 1: 0 steps, 0 ids; host 0.000 ms a step (0.0 µs an id), waited 0.000 ms a step",
      "replica 2: 2 steps, 16 ids; host 0.400 ms a step (50.0 µs an id), waited 1.500 ms a step" },
      metrics:step_summary())
  end)
end)

describe("serve.new", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local serve = require "gptoss.serve"
  local m = gptoss.synthetic("7m")

  it("refuses bad options before it builds or listens", function()
    H.expect_error(function() serve.new { model = "7m" } end, "serve.new: model must be a gptoss model (got string)")
    H.expect_error(function() serve.new { model = m, slots = 0 } end, "serve: slots must be an integer >= 1 (got 0)")
    H.expect_error(function() serve.new { model = m, port = -1 } end, "serve: port must be an integer >= 0")
    H.expect_error(function() serve.new { model = m, api_key = "" } end, "api_key must be a non-empty string")
    H.expect_error(function() serve.new { model = m, scheduler = "fifo" } end,
      "serve: scheduler must be one of continuous, static or an object (got 'fifo')")
    H.expect_error(function() serve.new { model = m, scheduler = {} } end, "serve: scheduler must have an admit method")
    H.expect_error(function() serve.new { model = m, replicas = {} } end, "replicas must be a non-empty list")
    H.expect_error(function() serve.new { model = m, colour = 1 } end, "serve.new: unknown option 'colour'")
  end)
end)

describe("gptoss serve's command line", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  after_each(H.cleanup)

  it("refuses a scheduler file that is missing, raises or returns no scheduler, and an unknown name", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/raises.lua", 'error("no policy today")')
    H.write_file(dir .. "/empty.lua", "return {}")
    for _, case in ipairs {
      { "missing.lua", "gptoss serve: --scheduler: cannot open missing.lua" },
      { "raises.lua", "gptoss serve: --scheduler: raises.lua raised: no policy today" },
      { "empty.lua", "scheduler must have an admit method" },
      { "fastest", "scheduler must be one of continuous, static or an object (got 'fastest')" },
    } do
      local code, out, err = H.gptoss(pending, dir, { "serve", "7m", "--port", "0", "--scheduler", case[1] },
        { GPTOSS_TOKENIZER = H.TREE.root .. "build/tokenizer.bin" })
      assert.are.same({ 1, "" }, { code, out }, err)
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)
end)
