-- Helpers of the gptoss serve specs (serve_spec, serve_hostile_spec, serve_surface_spec):
-- servers started as child processes of the source tree's gptoss (the clients block, the
-- server must not) and stopped with SIGTERM, curl and the openai npm client against them,
-- and /metrics read. Every client call is bounded by timeout(1).
local dkjson = require "dkjson"
local gptoss = require "gptoss"
local H = require "helpers"

local SH = {}

local q = H.shell_quote

--- A file's contents, or nil when it is not there (yet).
function SH.read_or_nil(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end
local read_or_nil = SH.read_or_nil

SH.ROOT = H.TREE.root

--- Whether a command is on the PATH.
function SH.have(cmd) return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") end

-- curl and node are not ours: under make test-sanitized they run without its preload (curl hangs under it)
SH.UNSANITIZED = H.SANITIZED and "env -u LD_PRELOAD " or ""

--- Why the server cannot be run here, or nil.
SH.why_not_http = not SH.ROOT and "gptoss was not loaded from a source tree"
    or not pcall(require, "gptoss.serve_http") and "lua-http, lua-cqueues or lua-cjson is missing (make setup)"
    or not SH.have("curl") and "curl is missing (make setup)"

local CLIENT = SH.ROOT and SH.ROOT .. "tests/serve-client/"

--- Why the openai npm client cannot be run here (or the server), or nil.
SH.why_not_client = SH.why_not_http
    or not (SH.have("node") and read_or_nil(CLIENT .. "node_modules/openai/package.json"))
    and "the openai client is not installed (node, then npm ci in tests/serve-client)"

--- The openai client's op (tests/serve-client/client.mjs) with params (a table) against s,
-- with the API key given (default "none"): the decoded JSON line it prints.
function SH.client(s, op, params, key)
  local cmd = ("cd %s && timeout 120 " .. SH.UNSANITIZED .. "node client.mjs %s %s %s %s 2>&1"):format(q(CLIENT),
    q(("http://127.0.0.1:%d/v1"):format(s.port)), q(key or "none"), op, q(dkjson.encode(params or {})))
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  local v = dkjson.decode(out)
  assert(v ~= nil, "the client printed no JSON: " .. out)
  return v
end

local running = {} -- servers started and not stopped yet, by pid

--- The servers a failed test left running, killed (each describe's teardown).
function SH.kill_leftovers()
  for pid in pairs(running) do os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
  running = {}
end

--- A server started as `lua bin/gptoss.lua serve ARGS` (or script, a Lua file of the tree):
-- {port =, pid =, log = path}, once its log names the port it listens on.
function SH.start(args, script)
  local log = os.tmpname() -- kept until stop, past helpers.cleanup
  local words = { q(H.TREE.lua), q(SH.ROOT .. (script or "bin/gptoss.lua")) }
  if not script then words[#words + 1] = "serve" end
  for _, a in ipairs(args or {}) do words[#words + 1] = q(a) end
  local cmd = ("LUA_PATH=%s LUA_CPATH=%s; export LUA_PATH LUA_CPATH; (exec %s >%s 2>&1) & echo $!"):format(
    q(package.path), q(package.cpath), table.concat(words, " "), q(log))
  local p = assert(io.popen(cmd))
  local pid = assert(tonumber(p:read("l")))
  p:close()
  local deadline = gptoss.clock() + 60
  while gptoss.clock() < deadline do
    local port = (read_or_nil(log) or ""):match("listening on http://%S-:(%d+) ")
    if port then
      running[pid] = true
      return { port = tonumber(port), pid = pid, log = log }
    end
    os.execute("sleep 0.1")
  end
  os.execute("kill " .. pid)
  error("the server did not start: " .. (read_or_nil(log) or ""))
end

--- Sends s SIGTERM, waits for it to exit and removes its log: the exit code and what it logged.
-- One still running after 60 s is killed (a wedged server must not outlive the suite).
function SH.stop(s)
  running[s.pid] = nil
  os.execute("kill -TERM " .. s.pid)
  local _, _, code = os.execute(("timeout 60 sh -c 'while kill -0 %d 2>/dev/null; do sleep 0.1; done'"):format(s.pid))
  if code ~= 0 then os.execute("kill -KILL " .. s.pid .. " 2>/dev/null") end
  local log = read_or_nil(s.log)
  os.remove(s.log)
  return code, log
end

--- The teardown of a describe's server s (nil when its setup failed): s stopped, what a
-- failed test left running killed, and a failure unless s exited 0.
function SH.teardown_server(s)
  local code = s and SH.stop(s)
  SH.kill_leftovers()
  if s and code ~= 0 then error(("the server exited %s, not 0"):format(tostring(code)), 2) end
end

--- curl's response to path (extra: curl's words): the headers and the body.
function SH.curl(s, path, extra)
  local headers = H.tmp()
  local cmd = ("timeout 60 " .. SH.UNSANITIZED .. "curl -sN -D %s %s %s 2>&1"):format(q(headers), extra or "",
    q(("http://127.0.0.1:%d%s"):format(s.port, path)))
  local p = assert(io.popen(cmd))
  local body = p:read("a")
  p:close()
  return H.read_file(headers), body
end

--- A value of s's /metrics (name: the series, labels and all), or nil.
function SH.metric(s, name)
  local _, text = SH.curl(s, "/metrics")
  return tonumber(text:match("\n" .. name:gsub("[%-%.%[%]{}\"=]", "%%%0") .. " (%S+)"))
end

--- The metric once it has value, or after 20 seconds without: its value then.
function SH.metric_reaches(s, name, value)
  local deadline = gptoss.clock() + 20
  while SH.metric(s, name) ~= value and gptoss.clock() < deadline do os.execute("sleep 0.05") end
  return SH.metric(s, name)
end

--- A chat body of one user message, with fields added.
function SH.chat_body(fields)
  return H.with({ model = "m", messages = { { role = "user", content = "Hi" } } }, fields)
end

--- The error object parse (serve_openai.chat or .completion) raises for body, which it must
-- refuse.
function SH.refusal(parse, body, tokenizer, ctx)
  local ok, err = pcall(parse, body, tokenizer, ctx)
  assert(not ok, "accepted")
  assert(type(err) == "table", tostring(err))
  return err
end

--- s's log once it has a match of pattern (a Lua pattern), or after 20 seconds without:
-- the log then. A request's line is logged once its answer is written, after its client
-- may have read it.
function SH.log_reaches(s, pattern)
  local deadline = gptoss.clock() + 20
  while not H.read_file(s.log):find(pattern) and gptoss.clock() < deadline do os.execute("sleep 0.05") end
  return H.read_file(s.log)
end

return SH
