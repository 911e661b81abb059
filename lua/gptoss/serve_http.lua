--- gptoss.serve_http (internal, gptoss.serve's): the HTTP front on lua-http. Each request
-- runs in its own cqueues coroutine: the bearer key is checked on /v1/ (in constant time), the body
-- read up to the limit (413 past it; a client that sent Expect: 100-continue is told to go
-- on first, RFC 9110 10.1.1), JSON decoded (400 when malformed), and the route's handler
-- called with a response object that writes JSON, OpenAI error objects or server-sent
-- events. A handler's Lua error is a 500 with its message; a raised error object
-- (serve_openai.fail) is answered as it says.
--
-- Debian 12 packages lua-http for Lua 5.1 to 5.3 only; its code is plain Lua that runs on
-- 5.4 (upstream supports 5.4 since 0.4), so when http.server is not on 5.4's path the
-- Debian directory of those versions' pure-Lua modules (share/lua/5.1 beside each share/lua/5.4
-- on the path, a private prefix's too) is searched after the usual ones.
local cjson = require "cjson"
local cqueues = require "cqueues"
local dkjson = require "dkjson"
local errno = require "cqueues.errno"

local function require_http()
  if not package.searchpath("http.server", package.path) then
    local extra = {}
    for entry in package.path:gmatch("[^;]+") do
      if entry:find("/share/lua/5.4/", 1, true) then extra[#extra + 1] = (entry:gsub("/share/lua/5%.4/", "/share/lua/5.1/")) end
    end
    package.path = package.path .. ";" .. table.concat(extra, ";")
  end
  return require "http.server", require "http.headers"
end
local http_server, http_headers = require_http()

local serve_http = {}

-- Bodies are decoded by lua-cjson (C, strict, nesting bounded: they come from the network)
-- and answers encoded by dkjson, which writes an empty list as [] (OpenAI's "choices": [])
-- where Debian 12's lua-cjson writes {}. serve_http.null is null in an answer. Keys come
-- in the order OpenAI's answers have them (the rest after, sorted).
serve_http.null = dkjson.null
local KEY_ORDER = { keyorder = { "id", "object", "created", "model", "choices", "index", "message", "delta", "role",
  "content", "reasoning_content", "tool_calls", "text", "logprobs", "finish_reason", "usage", "error" } }
local function encode(value) return dkjson.encode(value, KEY_ORDER) end

--- A JSON string of text, as answers encode it.
serve_http.quote = dkjson.quotestring

--- A server-sent event's text: "data: JSON" (or the text given) and the blank line.
function serve_http.event(data)
  return "data: " .. (type(data) == "string" and data or encode(data)) .. "\n\n"
end

-- Seconds a client may take to take a chunk of the response before it counts as gone.
local WRITE_TIMEOUT = 30

--- Whether two strings are equal, in time that depends only on the expected one's length.
function serve_http.same_key(given, expected)
  local diff = #given ~ #expected
  for i = 1, #expected do
    diff = diff | ((given:byte(i) or 0) ~ expected:byte(i))
  end
  return diff == 0
end

local Response = {}
Response.__index = Response

local function headers_of(status, content_type, extra)
  local h = http_headers.new()
  h:append(":status", tostring(status))
  h:append("content-type", content_type)
  for name, value in pairs(extra or {}) do h:append(name, value) end
  return h
end

--- Writes a whole response: a string body, or a table as JSON.
function Response:send(status, body, extra, content_type)
  self.status = status
  local text = type(body) == "string" and body or encode(body)
  local ok = self.stream:write_headers(headers_of(status, content_type or "application/json", extra), false,
    WRITE_TIMEOUT)
  return ok and self.stream:write_chunk(text, true, WRITE_TIMEOUT)
end

--- An OpenAI error object with its status (err: serve_openai.fail's).
function Response:error(err, extra)
  return self:send(err.status, { error = { message = err.message, type = err.type, param = err.param or serve_http.null,
    code = err.code or serve_http.null } }, extra)
end

--- Starts a server-sent event stream; false when the client is gone.
function Response:open_events()
  self.status = 200
  return self.stream:write_headers(headers_of(200, "text/event-stream", { ["cache-control"] = "no-cache" }), false,
    WRITE_TIMEOUT) ~= nil
end

--- Writes events (serve_http.event's texts, joined) in one chunk; last ends the stream.
-- False when the client is gone.
function Response:write_events(text, last)
  return self.stream:write_chunk(text, last, WRITE_TIMEOUT) ~= nil
end

--- Waits for cond to be signalled, or for the client to go: false once it has gone (then
-- without waiting). An HTTP/1 client that has sent its whole request and closes its
-- connection (or resets it) gives end of file there, seen without reading past it; one
-- that sends more first (a pipelined request, lua-http's to read) is no longer watched,
-- nor is an HTTP/2 connection, whose frames lua-http's reader owns.
function Response:wait(cond)
  if self.watched == nil then
    local connection = self.stream.connection
    self.watched = connection.version < 2 and connection.socket or false
  end
  local socket = self.watched
  if socket then
    local more, _, why = socket:fill(1, 0) -- also asks the controller to wake us when it is readable
    if more then
      self.watched = false
    elseif why ~= errno.ETIMEDOUT then
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
    error({ status = 417, type = "invalid_request_error",
      message = ("this server meets no expectation but 100-continue (Expect: %s)"):format(expect) }, 0)
  end
  if stream.peer_version >= 1.1 then
    local continue = http_headers.new()
    continue:append(":status", "100")
    stream:write_headers(continue, false, WRITE_TIMEOUT)
  end
end

-- The request's body, at most limit bytes: nil and an error object past it.
local function read_body(stream, headers, limit)
  local too_big = { status = 413, type = "invalid_request_error",
    message = ("the request body is over this server's limit of %d bytes"):format(limit) }
  local declared = headers:get("content-length")
  local length = declared and tonumber(declared)
  if length and length > limit then return nil, too_big end
  meet_expectation(stream, headers)
  local parts, size = {}, 0
  while true do
    local chunk, err = stream:get_next_chunk(WRITE_TIMEOUT)
    if not chunk then
      if err then return nil, { status = 400, type = "invalid_request_error", message = "reading the body: " .. err } end
      break
    end
    size = size + #chunk
    if size > limit then return nil, too_big end
    parts[#parts + 1] = chunk
  end
  return table.concat(parts)
end

--- A request's JSON body decoded (an error object when it is not JSON).
function serve_http.decode(text)
  local ok, body = pcall(cjson.decode, text)
  if not ok then
    error({ status = 400, type = "invalid_request_error",
      message = "the body is not valid JSON: " .. tostring(body):gsub("^.-: ", "") }, 0)
  end
  return body
end

-- Answers one request: routes[method .. " " .. path] = function(res, body_text, headers).
local function handle(opts, stream)
  local res = setmetatable({ stream = stream }, Response)
  local headers = stream:get_headers(WRITE_TIMEOUT)
  if not headers then return end
  local method, path = headers:get(":method"), (headers:get(":path") or ""):match("^[^?]*")
  res.endpoint = opts.paths[path] and path or "other" -- /metrics' labels stay a bounded set
  local route = opts.routes[method .. " " .. path]
  local ok, err = pcall(function()
    if opts.api_key and path:find("^/v1/") then -- as vLLM: /health and /metrics stay open
      local given = (headers:get("authorization") or ""):match("^Bearer%s+(.-)%s*$") or ""
      if not serve_http.same_key(given, opts.api_key) then
        error({ status = 401, type = "invalid_request_error", code = "invalid_api_key",
          message = "a valid API key is needed: Authorization: Bearer KEY" }, 0)
      end
    end
    if not route then
      local known = opts.paths[path]
      error({ status = known and 405 or 404, type = "invalid_request_error",
        message = known and ("%s does not take %s"):format(path, method) or ("no such endpoint: %s %s"):format(method, path) },
        0)
    end
    local body, why = read_body(stream, headers, opts.max_body)
    if not body then error(why, 0) end
    route(res, body, headers)
  end)
  if not ok then
    if type(err) ~= "table" then
      opts.log("error answering " .. path .. ": " .. tostring(err))
      err = { status = 500, type = "server_error", message = tostring(err) }
    end
    if not res.status then res:error(err, err.retry_after and { ["retry-after"] = tostring(err.retry_after) }) end
  end
  opts.on_answered(res.endpoint, res.status or 499)
end

--- Listens on opts.host:opts.port (0: any free port) in controller cq: opts.routes,
-- opts.api_key (nil: none), opts.max_body, opts.log(line), opts.on_answered(endpoint,
-- status). Returns the lua-http server and the port it took.
function serve_http.listen(cq, opts)
  opts.paths = {}
  for key in pairs(opts.routes) do opts.paths[key:match(" (.*)$")] = true end
  local server, err = http_server.listen {
    host = opts.host, port = opts.port, tls = false, cq = cq, reuseaddr = true,
    onstream = function(_, stream) handle(opts, stream) end,
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
