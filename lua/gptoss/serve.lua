--- gptoss.serve: an OpenAI-compatible HTTP server over replicas of a model (docs/serve.md).
-- One process, one Lua thread: a cqueues controller runs the HTTP server (lua-http) and
-- the engine loop (gptoss.serve_engine), which polls h:ready() between yields, so requests
-- are accepted and streamed while a step runs. The batching policy is a scheduler object
-- with getp's hooks (gptoss.scheduler) plus on_arrival; the built-in is continuous
-- batching, first come first served.
--
--   local s = serve.new{model =, tokenizer =, ...}   replicas built (or taken), nothing listening
--   s:start()                                        listens; s.port is the port taken
--   s:run()                                          serves until s:stop() (or SIGTERM, with
--                                                    signals) and in-flight work ends
--
-- Options (any other is an error that lists these):
--   model         from gptoss.load or gptoss.synthetic, required
--   model_name    what clients name it in "model" (default: tostring of the model's path or
--                 "gptoss")
--   tokenizer     from gptoss.tokenizer (default: gptoss.tokenizer() for the model's vocabulary)
--   devices       "cpu" or GPU numbers, one replica each (default: every GPU, else {"cpu"})
--   replicas      existing replicas to use instead (they stay the caller's), or objects that
--                 act as one (step, fork, sampling, check_sampling; slots, ctx, device, and
--                 rows and chunk when the device is not "cpu"; handles with ready, and tokens
--                 and logprobs that take {partial = true}):
--                 tests/fake_replica.lua is one, without a model
--   slots         slots a replica gives requests (default: 16 on the CPU, what memory holds on
--                 a GPU); a replica has one more for the shared system message
--   ctx           positions a slot holds: prompt and output, at most the model's seq_len
--                 (default: its seq_len, at most 8192)
--   scheduler     a scheduler object, or a name of gptoss.scheduler.names (default "continuous")
--   host, port    where to listen (default 127.0.0.1, 8000; port 0: any free port)
--   api_key       a key every request to /v1/ must send as a Bearer token (default none; a
--                 host other than loopback without one is warned of in the log)
--   max_queue     choices that may wait for a slot (none free) before requests get 429
--                 (default 256); with slots free, a burst is admitted whatever its size
--   cors_origin   an origin browsers may call the server from ("*": any), answered with
--                 CORS headers and preflights (default none)
--   access_log    false: no line a request in the log (default true)
--   stored_responses  responses kept for previous_response_id and GET /v1/responses/{id},
--                 the oldest evicted first (default 1024)
--   max_body      the largest request body in bytes before 413 (default 4 MiB)
--   header_timeout  seconds a request's headers may take from their first byte before 408,
--                 and a connection may stay idle before its next request (default 10)
--   body_timeout  seconds a request's body may take before 408 (default 60)
--   max_connections  connections open at once; more wait to be accepted (default 1024)
--   log           function(line) for what the server says (default: to stderr)
--   signals       true: SIGTERM and SIGINT stop the server as s:stop() does (blocked for the
--                 whole process before any replica starts its threads, which would otherwise
--                 take the signal's default action)
local cqueues = require "cqueues"
local gptoss = require "gptoss"
local getp_replicas = require "gptoss.getp_replicas"
local harmony = require "gptoss.harmony"
local naming = require "gptoss.naming"
local scheduler = require "gptoss.scheduler"
local serve_api = require "gptoss.serve_api"
local serve_engine = require "gptoss.serve_engine"
local serve_http = require "gptoss.serve_http"
local serve_metrics = require "gptoss.serve_metrics"
local serve_stream = require "gptoss.serve_stream"
local util = require "gptoss.util"

local serve = {}

local OPTIONS = { "model", "model_name", "tokenizer", "devices", "replicas", "slots", "ctx", "scheduler", "host", "port",
  "api_key", "max_queue", "max_body", "header_timeout", "body_timeout", "max_connections", "log", "signals",
  "cors_origin", "access_log", "stored_responses" }
local DEFAULT_QUEUE, DEFAULT_BODY = 256, 4 * 1024 * 1024
local DEFAULT_HEADER_TIMEOUT, DEFAULT_BODY_TIMEOUT, DEFAULT_CONNECTIONS = 10, 60, 1024

local Server = {}
Server.__index = Server

local function check_integer(name, v, min, level)
  if v ~= nil and (math.type(v) ~= "integer" or v < min) then
    error(("serve: %s must be an integer >= %d (got %s)"):format(name, min, tostring(v)), level + 1)
  end
end

local function check_seconds(name, v, level)
  if v ~= nil and (type(v) ~= "number" or not (v > 0 and v < math.huge)) then
    error(("serve: %s must be a number of seconds > 0 (got %s)"):format(name, tostring(v)), level + 1)
  end
end

-- Whether host is a loopback address, reachable from this machine only.
local function loopback(host)
  return host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- The scheduler option as an object: a built-in's name, or an object with admit.
local function scheduler_of(s, level)
  if s == nil then return scheduler.continuous() end
  if type(s) == "string" then
    if not util.listed(scheduler.names, s) then
      error(("serve: scheduler must be one of %s or an object (got '%s')"):format(table.concat(scheduler.names, ", "), s),
        level + 1)
    end
    return scheduler[s]()
  end
  local ok, admit = pcall(function() return s.admit end)
  if not ok or type(admit) ~= "function" then
    error("serve: scheduler must have an admit method (gptoss.scheduler's header lists the hooks)", level + 1)
  end
  return s
end

-- The replicas to serve on: the ones given, or one per device with a slot more than the
-- requests' for the shared system message.
local function replicas_of(opts, ctx, log, level)
  if opts.replicas then
    if type(opts.replicas) ~= "table" or #opts.replicas == 0 then
      error("serve.new: replicas must be a non-empty list of replicas", level + 1)
    end
    return opts.replicas, false
  end
  local devices = opts.devices or gptoss.default_devices()
  local ok, built = pcall(getp_replicas.build, devices, { slots = opts.slots and opts.slots + 1 }, opts.model, ctx,
    nil, true, 1)
  if not ok then error("serve: " .. util.bare(built):gsub("^getp: ", ""), level + 1) end
  for _, r in ipairs(built) do log(("replica: %s"):format(tostring(r))) end
  return built, true
end

--- A server (see the header for the options); nothing listens until start.
function serve.new(opts)
  opts = util.options("serve.new", opts, OPTIONS, 2)
  if not util.is_a(opts.model, "gptoss.model") then
    error(("serve.new: model must be a gptoss model (got %s)"):format(util.kind(opts.model)), 2)
  end
  check_integer("slots", opts.slots, 1, 2)
  check_integer("ctx", opts.ctx, 2, 2)
  check_integer("port", opts.port, 0, 2)
  if opts.port and opts.port > 65535 then error(("serve: port must be 0..65535 (got %d)"):format(opts.port), 2) end
  check_integer("max_queue", opts.max_queue, 1, 2)
  check_integer("max_body", opts.max_body, 1, 2)
  check_integer("max_connections", opts.max_connections, 1, 2)
  check_integer("stored_responses", opts.stored_responses, 1, 2)
  check_seconds("header_timeout", opts.header_timeout, 2)
  check_seconds("body_timeout", opts.body_timeout, 2)
  if opts.api_key ~= nil and (type(opts.api_key) ~= "string" or opts.api_key == "") then
    error("serve.new: api_key must be a non-empty string", 2)
  end
  if opts.cors_origin ~= nil and (type(opts.cors_origin) ~= "string" or not opts.cors_origin:find("^[\33-\126]+$")) then
    error("serve.new: cors_origin must be an origin (\"*\" or like https://example.com)", 2)
  end
  local log = opts.log or function(line) io.stderr:write("gptoss serve: ", line, "\n") end
  local signal = opts.signals and require "cqueues.signal"
  if signal then signal.block(signal.SIGTERM, signal.SIGINT) end
  local model = opts.model
  local tokenizer = opts.tokenizer or gptoss.tokenizer(nil, { vocab_size = model.config.vocab_size })
  local ctx, past = naming.context(model, opts.ctx, "ctx")
  if not ctx then error("serve.new: " .. past, 2) end
  local sched = scheduler_of(opts.scheduler, 2)
  local replicas, owned = replicas_of(opts, ctx, log, 2)
  local self = setmetatable({ model = model, tokenizer = tokenizer, log = log, owned = owned, replicas = replicas,
    model_name = opts.model_name or (model.path and tostring(model.path)) or "gptoss", host = opts.host or "127.0.0.1",
    port = opts.port or 8000, api_key = opts.api_key, max_body = opts.max_body or DEFAULT_BODY,
    header_timeout = opts.header_timeout or DEFAULT_HEADER_TIMEOUT,
    body_timeout = opts.body_timeout or DEFAULT_BODY_TIMEOUT,
    max_connections = opts.max_connections or DEFAULT_CONNECTIONS, cors_origin = opts.cors_origin,
    access_log = opts.access_log ~= false, stored_responses = opts.stored_responses,
    metrics = serve_metrics.new(), started = os.time(), cq = cqueues.new(), answering = 0, marked_streams = {},
    signals = signal and signal.listen(signal.SIGTERM, signal.SIGINT) }, Server)
  -- the default system message, which every chat request of default reasoning effort starts with
  local prefix = harmony.render_ids({ harmony.system {} }, tokenizer, { completion = false })
  self.engine = serve_engine.new { replicas = replicas, scheduler = sched, prefix = prefix,
    max_queue = opts.max_queue or DEFAULT_QUEUE, on_error = function(message) log("engine: " .. message) end,
    on_step = function(k, host, waited, generated, prefilled)
      self.metrics:step(k, host, waited, generated, prefilled)
    end,
    on_ids = function() serve_stream.send_marked(self) end }
  return self
end

-- The access log's line of an answered request (res: serve_http's, nil when its headers
-- could not be read): method, path, status, prompt and generated tokens, milliseconds.
local function access_line(status, res)
  if not res then return ("- - %d"):format(status) end
  local usage = res.usage
  return ("%s %s %d, %d tokens in, %d out, %.1f ms"):format(serve_http.printable(res.method or "-"), serve_http.printable(res.path or "-"),
    status, usage and usage.prompt_tokens or 0, usage and usage.completion_tokens or 0,
    (cqueues.monotime() - res.started) * 1000)
end

--- Listens (s.port is then the port taken) and starts the engine loop and the sender, the
-- thread that writes the streams' events (gptoss.serve_stream); returns s.
function Server:start()
  self.sender = self.sender or gptoss.sender { timeout = serve_http.WRITE_TIMEOUT }
  self.http, self.port = serve_http.listen(self.cq, {
    host = self.host, port = self.port, routes = serve_api.routes(self), api_key = self.api_key,
    max_body = self.max_body, header_timeout = self.header_timeout, body_timeout = self.body_timeout,
    max_connections = self.max_connections, log = self.log, cors_origin = self.cors_origin,
    on_answered = function(endpoint, status, res)
      self.metrics:request(endpoint, status)
      if self.access_log then self.log(access_line(status, res)) end
    end,
  })
  -- the engine loop's error, unlike a request's, ends the server (run raises it)
  self.cq:wrap(function()
    local ok, err = pcall(self.engine.run, self.engine)
    self.engine_error = not ok and tostring(err) or nil
    self.drained = true
  end)
  if not self.api_key and not loopback(self.host) then
    self.log(("warning: listening on %s without an API key: anyone who reaches this address can use the server")
      :format(self.host))
  end
  self.log(("listening on http://%s:%d (model '%s'%s)"):format(self.host, self.port, self.model_name,
    self.api_key and ", API key required" or ""))
  return self
end

--- Stops admitting requests (new ones get 503, /health says 503 too) and lets what is
-- queued and running finish; run then returns.
function Server:stop()
  if self.stopping then return end
  self.stopping = true
  self.engine:stop()
end

--- Runs the server until stop (or a signal, with the signals option) and the requests in
-- flight have been answered; then closes the replicas it built.
function Server:run()
  if self.signals then
    self.cq:wrap(function()
      while not self.stopping do
        local which = self.signals:wait(0.5)
        if which then
          self.log(("signal %d: no more requests accepted; finishing those in flight"):format(which))
          self:stop()
        end
      end
    end)
  end
  -- in-flight answers are written by their own coroutines: once the engine has drained,
  -- the loop goes on until nothing but idle keep-alive connections is left. A request's
  -- coroutine that fails (serve_http answers or closes what it can) fails alone.
  while not (self.drained and self.answering == 0) do
    local ok, err = self.cq:step(0.5)
    if self.engine_error then error("serve: the engine loop failed: " .. self.engine_error, 0) end
    if not ok then self.log("a connection's coroutine failed: " .. tostring(err)) end
  end
  serve_http.stop_accepting(self.http)
  for _, line in ipairs(self.metrics:step_summary()) do self.log(line) end
  self:close()
end

--- Closes the sender and the replicas the server built (not given ones). Idempotent.
function Server:close()
  if self.closed then return end
  self.closed = true
  if self.sender then self.sender:close() end
  if self.owned then getp_replicas.close_all(self.replicas) end
end

--- new + start + run.
function serve.run(opts)
  serve.new(opts):start():run()
end

return serve
