-- gptoss serve against hostile and broken clients: each case is a client that
-- once wedged, killed or starved the server, or was answered wrongly, and ends with /health
-- answering and a normal request served. The raw clients are cqueues sockets of this
-- process, every read and write bounded; the servers are child processes (serve_helpers).
-- Deadlines are made short through the server's flags, so that no verdict waits on a timing:
-- a slow client is cut when its deadline passes, however loaded the machine.
local cqueues = require "cqueues"
local errno = require "cqueues.errno"
local dkjson = require "dkjson"
local gptoss = require "gptoss"
local H = require "helpers"
local SH = require "serve_helpers"

local q = H.shell_quote
local WAIT = 30 -- seconds a client waits for an answer before its case fails
local NO_STOPS = '"logit_bias":{"199999":-100,"200002":-100,"200012":-100}' -- the 7m model's stop ids barred

-- A server of SH.start whose requests name model.
local function serve(model, args, script)
  local s = SH.start(args, script)
  s.model = model
  return s
end

-- A connection to server s: binary, errors returned, a timed-out read not kept as its error.
local function connect(s)
  local c = require("cqueues.socket").connect("127.0.0.1", s.port)
  c:setmode("b", "b")
  c:onerror(function(sock, _, why)
    if why == errno.ETIMEDOUT then sock:clearerr("r") end
    return why
  end)
  return c
end

