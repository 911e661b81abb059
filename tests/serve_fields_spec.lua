-- What gptoss serve takes of what OpenAI's clients send, in this process: unknown fields
-- ignored and named once, the chat fields beside the basics (minimal effort, top_k, min_p,
-- parallel_tool_calls, many stop strings, reasoning sent back), a logprob entry for every id
-- generated, and admission of a burst while slots are free. tests/serve_spec.lua drives the
-- same through real clients.
local gptoss = require "gptoss"
local scheduler = require "gptoss.scheduler"
local H = require "helpers"
local SH = require "serve_helpers"

-- these run in this process: the server's modules are needed, not curl
local why_not = not pcall(require, "gptoss.serve_http") and "lua-http, lua-cqueues or lua-cjson is missing (make setup)"

describe("serve_openai's fields", function()
  if why_not then return pending(why_not) end
  local serve_openai = require "gptoss.serve_openai"
  local tok = gptoss.tokenizer()
  local CTX = 300

  local chat = SH.chat_body
  local function refusal(body) return SH.refusal(serve_openai.chat, body, tok, CTX) end

  it("ignores unknown fields, naming each to on_unknown, and still refuses a known field of a wrong type", function()
    local unknown = {}
    local function on_unknown(name) unknown[#unknown + 1] = name end
    local job = serve_openai.chat(chat { store = true, metadata = { a = "b" }, service_tier = "auto", user = "u",
      prompt_cache_key = "k", stream = true, stream_options = { include_usage = true, include_obfuscation = false } },
      tok, CTX, on_unknown)
    table.sort(unknown)
    assert.are.same({ "metadata", "prompt_cache_key", "service_tier", "store", "stream_options.include_obfuscation" },
      unknown)
    assert.is_true(job.include_usage)
    for _, case in ipairs { { { user = 5 }, "user" }, { { store = true, temperature = "x" }, "temperature" },
      { { response_format = "json" }, "response_format" }, { { functions = {} }, "functions" },
      { { best_of = 2 }, "best_of" } } do
      assert.are.same({ 400, case[2] }, { refusal(chat(case[1])).status, refusal(chat(case[1])).param })
    end
    assert.are.equal(1, serve_openai.completion({ model = "m", prompt = "x", best_of = 1, echo = false,
      logprobs = 1 }, tok, CTX).logprobs)
  end)

  it("reads minimal effort as low, top_k and min_p, parallel_tool_calls, more than 4 stop strings", function()
    local low = serve_openai.chat(chat { reasoning_effort = "low" }, tok, CTX).prompt
    assert.are.same(low, serve_openai.chat(chat { reasoning_effort = "minimal" }, tok, CTX).prompt)
    local job = serve_openai.chat(chat { top_k = 40, min_p = 0.05, parallel_tool_calls = false,
      stop = { "a", "b", "c", "d", "e", "f" } }, tok, CTX)
    assert.are.same({ 40, 0.05, 6 }, { job.sampling.top_k, job.sampling.min_p, #job.stop })
    -- 0 and vLLM's -1 leave top_k out, as 0 min_p
    local plain = serve_openai.chat(chat { top_k = -1, min_p = 0 }, tok, CTX).sampling
    assert.are.same({}, { plain.top_k, plain.min_p })
    for _, case in ipairs { { { top_k = -2 }, "top_k" }, { { top_k = 1.5 }, "top_k" }, { { min_p = 2 }, "min_p" },
      { { parallel_tool_calls = "yes" }, "parallel_tool_calls" }, { { reasoning_effort = "max" }, "reasoning_effort" },
      { { messages = { { role = "assistant", content = "x", reasoning_content = 5 } } },
        "messages[0].reasoning_content" } } do
      assert.are.same({ 400, case[2] }, { refusal(chat(case[1])).status, refusal(chat(case[1])).param })
    end
  end)

  it("takes presence_penalty and frequency_penalty in [-2, 2] into the sampling, 0 as none", function()
    local sampling = serve_openai.chat(chat { presence_penalty = 0.5, frequency_penalty = -2 }, tok, CTX).sampling
    assert.are.same({ 0.5, -2 }, { sampling.presence_penalty, sampling.frequency_penalty })
    local plain = serve_openai.completion({ model = "m", prompt = "x", presence_penalty = 0, frequency_penalty = 2 },
      tok, CTX).sampling
    assert.are.same({ nil, 2 }, { plain.presence_penalty, plain.frequency_penalty })
    for _, case in ipairs { { presence_penalty = 2.5 }, { frequency_penalty = -2.01 }, { presence_penalty = "1" } } do
      local name = next(case)
      local err = refusal(chat(case))
      assert.are.same({ 400, name }, { err.status, err.param })
      assert.truthy(err.message:find(name, 1, true), err.message)
    end
  end)

  it("drops the reasoning of every turn that ended in an answer, keeps that of a turn still calling tools", function()
    local tools = { { type = "function", ["function"] = { name = "f" } } }
    local call = { { id = "c1", type = "function", ["function"] = { name = "f", arguments = "{}" } } }
    local messages = {
      { role = "user", content = "one" },
      { role = "assistant", content = "A1", reasoning_content = "R1" },
      { role = "user", content = "two" },
      { role = "assistant", content = "A2", reasoning_content = "R2" },
      { role = "user", content = "three" },
      { role = "assistant", tool_calls = call, reasoning_content = "R3" },
      { role = "tool", tool_call_id = "c1", content = "ok" },
    }
    local text = tok:decode(serve_openai.chat(chat { messages = messages, tools = tools }, tok, CTX).prompt)
    assert.is_nil(text:find("R1", 1, true))
    assert.is_nil(text:find("R2", 1, true)) -- a turn before the last answer's
    assert.truthy(text:find("<|channel|>analysis<|message|>R3<|end|>", 1, true))
    -- once that turn ends in an answer, its reasoning goes too
    messages[#messages + 1] = { role = "assistant", content = "A3", reasoning_content = "R4" }
    messages[#messages + 1] = { role = "user", content = "four" }
    text = tok:decode(serve_openai.chat(chat { messages = messages, tools = tools }, tok, CTX).prompt)
    for _, r in ipairs { "R1", "R2", "R3", "R4" } do assert.is_nil(text:find(r, 1, true), r) end
    assert.truthy(text:find("<|call|>", 1, true))
  end)
end)

describe("serve_choice's logprobs", function()
  if why_not then return pending(why_not) end
  local serve_choice = require "gptoss.serve_choice"
  local tok = gptoss.tokenizer()

  -- the step's entry for id: logprob -id, one alternative
  local function lp(id) return { id = id, logprob = -id, top = { { id = id + 1, logprob = -1 } } } end

  it("has an entry for every id of a chat reply, harmony tokens and reasoning included, each taken once", function()
    local S = require("gptoss.harmony").special
    local ids = {}
    for _, p in ipairs { S.channel, "analysis", S.message, "think", S["end"], S.start, "assistant", S.channel, "final",
      S.message, "Hi there", S["return"] } do
      local part = type(p) == "number" and { p } or tok:encode(p, { mode = "o200k" })
      table.move(part, 1, #part, #ids + 1, ids)
    end
    local c = serve_choice.new({ kind = "chat", logprobs = 1 }, tok)
    local taken, shown = {}, {}
    for _, id in ipairs(ids) do
      local deltas = c:add(id, lp(id))
      for _, d in ipairs(deltas) do shown[#shown + 1] = d.content or d.reasoning_content end
      if #deltas > 0 then
        for _, e in ipairs(c:take_logprobs()) do taken[#taken + 1] = e.token end
      end
    end
    c:close("stop")
    for _, e in ipairs(c:take_logprobs() or {}) do taken[#taken + 1] = e.token end
    assert.are.equal(#ids, #c.logprobs)
    assert.are.equal(tok:decode(ids), table.concat(taken))
    local e = c.logprobs[#c.logprobs]
    assert.are.same({ tok:piece(ids[#ids]), -ids[#ids], { tok:piece(ids[#ids]):byte(1, -1) } },
      { e.token, e.logprob, e.bytes })
    assert.are.same({ { token = tok:piece(ids[#ids] + 1), logprob = -1, bytes = { tok:piece(ids[#ids] + 1):byte(1, -1) } } },
      e.top_logprobs)
    assert.are.same({ "Hi there", "think" }, { c:message().content, c:message().reasoning_content })
    assert.is_nil(c:take_logprobs())
  end)
end)

describe("the serve engine's admission", function()
  if why_not then return pending(why_not) end
  local fake_replica = require "fake_replica"
  local serve_engine = require "gptoss.serve_engine"

  it("admits a burst while slots are free; max_queue bounds only those left waiting for a slot", function()
    local engine = serve_engine.new { replicas = { fake_replica.new { slots = 4, ctx = 64, text = { 11 } } },
      scheduler = scheduler.continuous(), max_queue = 1 }
    local function request(n)
      local seqs = {}
      for i = 1, n do seqs[i] = { prompt = { 1, 2 }, limit = 2, sampling = {}, on_id = function() end,
        on_end = function() end } end
      return engine:submit(seqs)
    end
    -- nothing has stepped yet: all four are queued, and a free slot awaits each
    for _ = 1, 4 do assert.is_true(request(1)) end
    assert.are.equal(0, engine:waiting())
    assert.is_true(request(1)) -- the fifth waits for a slot
    assert.are.equal(1, engine:waiting())
    assert.is_false(request(1))
    local fresh = serve_engine.new { replicas = { fake_replica.new { slots = 4, ctx = 64, text = { 11 } } },
      scheduler = scheduler.continuous(), max_queue = 1 }
    engine = fresh
    assert.is_true(request(4)) -- n choices at once, as many as the slots
    assert.is_false(request(2)) -- two would wait
  end)
end)
