-- A fake Hugging Face hub on loopback for tests/hub_spec.lua, the routes gptoss pull uses and
-- nothing else, on lua-http's server:
--
--   GET /api/models/ORG/NAME/revision/REV?blobs=true   the listing: {"sha", "siblings"}
--   GET /ORG/NAME/resolve/REV/PATH                     a small file's bytes; an LFS file
--                                                      (*.safetensors) a 302 to the CDN
--   GET /cdn/ORG/NAME/PATH  (a second port: another   an LFS file's bytes, as a signed URL
--                           origin)                  gives them; Range taken
--
--   lua5.4 tests/fake_hub.lua CONFIG LOG
--
-- prints "port N", the hub's, on stdout once both listen, and appends a line a request to LOG
-- before it answers it: "hub|cdn PATH range=R auth=A". CONFIG holds, as JSON, { [ID] = repo },
-- a repo { dir = the folder whose files it serves, commit = 40 hex digits, refs = { main =
-- commit, ... }, token = the Bearer token it requires (none: public), cut = { [PATH] = { at =
-- byte, times = n } } (the first n answers that start at or before byte `at` of PATH end the
-- connection there), wrong_sha256 = { [PATH] = true } (its listing lies), extra_siblings = {
-- ... } (entries added to its listing as they are) }.
-- The CDN refuses a request that carries Authorization, as a signed URL's store does.
local cqueues = require "cqueues"
local dkjson = require "dkjson"
local digest = require "openssl.digest"
local lfs = require "lfs"
local H = require "helpers"
local http_server, http_headers = require("gptoss.lua_http").require("http.server", "http.headers")

local config_path, log_path = arg[1], arg[2]
local repos = dkjson.decode(H.read_file(config_path))
local log = assert(io.open(log_path, "a"))

local function hex(bytes)
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- every file under dir: { [relative path] = { data =, sha256 =, blob_id =, lfs = bool } }
local function walk(dir, prefix, out)
  for name in lfs.dir(dir) do
    local path = dir .. "/" .. name
    if name ~= "." and name ~= ".." then
      if lfs.attributes(path, "mode") == "directory" then
        walk(path, prefix .. name .. "/", out)
      else
        local data = H.read_file(path)
        out[prefix .. name] = { data = data, lfs = name:match("%.safetensors$") ~= nil,
          sha256 = hex(digest.new("sha256"):final(data)),
          blob_id = hex(digest.new("sha1"):final(("blob %d\0"):format(#data) .. data)) }
      end
    end
  end
  return out
end

for _, repo in pairs(repos) do repo.files = walk(repo.dir, "", {}) end

local cdn_port

local function answer(stream, status, body, extra)
  local h = http_headers.new()
  h:append(":status", tostring(status))
  for k, v in pairs(extra or {}) do h:append(k, v) end
  h:append("content-length", tostring(#body))
  stream:write_headers(h, false)
  stream:write_chunk(body, true)
end

local function refused(stream, status, code, message)
  answer(stream, status, dkjson.encode { error = message }, { ["x-error-code"] = code, ["x-error-message"] = message })
end

-- file's bytes from the Range's first byte, ended at a cut that is due
local function send_file(stream, file, range, path_cut)
  local first = tonumber((range or ""):match("^bytes=(%d+)%-$")) or 0
  local h = http_headers.new()
  h:append(":status", first > 0 and "206" or "200")
  if first > 0 then h:append("content-range", ("bytes %d-%d/%d"):format(first, #file.data - 1, #file.data)) end
  h:append("content-length", tostring(#file.data - first))
  stream:write_headers(h, false)
  if path_cut and path_cut.times > 0 and first <= path_cut.at then
    path_cut.times = path_cut.times - 1
    stream:write_chunk(file.data:sub(first + 1, path_cut.at), false)
    local socket = stream.connection:take_socket()
    socket:flush()
    socket:close()
    return
  end
  stream:write_chunk(file.data:sub(first + 1), true)
end

local function repo_route(stream, id, repo, rest, headers)
  if repo.token and headers:get("authorization") ~= "Bearer " .. repo.token then
    return refused(stream, 401, "GatedRepo", "Access to this model is restricted: you must be authenticated")
  end
  local rev, query = rest:match("^/revision/([^?]+)%??(.*)$")
  if rev then
    if rev ~= repo.commit and not repo.refs[rev] then
      return refused(stream, 404, "RevisionNotFound", "Revision Not Found")
    end
    local siblings = {}
    for path, file in pairs(repo.files) do
      local sha256 = (repo.wrong_sha256 or {})[path] and ("0"):rep(64) or file.sha256
      siblings[#siblings + 1] = { rfilename = path, size = #file.data, blobId = file.blob_id,
        lfs = file.lfs and { sha256 = sha256, size = #file.data, pointerSize = 134 } or nil }
    end
    table.sort(siblings, function(a, b) return a.rfilename < b.rfilename end)
    table.move(repo.extra_siblings or {}, 1, #(repo.extra_siblings or {}), #siblings + 1, siblings)
    local listing = { sha = repo.commit, siblings = query == "blobs=true" and siblings or {} }
    return answer(stream, 200, dkjson.encode(listing), { ["content-type"] = "application/json" })
  end
  local path = rest:match("^/resolve/[^/]+/(.+)$")
  local file = path and repo.files[path]
  if not file then return refused(stream, 404, "EntryNotFound", "Entry not found") end
  if file.lfs then
    return answer(stream, 302, "", { location = ("http://127.0.0.1:%d/cdn/%s/%s"):format(cdn_port, id, path) })
  end
  send_file(stream, file, headers:get("range"), (repo.cut or {})[path])
end

local function logged(server, headers)
  log:write(("%s %s range=%s auth=%s\n"):format(server, headers:get(":path"), headers:get("range"),
    (headers:get("authorization"))))
  log:flush()
end

local function on_hub(_, stream)
  local headers = assert(stream:get_headers())
  local target = headers:get(":path")
  logged("hub", headers)
  local id, rest = target:match("^/api/models/([^/]+/[^/]+)(/.*)$")
  if not id then id, rest = target:match("^/([^/]+/[^/]+)(/resolve/.*)$") end
  local repo = id and repos[id]
  if not repo then return refused(stream, 404, "RepoNotFound", "Repository not found") end
  repo_route(stream, id, repo, rest, headers)
end

local function on_cdn(_, stream)
  local headers = assert(stream:get_headers())
  local target = headers:get(":path")
  logged("cdn", headers)
  if headers:get("authorization") then
    return answer(stream, 400, "Only one auth mechanism allowed")
  end
  local id, path = target:match("^/cdn/([^/]+/[^/]+)/(.+)$")
  local repo = id and repos[id]
  local file = repo and repo.files[path]
  if not file then return answer(stream, 404, "no such blob") end
  send_file(stream, file, headers:get("range"), (repo.cut or {})[path])
end

local cq = cqueues.new()
local function listening(onstream)
  local server = http_server.listen { host = "127.0.0.1", port = 0, onstream = onstream, cq = cq,
    onerror = function(_, context, op, err)
      io.stderr:write(("fake hub: %s %s: %s\n"):format(context, op, tostring(err)))
    end }
  assert(server:listen())
  return server, select(3, server:localname())
end
local _, hub_port = listening(on_hub)
_, cdn_port = listening(on_cdn)
io.stdout:write("port ", hub_port, "\n")
io.stdout:flush()
assert(cq:loop())
