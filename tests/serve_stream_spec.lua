-- gptoss.serve_stream in a listening server of this process (a fake replica whose steps take
-- a device's time): a chunked stream's events go out through the server's sender (its bytes
-- counted there), its last chunk through lua-http; a client gone mid-stream frees its slot.
-- With stand-ins: a socket that failed fails its stream alone, a socket the sender cannot take
-- is written by the stream's coroutine, and an error on the way cancels the job's sequences.
local gptoss = require "gptoss"

local ok_http = pcall(require, "gptoss.serve_http")

describe("a listening server's streams", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local cjson = require "cjson"
  local condition = require "cqueues.condition"
  local fake_replica = require "fake_replica"
  local serve = require "gptoss.serve"
  local serve_api = require "gptoss.serve_api"
  local serve_stream = require "gptoss.serve_stream"
  local http_request = require("gptoss.lua_http").require("http.request")

  local tok = gptoss.tokenizer()
  local TEXT = tok:encode(" one two three four five six seven eight", { mode = "o200k" })

  -- A started server over a fake replica whose steps take 20 ms.
  local function server()
    return serve.new { model = gptoss.synthetic("7m"), model_name = "m", tokenizer = tok, port = 0,
      replicas = { fake_replica.new { slots = 3, ctx = 64, text = TEXT, delay = 0.02 } }, access_log = false,
      log = function() end }:start()
  end

  -- A streamed completion's request to s.
  local function streamed(s, max_tokens)
    local req = http_request.new_from_uri(("http://127.0.0.1:%d/v1/completions"):format(s.port))
    req.headers:upsert(":method", "POST")
    req.headers:upsert("content-type", "application/json")
    req:set_body(cjson.encode { model = "m", prompt = { 1, 2, 3 }, max_tokens = max_tokens, stream = true })
    return req
  end

  -- Runs client() in s's loop until it returns, then s until it drained; raises client's error.
  local function serve_while(s, client)
    local ok, err
    s.cq:wrap(function()
      ok, err = pcall(client)
      s:stop()
    end)
    s:run()
    assert(ok, err)
  end

  it("sends a chunked stream's events through its sender, the last chunk through lua-http", function()
    local s = server()
    local body, sent
    serve_while(s, function()
      local headers, stream = assert(streamed(s, 8):go(10))
      assert.are.equal("200", headers:get(":status"))
      body = assert(stream:get_body_as_string(10))
      sent = s.sender.bytes
    end)
    local texts = {}
    for data in body:gmatch("data: (.-)\n\n") do
      if data ~= "[DONE]" then texts[#texts + 1] = cjson.decode(data).choices[1].text end
    end
    local ids = {} -- the fake replica's: the row at position p draws TEXT's (p mod #TEXT + 1)th
    for p = 2, 9 do ids[#ids + 1] = TEXT[p % #TEXT + 1] end
    assert.are.equal(tok:decode(ids), table.concat(texts))
    assert.truthy(body:find("data: [DONE]\n\n", 1, true))
    -- all but the last chunk (its finish and [DONE]) came from the sender
    assert.is_true(sent > 0 and sent < #body, ("%d of %d bytes"):format(sent, #body))
    assert.is_true(s.sender.closed) -- run closed it
  end)

  it("ends a stream whose client went away mid-stream, freeing its slot for the next", function()
    local s = server()
    local freed
    serve_while(s, function()
      local _, stream = assert(streamed(s, 60):go(10))
      assert(stream:get_next_chunk(10))
      stream.connection.socket:close() -- the client leaves
      local headers, again = assert(streamed(s, 4):go(10))
      assert.are.equal("200", headers:get(":status"))
      assert.truthy(again:get_body_as_string(10):find("[DONE]", 1, true))
      freed = s.engine:slots_in_use()
    end)
    assert.are.equal(0, freed)
    assert.are.equal(1, s.metrics.requests["/v1/completions\0" .. "499"])
  end)

  -- A response of serve_http's shape whose socket is a stand-in; writes kept in `written`.
  local function response()
    local res = { written = {} }
    function res.open_events() return true end
    function res.chunk_socket() return { pollfd = function() return 99 end } end
    function res.wait(_, cond) cond:wait() return true end
    function res.write_events(_, text, last)
      res.written[#res.written + 1] = text
      res.last = last
      return true
    end
    return res
  end

  it("fails a stream whose socket failed, the others sent, and takes marks again after", function()
    local sent = {}
    local sender = { flush = function() end, send = function(_, handle, size, text)
      if handle == 1 then return false, "out of host memory for the bytes it waits for" end
      sent[#sent + 1] = size .. text
      return true
    end }
    local server = { marked_streams = {}, sender = sender }
    local broken, fine = serve_stream.new(condition.new()), serve_stream.new(condition.new())
    broken.handle, fine.handle = 1, 2
    for _, st in ipairs { broken, fine } do
      st.pending[1] = "data: x\n\n"
      serve_stream.touched(server, st)
    end
    serve_stream.send_marked(server)
    assert.matches("out of host memory", broken.failed)
    assert.are.same({ "9\r\ndata: x\n\n" }, sent)
    fine.pending[1] = "data: y\n\n"
    serve_stream.touched(server, fine)
    serve_stream.send_marked(server)
    assert.are.same({ "9\r\ndata: x\n\n", "9\r\ndata: y\n\n" }, sent)
  end)

  it("writes a stream from its coroutine when the sender cannot take its socket", function()
    local sender = { attach = function() error("sender:attach: descriptor 99: Too many open files") end }
    local st = serve_stream.new(condition.new())
    st.pending[1], st.pending[2], st.done = "data: a\n\n", "data: [DONE]\n\n", true
    local res = response()
    assert.is_true(serve_stream.run({ marked_streams = {}, sender = sender }, res, st))
    assert.are.same({ "data: a\n\ndata: [DONE]\n\n" }, res.written)
    assert.is_true(res.last)
  end)

  it("cancels a streamed job's sequences when an error is raised on the way, and raises it", function()
    local cancelled = {}
    local server = { marked_streams = {}, log = function() end,
      engine = { cancel = function(_, seq, finish) cancelled[#cancelled + 1] = { seq, finish } end } }
    local res = response()
    function res.open_events() error("lua-http: broken", 0) end
    local seqs = { {}, {} }
    local ok, err = pcall(serve_api.stream_job, server, res, { id = "cmpl-1" }, serve_stream.new(condition.new()), seqs)
    assert.is_false(ok)
    assert.are.equal("lua-http: broken", err)
    assert.are.same({ { seqs[1], "disconnected" }, { seqs[2], "disconnected" } }, cancelled)
  end)
end)