-- What c reads until the server closes it or WAIT seconds pass, and whether it closed.
local function read_all(c)
  local parts, deadline = {}, cqueues.monotime() + WAIT
  while true do
    local data, why = c:xread(-65536, "b", math.max(deadline - cqueues.monotime(), 0))
    if not data then return table.concat(parts), why ~= errno.ETIMEDOUT end
    parts[#parts + 1] = data
  end
end

local function status_of(text) return tonumber(text:match("^HTTP/1%.1 (%d%d%d) ")) end

-- Sends request on a new connection, its write side then shut when shut_write: the answer's
-- status, the answer and whether the server closed the connection.
local function exchange(s, request, shut_write)
  local c = connect(s)
  c:xwrite(request, "n", WAIT)
  if shut_write then c:shutdown("w") end
  local text, closed = read_all(c)
  c:close()
  return status_of(text), text, closed
end

-- Sends head, then piece after each 0.3 s without an answer: the answer's status and whether the
-- server closed the connection (nil after WAIT seconds without an answer).
local function trickle(s, head, piece)
  local c = connect(s)
  c:xwrite(head, "n", WAIT)
  local deadline = cqueues.monotime() + WAIT
  while cqueues.monotime() < deadline do
    local first = c:xread(-65536, "b", 0.3)
    if first then
      local rest, closed = read_all(c)
      c:close()
      return status_of(first .. rest), closed
    end
    c:xwrite(piece, "n", WAIT)
  end
  c:close()
end

local function post(path, body, extra)
  return ("POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s")
    :format(path, extra or "", #body, body)
end

-- The body of a completion of s's model, with more fields (a JSON text) when given.
local function completion(s, more)
  return ('{"model":"%s","prompt":"Hi","max_tokens":2%s}'):format(s.model, more and "," .. more or "")
end

-- Asserts that s answers /health and a completion.
local function still_serves(s)
  local headers, body = SH.curl(s, "/health")
  assert.truthy(headers:find("^HTTP/1.1 200"), "/health: " .. headers .. body)
  headers, body = SH.curl(s, "/v1/completions", "-d " .. q(completion(s)))
  assert.truthy(headers:find("^HTTP/1.1 200"), "a completion: " .. headers .. body)
  assert.are.equal("text_completion", dkjson.decode(body).object)
end

-- The count of s's answers to endpoint with status.
local function answers(s, endpoint, status)
  return SH.metric(s, ('gptoss_requests_total{endpoint="%s",status="%d"}'):format(endpoint, status)) or 0
end

describe("gptoss serve against hostile clients", function()
  if SH.why_not_http then
    pending(SH.why_not_http)
    return
  end
  local s
  setup(function()
    s = serve("7m", { "7m", "--port", "0", "--slots", "4", "--ctx", "256", "--max-body", "4096",
      "--header-timeout", "2", "--body-timeout", "2" })
  end)
  teardown(function()
    if not s then return SH.kill_leftovers() end
    local code, log = SH.stop(s)
    SH.kill_leftovers()
    assert.are.equal(0, code)
    assert.falsy(log:find("warning", 1, true), log) -- loopback: no warning of an open server
  end)
  after_each(H.cleanup)

  it("answers a body over --max-body with 413 and closes, unread (item 1)", function()
    local file = H.tmp()
    H.write_file(file, ("x"):rep(5 * 1024 * 1024))
    local headers = SH.curl(s, "/v1/completions", "--data-binary @" .. q(file)) -- curl sends Expect: 100-continue
    assert.truthy(headers:find("^HTTP/1.1 413"), headers)
    local status, text, closed = exchange(s,
      "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 10000000\r\n\r\n" .. ("x"):rep(100000))
    assert.are.same({ 413, true }, { status, closed }, text)
    assert.truthy(text:find("4096 bytes", 1, true), text)
    still_serves(s)
  end)

  it("ends a request whose client closes mid-body: one alone, forty together (item 1)", function()
    local gone = answers(s, "/v1/completions", 499)
    local c = connect(s)
    c:xwrite("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n0123456789", "n", WAIT)
    c:close()
    local slow = {}
    for i = 1, 40 do
      slow[i] = connect(s)
      slow[i]:xwrite("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{", "n", WAIT)
    end
    for _, each in ipairs(slow) do each:close() end
    assert.are.equal(gone + 41, SH.metric_reaches(s, 'gptoss_requests_total{endpoint="/v1/completions",status="499"}',
      gone + 41))
    still_serves(s)
  end)

  it("refuses broken framing with 400 (411 for a chunked body) and closes the connection (items 1, 2, 8)", function()
    for _, case in ipairs {
      { 400, "malformed headers: invalid content-length",
        "GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n" },
      { 400, "Content-Length must be a number", "GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n" },
      { 400, "more than one Content-Length", post("/v1/completions", completion(s), "content-length: 5\r\n") },
      { 400, "Content-Length and Transfer-Encoding together",
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
        .. "3\r\n{}\n\r\n0\r\n\r\n" },
      { 400, "malformed headers", -- lua-http raises on it
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: ,,,\r\n\r\n" },
      { 411, "not Transfer-Encoding",
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nfffffff0\r\nxxxx" },
    } do
      local status, text, closed = exchange(s, case[3])
      assert.are.same({ case[1], true }, { status, closed }, case[3] .. " -> " .. text)
      assert.truthy(text:find(case[2], 1, true), text)
      assert.are.equal(1, select(2, text:gsub("HTTP/1%.1 %d%d%d ", "")), text) -- one answer, nothing read past it
    end
    still_serves(s)
  end)

  it("answers headers that stall or trickle with 408, and those over its limits with 414 and 431 (items 7, 11)",
    function()
    local status, text, closed = exchange(s, "GET /hea")
    assert.are.same({ 408, true }, { status, closed }, text)
    status, text, closed = exchange(s, "GET /health HTTP/1.1\r\nhost: x\r\n")
    assert.are.same({ 408, true }, { status, closed }, text)
    assert.are.same({ 408, true }, { trickle(s, "GET /health HTTP/1.1\r\n", "x-more: yes\r\n") })
    local fields = {}
    for i = 1, 150 do fields[i] = ("x-field-%d: %d\r\n"):format(i, i) end
    for _, case in ipairs {
      { 414, "GET /health?" .. ("a"):rep(5000) .. " HTTP/1.1\r\nhost: x\r\n\r\n" },
      { 431, "GET /health HTTP/1.1\r\nhost: x\r\nx-big: " .. ("a"):rep(5000) .. "\r\n\r\n" },
      { 431, "GET /health HTTP/1.1\r\nhost: x\r\n" .. table.concat(fields) .. "\r\n" },
      { 400, "GET /health HTTP/1.1\r\nhost : x\r\n\r\n" },
    } do
      status, text, closed = exchange(s, case[2])
      assert.are.same({ case[1], true }, { status, closed }, case[2]:sub(1, 60) .. " -> " .. text)
    end
    -- the longest line it reads, CRLF included
    local longest = "GET /health?" .. ("a"):rep(4096 - #"GET /health? HTTP/1.1\r\n") .. " HTTP/1.1\r\n"
    assert.are.equal(4096, #longest)
    assert.are.equal(200, (exchange(s, longest .. "host: x\r\nconnection: close\r\n\r\n")))
    still_serves(s)
  end)

  it("answers a body that trickles past --body-timeout with 408 (item 7)", function()
    local head = "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n"
    assert.are.same({ 408, true }, { trickle(s, head, " ") })
    still_serves(s)
  end)

  it("speaks HTTP/1.1 only: HTTP/2's preface is answered 505 (item 6)", function()
    local preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0"
    local status, text, closed = exchange(s, preface)
    assert.are.same({ 505, true }, { status, closed }, text)
    still_serves(s)
  end)

  it("decodes JSON strictly: hex numbers, NaN and Infinity are 400 (item 11)", function()
    for _, value in ipairs { "0x2", "NaN", "Infinity", "-Infinity" } do
      local status, text = exchange(s, post("/v1/completions", completion(s, '"temperature":' .. value),
        "connection: close\r\n"))
      assert.are.equal(400, status, value .. " -> " .. text)
      assert.truthy(text:find("not valid JSON", 1, true), text)
    end
    still_serves(s)
  end)

  it("answers HEAD as GET without the body, and 405 with Allow (item 11)", function()
    local status, text = exchange(s, "HEAD /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert.are.equal(200, status, text)
    assert.truthy(text:find("\r\ncontent%-length: 3\r\n.*\r\n\r\n$"), text)
    status, text = exchange(s, "HEAD /v1/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert.are.equal(405, status, text)
    assert.truthy(text:find("\r\nallow: POST\r\n.*\r\n\r\n$"), text)
    status, text = exchange(s, "DELETE /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert.are.equal(405, status, text)
    assert.truthy(text:find("\r\nallow: GET, HEAD\r\n"), text)
    assert.truthy(text:find('"message":"/health takes GET, HEAD, not DELETE"', 1, true), text)
    still_serves(s)
  end)
end)

describe("gptoss serve against hostile clients, on servers of their own", function()
  if SH.why_not_http then
    pending(SH.why_not_http)
    return
  end
  after_each(H.cleanup)
  teardown(SH.kill_leftovers)
  -- the fake replica at 20 ms a step never draws a stop id: a stream of 1000 ids cannot end
  -- within 20 s, whatever the load
  local function scripted()
    return serve("scripted", { "--unscripted", "--delay", "0.02" }, "tests/serve_scripted.lua")
  end
  local function long_stream(s)
    local c = connect(s)
    c:xwrite(post("/v1/completions", ('{"model":"scripted","prompt":"Hi","max_tokens":1000,"stream":true}')), "n", WAIT)
    local first = c:xread("*L", "b", WAIT)
    assert.are.equal("HTTP/1.1 200 OK\r\n", first)
    return c
  end

  it("answers a Connection: close client (urllib's request) whole, and counts a killed stream 499 (items 3, 11)",
    function()
    local s = scripted()
    local headers, body = SH.curl(s, "/v1/completions", "-H 'Connection: close' -d " .. q(completion(s)))
    assert.truthy(headers:find("^HTTP/1.1 200"), headers .. body)
    assert.are.equal(2, dkjson.decode(body).usage.completion_tokens)
    local urllib = ("POST /v1/completions HTTP/1.1\r\nAccept-Encoding: identity\r\nContent-Type: application/json\r\n"
      .. "Content-Length: %d\r\nHost: 127.0.0.1:%d\r\nUser-Agent: Python-urllib/3.11\r\nConnection: close\r\n\r\n%s")
      :format(#completion(s), s.port, completion(s))
    local status, text = exchange(s, urllib)
    assert.are.equal(200, status, text)
    assert.are.equal(2, dkjson.decode(text:match("\r\n\r\n(.*)$")).usage.completion_tokens)
    local gone = answers(s, "/v1/completions", 499)
    long_stream(s):close()
    assert.are.equal(gone + 1, SH.metric_reaches(s, 'gptoss_requests_total{endpoint="/v1/completions",status="499"}',
      gone + 1))
    still_serves(s)
    assert.are.equal(0, (SH.stop(s)))
  end)

  it("answers /health and new requests 503 while it drains, then exits 0 (item 11)", function()
    local s = scripted()
    local stream = long_stream(s)
    os.execute("kill -TERM " .. s.pid)
    local deadline, headers, body = os.time() + WAIT, "", ""
    repeat
      headers, body = SH.curl(s, "/health")
      assert.truthy(headers:find("^HTTP/1.1 200") or headers:find("^HTTP/1.1 503"), "/health: " .. headers .. body)
    until headers:find("^HTTP/1.1 503") or os.time() > deadline
    assert.are.equal("shutting down\n", body)
    headers = SH.curl(s, "/v1/completions", "-d " .. q(completion(s)))
    assert.truthy(headers:find("^HTTP/1.1 503"), headers)
    stream:close() -- the drain waits for this stream; cancelled, it ends
    assert.are.equal(0, (SH.stop(s)))
  end)

  it("holds --max-connections connections at once; the next is accepted when one ends (item 7)", function()
    local s = serve("7m", { "7m", "--port", "0", "--slots", "2", "--ctx", "256", "--max-connections", "2",
      "--header-timeout", "2" })
    local held = {}
    for i = 1, 2 do
      held[i] = connect(s)
      held[i]:xwrite("GET /health HTTP/1.1\r\n", "n", WAIT) -- then nothing: cut at the header deadline
    end
    local status, text = exchange(s, "GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert.are.equal(200, status, text)
    -- the server wrote a held connection's 408 before it accepted this one: it is here already
    local first = {}
    for i, c in ipairs(held) do first[i] = c:xread(-65536, "b", 0) or "" end
    assert.is_true(first[1] ~= "" or first[2] ~= "", "this connection was accepted while both held ones were open")
    for i, c in ipairs(held) do
      assert.are.equal(408, status_of(first[i] .. read_all(c)), "held connection " .. i)
      c:close()
    end
    still_serves(s)
    assert.are.equal(0, (SH.stop(s)))
  end)

  it("refuses an empty API key, given or from GPTOSS_API_KEY, and limits that are not, and warns of a host other than "
    .. "loopback without a key (item 9)", function()
    local env = { GPTOSS_TOKENIZER = H.TREE.root .. "build/tokenizer.bin" }
    local code, out, err = H.gptoss(pending, H.tmpdir(), { "serve", "7m", "--port", "0", "--header-timeout", "0" }, env)
    assert.are.same({ 1, "" }, { code, out }, err)
    assert.truthy(err:find("--header-timeout: '0' is not a number of seconds > 0", 1, true), err)
    local serve_new, model = require("gptoss.serve").new, gptoss.synthetic("7m")
    H.expect_error(function() serve_new { model = model, body_timeout = 0 / 0 } end,
      "serve: body_timeout must be a number of seconds > 0")
    H.expect_error(function() serve_new { model = model, max_connections = 0 } end,
      "serve: max_connections must be an integer >= 1 (got 0)")
    code, out, err = H.gptoss(pending, H.tmpdir(), { "serve", "7m", "--port", "0", "--api-key", "" }, env)
    assert.are.same({ 1, "" }, { code, out }, err)
    assert.truthy(err:find("--api-key is empty (an unset variable?)", 1, true), err)
    env.GPTOSS_API_KEY = ""
    code, out, err = H.gptoss(pending, H.tmpdir(), { "serve", "7m", "--port", "0" }, env)
    assert.are.same({ 1, "" }, { code, out }, err)
    assert.truthy(err:find("GPTOSS_API_KEY is empty", 1, true), err)
    local s = serve("7m", { "7m", "--port", "0", "--host", "0.0.0.0", "--slots", "1", "--ctx", "256" })
    local code_, log = SH.stop(s)
    assert.are.equal(0, code_)
    assert.truthy(log:find("warning: listening on 0.0.0.0 without an API key", 1, true), log)
  end)

  it("refuses h2load's HTTP/2 and serves all of its HTTP/1.1 load (item 6)", function()
    if not SH.have("h2load") then
      pending("h2load is missing (Debian's nghttp2-client)")
      return
    end
    local s = serve("7m", { "7m", "--port", "0", "--slots", "2", "--ctx", "256" })
    local function h2load(words)
      local p = assert(io.popen(("timeout 120 %sh2load %s http://127.0.0.1:%d/health 2>&1")
        :format(SH.UNSANITIZED, words, s.port)))
      local out = p:read("a")
      p:close()
      return out:match("\nrequests: ([^\n]*)") or out
    end
    local out = h2load("-n 100 -c 1 -m 100")
    assert.truthy(out:find("0 succeeded, 100 failed", 1, true), out)
    out = h2load("--h1 -n 1000 -c 10")
    assert.truthy(out:find("1000 succeeded, 0 failed", 1, true), out)
    still_serves(s)
    assert.are.equal(0, (SH.stop(s)))
  end)
end)
