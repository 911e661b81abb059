--- gptoss.hub_http (internal, gptoss.hub_pull's): GET requests to a Hugging Face hub over
-- lua-http's client (HTTP/1.1; https through luaossl, certificates checked), their bodies read
-- with bounds, and the hub's refusals turned into messages that say what to do.
--
-- Redirects are followed here rather than by lua-http, which would carry the Authorization
-- header to any host: the hub sends a file's bytes from a CDN by a signed URL, which must not
-- see the token (and refuses a request that carries two credentials).
local gptoss = require "gptoss"
local http_request = require("gptoss.lua_http").require("http.request")

local hub_http = {}

-- Seconds a connection, a response's headers or a chunk of its body may take: a stalled
-- connection ends in an error rather than a wait.
hub_http.TIMEOUT = 60
local MAX_REDIRECTS = 10
local REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }

local function origin(url)
  return (url:match("^%a[%w+.-]*://[^/?#]*") or ""):lower()
end

-- location (absolute, from the root, or relative) against url
local function redirected(url, location)
  if location:match("^%a[%w+.-]*://") then return location end
  if location:sub(1, 1) == "/" then return origin(url) .. location end
  return url:gsub("[?#].*$", ""):gsub("[^/]*$", "") .. location
end

--- Percent-encodes s for a URL's path; keep_slash leaves "/" as it is (a file's path).
function hub_http.escape(s, keep_slash)
  local safe = keep_slash and "[^%w%-._~/]" or "[^%w%-._~]"
  return (s:gsub(safe, function(c) return ("%%%02X"):format(c:byte()) end))
end

-- Ends stream's connection, unless lua-http closed it at the end of a whole body. Not
-- lua-http's stream shutdown, which spins on a connection the server closed mid-body.
local function close(stream)
  if stream.state == "closed" then return end
  local socket = stream.connection:take_socket()
  if socket then socket:close() end
end

local Closing = { __close = function(guard) close(guard.stream) end }

--- A guard that ends stream's connection (once) when it goes out of scope:
-- local _ <close> = hub_http.closing(stream).
function hub_http.closing(stream)
  return setmetatable({ stream = stream }, Closing)
end

--- Sends GET url: the status (a number), the headers and the stream of the first answer that
-- is not a redirect. opts: token (sent as "Bearer" to url's origin only), first (the byte
-- to start from: a Range request). A server that cannot be reached is an error naming it.
function hub_http.get(url, opts)
  local home = origin(url)
  for _ = 0, MAX_REDIRECTS do
    local ok, req = pcall(http_request.new_from_uri, url)
    if not ok then error(("'%s' is not a URL the hub client takes (%s)"):format(url, tostring(req)), 0) end
    req.version, req.follow_redirects = 1.1, false
    req.headers:upsert("user-agent", "gptoss/" .. gptoss.VERSION)
    if opts.token and origin(url) == home then req.headers:upsert("authorization", "Bearer " .. opts.token) end
    if opts.first and opts.first > 0 then req.headers:upsert("range", ("bytes=%d-"):format(opts.first)) end
    local headers, stream = req:go(hub_http.TIMEOUT)
    if not headers then error(("cannot reach %s: %s"):format(origin(url), tostring(stream)), 0) end
    local status = tonumber(headers:get(":status"))
    local location = headers:get("location")
    if not (REDIRECT[status] and location) then return status, headers, stream end
    close(stream)
    url = redirected(url, location)
  end
  error(("%s: more than %d redirects"):format(url, MAX_REDIRECTS), 0)
end

--- The body of stream as a string, its connection closed; at most limit bytes (an error beyond).
function hub_http.body(stream, limit, url)
  local _ <close> = hub_http.closing(stream)
  local parts, n = {}, 0
  while true do
    local chunk, why = stream:get_next_chunk(hub_http.TIMEOUT)
    if not chunk then
      if why then error(("%s: the answer was cut: %s"):format(url, tostring(why)), 0) end
      return table.concat(parts)
    end
    n = n + #chunk
    if n > limit then
      error(("%s: an answer of more than %d bytes, more than a listing holds"):format(url, limit), 0)
    end
    parts[#parts + 1] = chunk
  end
end

--- The message for a status that is not a success: what the hub said (its X-Error-Message)
-- and what to do. what names the request ("openai/gpt-oss-20b at main").
function hub_http.refusal(status, headers, what, url)
  local said = headers:get("x-error-message")
  said = said and (": " .. said) or ""
  if status == 401 or status == 403 then
    return ("%s: the hub refused it (HTTP %d%s): the model is private, gated or not there; set HF_TOKEN to a "
      .. "token that can read it (a gated model's terms are accepted on its page)"):format(what, status, said)
  elseif status == 404 then
    return ("%s: not found on %s (HTTP 404%s)"):format(what, origin(url), said)
  end
  return ("%s: the hub answered HTTP %d%s (%s)"):format(what, status, said, url)
end

return hub_http
