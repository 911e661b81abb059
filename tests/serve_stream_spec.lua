-- gptoss.serve_stream in a listening server of this process (a fake replica whose steps take
-- a device's time): a chunked stream's events go out through the server's sender (its bytes
-- counted there), its last chunk through lua-http; a client gone mid-stream frees its slot.
local gptoss = require "gptoss"

local ok_http = pcall(require, "gptoss.serve_http")

describe("a listening server's streams", function()
  if not ok_http then
    pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)")
    return
  end
  local cjson = require "cjson"
  local cqueues = require "cqueues"
  local fake_replica = require "fake_replica"
  local serve = require "gptoss.serve"
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

  it("sends a chunked stream's events through its sender, the last chunk through lua-http", function()
    local s = server()
    local body, sent
    s.cq:wrap(function()
      local headers, stream = assert(streamed(s, 8):go(10))
      assert.are.equal("200", headers:get(":status"))
      body = assert(stream:get_body_as_string(10))
      sent = s.sender.bytes
      s:stop()
    end)
    s:run()
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
    s.cq:wrap(function()
      local _, stream = assert(streamed(s, 60):go(10))
      assert(stream:get_next_chunk(10))
      stream.connection.socket:close() -- the client leaves
      local headers, again = assert(streamed(s, 4):go(10))
      assert.are.equal("200", headers:get(":status"))
      assert.truthy(again:get_body_as_string(10):find("[DONE]", 1, true))
      freed = s.engine:slots_in_use()
      s:stop()
    end)
    s:run()
    assert.are.equal(0, freed)
    assert.are.equal(1, s.metrics.requests["/v1/completions\0" .. "499"])
  end)
end)
