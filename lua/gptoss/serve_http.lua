--- gptoss.serve_http (internal, gptoss.serve's): the HTTP front on lua-http, HTTP/1.1 only
-- (docs/serve.md#limits).
-- Each request runs in its own cqueues coroutine: its headers read within a deadline (408),
-- its framing checked (one Content-Length; 400 otherwise, 411 for a chunked body), the
-- bearer key checked on /v1/ (in constant time), the body read up to the limit (413 past it)
-- and within a deadline (408), a client that sent Expect: 100-continue told to go on first
-- (RFC 9110 10.1.1), JSON decoded (400 when malformed), and the route's handler called with
-- a response object that writes JSON, OpenAI error objects or server-sent events. A
-- handler's Lua error is a 500 with its message; a raised error object (serve_openai.fail)
-- is answered as it says.
--
-- lua-http is held to this from our side of its API (docs/decisions.md, "The HTTP layer
-- under gptoss serve"): a request whose body was not read to its end (refused, cut, or of
-- broken framing) gets `connection: close`, and its connection is taken from lua-http
-- (take_socket) and closed here: lua-http's stream shutdown would read the rest itself, and
-- spins forever once the client has closed (a wedged process). Headers lua-http cannot read are
-- answered on the taken socket.
--
-- lua-http is found on Lua 5.4 by gptoss.lua_http.
local cjson = require "cjson"
local cqueues = require "cqueues"
local dkjson = require "dkjson"
local errno = require "cqueues.errno"
local json_order = require "gptoss.json_order"
local serve_routes = require "gptoss.serve_routes"

local http_server, http_headers, reason_phrases =
  require("gptoss.lua_http").require("http.server", "http.headers", "http.h1_reason_phrases")

local serve_http = {}

-- Bodies are decoded by a lua-cjson instance of our own (C, nesting bounded: they come from
-- the network), strict where the module's default is not: no hex numbers, NaN or Infinity.
-- Answers are encoded by dkjson, which writes an empty list as [] (OpenAI's "choices": [])
-- where Debian 12's lua-cjson writes {}. serve_http.null is null in an answer. Keys come
-- in the order OpenAI's answers have them (the rest after, sorted).
local json = cjson.new()
json.decode_invalid_numbers(false)
serve_http.null = dkjson.null
local KEY_ORDER = { keyorder = { "id", "object", "created", "model", "choices", "index", "message", "delta", "role",
  "content", "reasoning_content", "tool_calls", "text", "logprobs", "finish_reason", "usage", "error", "token", "logprob",
  "bytes", "top_logprobs" } }
local function encode(value) return dkjson.encode(value, KEY_ORDER) end

-- The bytes dkjson's quotestring escapes or looks at further (controls, quote, backslash,
-- DEL, and the lead bytes of the invisible characters it escapes)
local ESCAPED = '[%z\1-\31"\\\127\194\216\220\225\226\239]'

--- What goes between a JSON string's quotes for text, as answers encode it (dkjson's
-- escapes): text itself when it needs no escape (most deltas of a stream), found so by
-- one look at it.
function serve_http.escape(text)
  if not text:find(ESCAPED) then return text end
  return dkjson.quotestring(text):sub(2, -2)
end

--- A JSON string of text, as answers encode it.
function serve_http.quote(text)
  return '"' .. serve_http.escape(text) .. '"'
end

--- A server-sent event's text: "data: JSON" (or the text given) and the blank line.
function serve_http.event(data)
  return "data: " .. (type(data) == "string" and data or encode(data)) .. "\n\n"
end

--- Seconds a client may take to take a chunk before it counts as gone (the sender's too).
serve_http.WRITE_TIMEOUT = 30
local WRITE_TIMEOUT = serve_http.WRITE_TIMEOUT
-- A request line or header line longer than this (CRLF included) is refused: cqueues' line
-- buffer, where lua-http reads them.
local MAX_LINE = 4096
-- A closed connection's unread input is drained for this long (and at most this much) after
-- its last answer, so that the client reads that answer rather than a reset.
local LINGER, LINGER_BYTES = 2, 1024 * 1024

--- Whether two strings are equal, in time that depends only on the expected one's length.
function serve_http.same_key(given, expected)
  local diff = #given ~ #expected
  for i = 1, #expected do
    diff = diff | ((given:byte(i) or 0) ~ expected:byte(i))
  end
  return diff == 0
end

-- Raises the error object of a refused request.
local function refuse(status, message)
  error({ status = status, type = "invalid_request_error", message = message }, 0)
end

--- Text from the client, fit to quote in an answer (JSON strings are UTF-8) or a log line.
function serve_http.printable(text)
  return (text:gsub("[^\32-\126]", "?"))
end
local printable = serve_http.printable

local function error_body(err)
  return { error = { message = err.message, type = err.type, param = err.param or serve_http.null,
    code = err.code or serve_http.null } }
end

-- Socket errors returned, not raised (cqueues' default raises most), and a timed-out read
-- not kept as the socket's error.
local function returned(socket, _, why)
  if why == errno.ETIMEDOUT then socket:clearerr("r") end
  return why
end

-- The socket of stream's connection, taken from lua-http (nil when it was taken before):
-- its errors returned, and those lua-http left on it (a parse error on the read side) cleared.
local function take_socket(stream)
  local socket = stream.connection:take_socket()
  if socket then
    socket:onerror(returned)
    socket:clearerr()
  end
  return socket
end

-- Closes a socket taken from lua-http: no more output, then its input drained until the
-- client closes, LINGER or LINGER_BYTES, so that the kernel does not answer the client's
-- unread bytes with a reset that would discard the answer written before.
local function close_lingering(socket)
  socket:shutdown("w")
  local deadline, drained = cqueues.monotime() + LINGER, 0
  while drained < LINGER_BYTES do
    local left = deadline - cqueues.monotime()
    local data = left > 0 and socket:xread(-65536, "b", left)
    if not data then break end
    drained = drained + #data
  end
  socket:close()
end

local Response = {}
Response.__index = Response

-- The headers of res's answer: its status, content type (nil: none), the CORS origin
-- when the server has one, and extra's.
local function headers_of(res, status, content_type, extra)
  local h = http_headers.new()
  h:append(":status", tostring(status))
  if content_type then h:append("content-type", content_type) end
  if res.cors then
    h:append("access-control-allow-origin", res.cors)
    if res.cors ~= "*" then h:append("vary", "origin") end
  end
  for name, value in pairs(extra or {}) do h:append(name, value) end
  return h
end

-- ok, after noting a failed write: the client has gone.
local function wrote(res, ok)
  if not ok then res.gone = true end
  return ok
end

--- Writes a whole response: a string body, or a table as JSON (to a HEAD request, only its
-- headers). False when the client is gone.
function Response:send(status, body, extra, content_type)
  self.status = status
  local text = type(body) == "string" and body or encode(body)
  local h = headers_of(self, status, content_type or "application/json", extra)
  h:append("content-length", tostring(#text))
  if self.unread then h:append("connection", "close") end -- handle closes it
  if self.head then return wrote(self, self.stream:write_headers(h, true, WRITE_TIMEOUT)) end
  return wrote(self, self.stream:write_headers(h, false, WRITE_TIMEOUT)
    and self.stream:write_chunk(text, true, WRITE_TIMEOUT))
end

--- Answers a CORS preflight: 204, the methods path takes, the headers the browser asks for.
function Response:preflight(allow, headers)
  self.status = 204
  local h = headers_of(self, 204, nil, { ["access-control-allow-methods"] = allow,
    ["access-control-allow-headers"] = headers:get("access-control-request-headers") or "authorization, content-type",
    ["access-control-max-age"] = "600" })
  if self.unread then h:append("connection", "close") end
  return wrote(self, self.stream:write_headers(h, true, WRITE_TIMEOUT))
end

--- An OpenAI error object with its status (err: serve_openai.fail's).
function Response:error(err, extra)
  return self:send(err.status, error_body(err), extra)
end

--- Starts a server-sent event stream; false when the client is gone.
function Response:open_events()
  self.status = 200
  return wrote(self, self.stream:write_headers(headers_of(self, 200, "text/event-stream",
    { ["cache-control"] = "no-cache" }), false, WRITE_TIMEOUT))
end

-- The states of a lua-http stream whose response may still be written.
local WRITABLE = { open = true, ["half closed (remote)"] = true }

--- The connection's socket where this response's chunks may go directly (a chunked body, its
-- stream still writable), else nil: they skip stream:write_chunk's checks and calls.
function Response:chunk_socket()
  local stream = self.stream
  local socket = stream.connection.socket
  if socket and stream.body_write_type == "chunked" and WRITABLE[stream.state] then return socket end
  return nil
end

--- The size line that frames n bytes as an HTTP/1.1 chunk, and the chunk's end.
function serve_http.chunk_head(n) return ("%x\r\n"):format(n) end
serve_http.CHUNK_END = "\r\n"

--- Writes events (serve_http.event's texts, joined) in one chunk; last ends the stream.
-- False when the client is gone. A chunk before the last goes to chunk_socket at once (the
-- end goes through lua-http, which closes the stream's state).
function Response:write_events(text, last)
  local socket = self:chunk_socket()
  if last or text == "" or not socket then
    return wrote(self, self.stream:write_chunk(text, last, WRITE_TIMEOUT))
  end
  return wrote(self, socket:xwrite(serve_http.chunk_head(#text) .. text .. serve_http.CHUNK_END, "n", WRITE_TIMEOUT))
end

--- Waits for cond to be signalled, or for the client to go: false once it has gone (then
-- without waiting). A client that has sent its whole request and closes its connection (or
-- resets it) gives end of file there, seen without reading past it. Not watched: one that
-- sends more first (a pipelined request, lua-http's to read), and one that sent
-- `Connection: close`, whose read side lua-http shuts once the request is read (end of
-- file there says nothing of the client): their departure shows when the answer is written.
function Response:wait(cond)
  if self.watched == nil then self.watched = self.watch and self.stream.connection.socket or false end
  local socket = self.watched
  if socket then
    local more, _, why = socket:fill(1, 0) -- also asks the controller to wake us when it is readable
    if more then
      self.watched = false
    elseif why ~= errno.ETIMEDOUT then
      self.gone = true
      return false
    end
  end
  if self.watched then cqueues.poll(cond, socket) else cond:wait() end
  return true
end

-- Answers Expect as RFC 9110 10.1.1 says: 100 Continue at once for 100-continue (ignored
-- from an HTTP/1.0 client), 417 for any other expectation.
local function meet_expectation(stream, headers)
  local expect = headers:get("expect")
  if not expect then return end
  if expect:lower():match("^%s*(.-)%s*$") ~= "100-continue" then
    refuse(417, ("this server meets no expectation but 100-continue (Expect: %s)"):format(printable(expect)))
  end
  if stream.peer_version >= 1.1 then
    local continue = http_headers.new()
    continue:append(":status", "100")
    stream:write_headers(continue, false, WRITE_TIMEOUT)
  end
end

-- The length of a request's body as RFC 9112 6.3 frames it: one Content-Length of digits
-- (none: no body). Transfer-Encoding is refused: with a Content-Length (400), the length is
-- ambiguous; alone (411), because lua-http holds a whole chunk (up to 4 GiB) before it hands
-- any of it over, past any limit of ours.
local function body_length(headers)
  local lengths = headers:get_as_sequence("content-length")
  if headers:has("transfer-encoding") then
    if lengths.n > 0 then
      refuse(400, "Content-Length and Transfer-Encoding together: the body's length is ambiguous (RFC 9112 6.3)")
    end
    refuse(411, "this server reads a body of a Content-Length only, not Transfer-Encoding")
  end
  if lengths.n > 1 then refuse(400, "more than one Content-Length (RFC 9112 6.3)") end
  local text = lengths[1] or "0"
  if not text:match("^%d+$") or #text > 15 then refuse(400, "Content-Length must be a number of bytes") end
  return tonumber(text)
end

-- The request's body of length bytes, at most opts.max_body and within opts.body_timeout
-- seconds (an error object past either); nil when the client closed before sending it whole.
local function read_body(res, length, headers, opts)
  local stream, limit = res.stream, opts.max_body
  if length > limit then refuse(413, ("the request body is over this server's limit of %d bytes"):format(limit)) end
  meet_expectation(stream, headers)
  local deadline = cqueues.monotime() + opts.body_timeout
  local parts, size = {}, 0
  while size < length do
    local chunk, why, code = stream:get_next_chunk(math.max(deadline - cqueues.monotime(), 0))
    if not chunk then
      if code == errno.ETIMEDOUT then
        refuse(408, ("the request's body did not arrive within %g s"):format(opts.body_timeout))
      end
      if why and code ~= errno.ECONNRESET and code ~= errno.EPIPE then refuse(400, "reading the body: " .. why) end
      return nil
    end
    size = size + #chunk
    parts[#parts + 1] = chunk
  end
  res.unread = false
  return table.concat(parts)
end

--- A request's JSON body decoded (an error object when it is not JSON).
function serve_http.decode(text)
  local ok, body = pcall(json.decode, text)
  if not ok then refuse(400, "the body is not valid JSON: " .. tostring(body):gsub("^.-: ", "")) end
  -- a schema in it keeps its properties' order (gptoss.serve_structured); a body that never
  -- writes "properties" holds none whose order is asked, and is not kept for the walk
  if text:find('"properties"', 1, true) then json_order.note(text, body) end
  return body
end

-- Whether a request asks for its connection to be closed after the answer.
local function asks_close(headers)
  return (headers:get_comma_separated("connection") or ""):lower():find("%f[%w]close%f[^%w]") ~= nil
end

-- Answers a request whose headers were read: routes[method .. " " .. path] =
-- function(res, body_text, headers, arg), a path's {part} given as arg (gptoss.serve_routes);
-- HEAD is answered as GET without the body, OPTIONS as a CORS preflight when the server has
-- an origin.
local function answer(opts, res, headers)
  local method, path = headers:get(":method"), (headers:get(":path") or ""):match("^[^?]*")
  local endpoint, arg = opts.route_table:find(path)
  res.endpoint = endpoint or "other" -- /metrics' labels stay a bounded set
  res.method, res.path = method, path
  res.head, res.watch = method == "HEAD", not asks_close(headers)
  local route = endpoint and opts.routes[(res.head and "GET" or method) .. " " .. endpoint]
  local length = body_length(headers) -- a request of broken framing is refused whatever it asks
  res.unread = length > 0
  if endpoint and method == "OPTIONS" and opts.cors_origin then -- a browser's preflight carries no key
    return res:preflight(opts.route_table.allow[endpoint], headers)
  end
  if opts.api_key and path:find("^/v1/") then -- as vLLM: /health and /metrics stay open
    local given = (headers:get("authorization") or ""):match("^Bearer%s+(.-)%s*$") or ""
    if not serve_http.same_key(given, opts.api_key) then
      error({ status = 401, type = "invalid_request_error", code = "invalid_api_key",
        message = "a valid API key is needed: Authorization: Bearer KEY" }, 0)
    end
  end
  if not route then
    local allow = endpoint and opts.route_table.allow[endpoint]
    if allow then
      res.allow = allow
      refuse(405, ("%s takes %s, not %s"):format(path, allow, printable(method)))
    end
    refuse(404, ("no such endpoint: %s %s"):format(printable(method), printable(path)))
  end
  local body = read_body(res, length, headers, opts)
  if body then route(res, body, headers, arg) else res.gone = true end
end

-- What to answer to a request whose headers lua-http could not read (code: the errno it
-- gave, why: its message): a status and a message, or nil when the client left.
-- request_line: whether the request line itself was not read.
local function header_failure(socket, why, code, request_line, opts)
  if code == errno.ETIMEDOUT then
    return 408, ("the request's headers did not arrive within %g s"):format(opts.header_timeout)
  elseif code == errno.E2BIG then
    return 431, "more than 100 header fields"
  elseif code == errno.EILSEQ then
    local what = request_line and "request line" or "header line"
    local line = socket:xread("*L", "b", 0) or "" -- lua-http puts back the line it could not parse
    if not line:find("\n$") then
      return request_line and 414 or 431, ("a %s longer than %d bytes"):format(what, MAX_LINE)
    elseif request_line and line:match("^%S+ %S+ HTTP/%d") and not line:match(" HTTP/1%.[01]\r\n$") then
      return 505, "this server speaks HTTP/1.1 only"
    end
    return 400, "a malformed " .. what
  elseif code == nil and why then
    return 400, "malformed headers: " .. why
  end
end

-- Answers, on the connection's socket taken from lua-http, a request whose headers it could
-- not read, and closes the connection; after any answer before it on the connection (a
-- pipelining client's), which lua-http writes in order.
local function refuse_headers(opts, stream, why, code)
  local connection = stream.connection
  if connection.pipeline:peek() ~= stream then cqueues.poll(stream.pipeline_cond, WRITE_TIMEOUT) end
  local request_line = stream.state == "idle"
  local socket = take_socket(stream)
  if not socket then return end
  local status, message = header_failure(socket, why, code, request_line, opts)
  if status then
    local body = encode(error_body { type = "invalid_request_error", message = message })
    local head = "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    socket:xwrite(head:format(status, reason_phrases[tostring(status)], #body) .. body, "n", WRITE_TIMEOUT)
    opts.on_answered("other", status)
  end
  close_lingering(socket)
end

-- Answers one request on stream.
local function handle(opts, stream)
  local read, headers, why, code = pcall(stream.get_headers, stream, opts.header_timeout)
  if not read then headers, why, code = nil, "a field lua-http could not parse", nil end -- it raised on one
  if not headers then return refuse_headers(opts, stream, why, code) end
  local res = setmetatable({ stream = stream, endpoint = "other", unread = true, cors = opts.cors_origin,
    started = cqueues.monotime() }, Response)
  local ok, err = pcall(answer, opts, res, headers)
  if not ok then
    if type(err) ~= "table" then
      opts.log("error answering " .. res.endpoint .. ": " .. tostring(err))
      err = { status = 500, type = "server_error", message = tostring(err) }
    end
    local extra = { ["retry-after"] = err.retry_after and tostring(err.retry_after), allow = res.allow }
    if not res.status then res:error(err, extra) end
  end
  opts.on_answered(res.endpoint, res.gone and 499 or res.status or 499, res)
  if res.unread or res.gone then -- a departed client's connection too: lua-http would write it a bare 503
    local socket = take_socket(stream)
    if socket then close_lingering(socket) end
  end
end

--- Listens on opts.host:opts.port (0: any free port) in controller cq: opts.routes,
-- opts.api_key (nil: none), opts.cors_origin (nil: none), opts.max_body,
-- opts.header_timeout and opts.body_timeout (seconds), opts.max_connections,
-- opts.log(line), opts.on_answered(endpoint, status, res or nil): res.method, res.path and
-- res.started (cqueues.monotime) of a request whose headers were read.
-- Returns the lua-http server and the port it took.
function serve_http.listen(cq, opts)
  opts.route_table = serve_routes.new(opts.routes, opts.cors_origin ~= nil)
  local server, err = http_server.listen {
    host = opts.host, port = opts.port, tls = false, cq = cq, reuseaddr = true, version = 1.1,
    max_concurrent = opts.max_connections, intra_stream_timeout = opts.header_timeout,
    onstream = function(_, stream)
      local ok, why = pcall(handle, opts, stream)
      if not ok then
        opts.log("error answering a request: " .. tostring(why))
        local socket = take_socket(stream)
        if socket then socket:close() end
      end
    end,
    onerror = function(_, _, op, why) opts.log(("http: %s: %s"):format(op, tostring(why))) end,
  }
  if not server then error(("cannot listen on %s:%s: %s"):format(opts.host, opts.port, err), 0) end
  local ok, why = server:listen()
  if not ok then error(("cannot listen on %s:%s: %s"):format(opts.host, opts.port, why), 0) end
  local _, _, port = server:localname()
  return server, port
end

--- Stops accepting connections; the ones open finish what they are doing.
function serve_http.stop_accepting(server)
  if server.socket then
    server.socket:close()
    server.socket = nil
    server.pause_cond:signal()
  end
end

return serve_http
