-- tests/serve_host_bench.lua (gptoss serve's host work an id over a fake replica) runs and
-- counts every id, sends bench_serve's load with --chat-fraction (its structured chats drawn
-- under their matchers by the fake replica, valid JSON where they finish), and a stream's
-- events made from the server's templates are the chunks a whole encode makes, with each
-- job's id and created, whatever the model's name holds.
local dkjson = require "dkjson"
local H = require "helpers"
local SH = require "serve_helpers"

describe("serve host bench", function()
  if SH.why_not_http then
    pending(SH.why_not_http, function() end)
    return
  end

  local function bench(args)
    local p = assert(io.popen(("cd %s && timeout 120 lua5.4 tests/serve_host_bench.lua %s 2>&1"):format(
      H.shell_quote(SH.ROOT), args)))
    local out = p:read("a")
    p:close()
    return out, dkjson.decode(out:match("\n(%b{})\n") or "null")
  end

  it("counts the ids of every request, completions and chat", function()
    for _, endpoint in ipairs { "completions", "chat" } do
      local out, line = bench("--requests 6 --output 5 --endpoint " .. endpoint)
      assert.is_table(line, out)
      assert.are.equal(30, line.ids, out)
      assert.are.equal(endpoint, line.endpoint)
      assert.is_number(line.host_us_per_id)
      assert.matches("server: replica 1: %d+ steps, 30 ids", out)
    end
  end)

  it("sends bench_serve's requests for its seed, ShareGPT-like lengths with --lengths sharegpt", function()
    local bench_requests = require "gptoss.bench_requests"
    math.randomseed(3)
    local ids = 0
    for _ = 1, 5 do
      local _, body = bench_requests.draw { model = "bench", lengths = "sharegpt", max_len = 1024, chat_fraction = 0 }
      ids = ids + dkjson.decode(body).max_tokens
    end
    local out, line = bench("--requests 5 --lengths sharegpt --seed 3")
    assert.is_table(line, out)
    assert.are.equal(ids, line.ids, out)
  end)

  it("sends bench_serve's load with --chat-fraction, its chats' answers JSON under --json-schema typical", function()
    local bench_requests = require "gptoss.bench_requests"
    math.randomseed(1)
    local chats = 0
    for _ = 1, 12 do
      local _, _, chat = bench_requests.draw { model = "bench", lengths = "sharegpt", max_len = 300, chat_fraction = 0.5 }
      if chat then chats = chats + 1 end
    end
    local out, line = bench("--requests 12 --lengths sharegpt --seed 1 --max-len 300 --chat-fraction 0.5 "
      .. "--json-schema typical")
    assert.is_table(line, out)
    local outputs = line.schema_outputs
    assert.are.equal("typical", line.json_schema)
    assert.is_true(outputs.finished > 0, out)
    assert.are.equal(outputs.finished, outputs.valid_json, out)
    assert.are.equal(chats, outputs.finished + outputs.cut, out)
    assert.is_number(line.constraint_us_per_id)
  end)

  it("refuses --json-schema without chats and --chat-fraction with --endpoint, naming them", function()
    assert.matches("%-%-json%-schema: give %-%-chat%-fraction above 0", (bench("--json-schema typical")))
    assert.matches("%-%-chat%-fraction sends bench_serve's load: leave %-%-endpoint out",
      (bench("--chat-fraction 0.5 --endpoint chat")))
    assert.matches("%-%-model serves on its replica without sockets: leave %-%-http and %-%-delay out",
      (bench("--model 7m --device cpu --http")))
  end)

  it("serves the requests on a real replica with --model, timing its throughput", function()
    local out, line = bench("--requests 3 --output 4 --model 7m --device cpu --ctx 64")
    assert.is_table(line, out)
    assert.are.equal(12, line.ids, out)
    assert.are.equal("7m", line.model)
    assert.is_true(line.elapsed > 0 and math.abs(line.output_tok_per_s * line.elapsed - 12) < 1e-6, out)
    assert.matches("12 ids, %d+ bytes streamed on 7m: [%d.]+ s, [%d.]+ output tok/s", out)
    assert.matches("server: replica 1: %d+ steps, 12 ids", out)
  end)

  it("has the fake replica draw a constrained row's id from its matcher, which takes it", function()
    local fake_replica = require "fake_replica"
    local gptoss = require "gptoss"
    local tok = gptoss.tokenizer()
    local text = fake_replica.plain_text(tok)
    local replica = fake_replica.new { slots = 2, ctx = 64, text = text }
    local m = gptoss.grammar.regex("[0-9]+"):matcher(tok)
    local ids = replica:step { slots = { 1, 2 }, positions = { 0, 0 }, tokens = { 1, 2 }, constraint = { [2] = m } }
      :tokens()
    assert.are.equal(text[1], ids[1]) -- an unconstrained row keeps its text
    assert.are.equal(1, m.tokens)
    assert.matches("^[0-9]+$", tok:decode { ids[2] })
    assert.is_true(replica.constraint_seconds >= 0)
  end)

  it("makes a stream's events with each job's id, under any model name", function()
    local condition = require "cqueues.condition"
    local fake_replica = require "fake_replica"
    local gptoss = require "gptoss"
    local serve = require "gptoss.serve"
    local serve_api = require "gptoss.serve_api"
    local tok = gptoss.tokenizer()
    local text = tok:encode(' a "quoted" word\n', { mode = "o200k" })
    for _, name in ipairs { "plain", "holds \1text\1 and \1id\1" } do
      local server = serve.new { model = gptoss.synthetic("7m"), model_name = name, tokenizer = tok, port = 0,
        replicas = { fake_replica.new { slots = 3, ctx = 64, text = text } }, log = function() end }
      local route = serve_api.routes(server)["POST /v1/chat/completions"]
      local sinks, done = {}, condition.new()
      local body = dkjson.encode { model = name, messages = { { role = "user", content = "hi" } }, max_tokens = 6,
        stream = true, n = 2, stream_options = { include_usage = true } }
      server.cq:wrap(function() server.engine:run() end)
      for r = 1, 2 do
        sinks[r] = { text = {}, open_events = function() return true end, wait = function(_, c) c:wait() return true end,
          write_events = function(self, t) self.text[#self.text + 1] = t return true end }
        server.cq:wrap(function()
          route(sinks[r], body)
          sinks[r].done = true
          if sinks[1].done and sinks[2].done then server.engine:stop() end
        end)
      end
      while not server.cq:empty() do assert(server.cq:step()) end
      local ids = {}
      for _, sink in ipairs(sinks) do
        local events, content = {}, { "", "" }
        for data in table.concat(sink.text):gmatch("data: (.-)\n\n") do events[#events + 1] = data end
        assert.are.equal("[DONE]", table.remove(events))
        local usage = dkjson.decode(table.remove(events))
        assert.are.equal(12, usage.usage.completion_tokens)
        for _, data in ipairs(events) do
          local e = dkjson.decode(data)
          assert.are.same({ usage.id, usage.created, name, "chat.completion.chunk" }, { e.id, e.created, e.model, e.object })
          local choice = e.choices[1]
          content[choice.index + 1] = content[choice.index + 1] .. (choice.delta.content or "")
          if choice.finish_reason then assert.are.equal("length", choice.finish_reason) end
        end
        assert.are.equal(content[1], content[2])
        assert.matches('"', content[1]) -- an escaped quote, through serve_http.escape
        ids[#ids + 1] = usage.id
      end
      assert.are_not.equal(ids[1], ids[2])
    end
  end)
end)
