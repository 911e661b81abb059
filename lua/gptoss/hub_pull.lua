--- gptoss.hub_pull: `gptoss pull`, a model's files downloaded from a Hugging Face hub into the
-- local cache (gptoss.hub's layout) as huggingface_hub writes it, so that either tool reads
-- what the other wrote (docs/getting-models.md):
--
-- 1. GET {endpoint}/api/models/{id}/revision/{revision}?blobs=true: the commit (sha) and each
--    file (siblings) with its size and its LFS sha256, or its git blob id for a small file;
-- 2. each file chosen (include: globs; none: the files at the top of the repository, which
--    are the Hugging Face layout) fetched from {endpoint}/{id}/resolve/{commit}/{path} into
--    blobs/NAME.incomplete, resumed with a Range request where an earlier try stopped, and
--    checked (sha256; a git blob id is the sha1 of "blob SIZE\0" and the bytes) before it is
--    renamed to blobs/NAME. A blob that is there already is not fetched again. A connection
--    that drops is tried again from where it stopped as long as each try brings bytes;
-- 3. snapshots/{commit}/{path} made a link to ../../blobs/NAME, refs/{revision} the commit.
--
-- A file's download holds a lock (CACHE/.locks/models--ORG--NAME/NAME.lock, where
-- huggingface_hub keeps its own) so that two pulls never append to one .incomplete file.
local dkjson = require "dkjson"
local files = require "gptoss.files"
local gptoss = require "gptoss"
local hub = require "gptoss.hub"
local hub_http = require "gptoss.hub_http"
local progress = require "gptoss.progress"
local util = require "gptoss.util"

local function need(module, package)
  local ok, loaded = pcall(require, module)
  if not ok then
    error(("gptoss pull needs the Lua module '%s': apt install %s (Debian)"):format(module, package), 0)
  end
  return loaded
end
local lfs = need("lfs", "lua-filesystem")
local digest = need("openssl.digest", "lua-luaossl")

local hub_pull = {}

local MAX_LISTING = 16 * 2 ^ 20 -- bytes of the file list's JSON: far above any model's
local BLOCK = 1 << 20 -- bytes read at a time when a partial download is hashed again

--- A Lua pattern for an fnmatch glob, as huggingface_hub's --include reads them: * any
-- characters ("/" too), ? one, [abc] and [!abc] one of (not of) a set; a glob that ends in
-- "/" takes what is under that folder.
function hub_pull.glob_pattern(glob)
  if glob:sub(-1) == "/" then glob = glob .. "*" end
  local out, i = { "^" }, 1
  while i <= #glob do
    local c = glob:sub(i, i)
    local close = c == "[" and glob:find("]", i + 2, true)
    if c == "*" or c == "?" then
      out[#out + 1] = c == "*" and ".*" or "."
    elseif close then
      local set = glob:sub(i + 1, close - 1)
      local negated = set:sub(1, 1) == "!"
      local members = (negated and set:sub(2) or set):gsub("[%%%]%[%^]", "%%%0")
      out[#out + 1] = "[" .. (negated and "^" or "") .. members .. "]"
      i = close
    else
      out[#out + 1] = (c:gsub("%p", "%%%0"))
    end
    i = i + 1
  end
  return table.concat(out) .. "$"
end

-- One entry of the listing's siblings as {path =, size =, blob = the blob's name (hex),
-- algorithm = "sha256" | "git"}; bad(why, ...) raises what is wrong with it.
local function sibling(s, bad)
  if type(s) ~= "table" then bad("holds a file entry that is not an object") end
  local lfs_info = type(s.lfs) == "table" and s.lfs or {}
  local path, size, sha256, blob_id = s.rfilename, lfs_info.size or s.size, lfs_info.sha256, s.blobId
  if type(path) ~= "string" or not hub.inside(path) then
    bad("names a file %s that is not a path inside the repository", util.quoted(path))
  end
  if math.type(size) ~= "integer" or size < 0 then bad("gives no size for %s", path) end
  if type(sha256) == "string" and #sha256 == 64 and sha256:match("^%x+$") then
    return { path = path, size = size, blob = sha256:lower(), algorithm = "sha256" }
  elseif type(blob_id) == "string" and hub.is_commit(blob_id) then
    return { path = path, size = size, blob = blob_id:lower(), algorithm = "git" }
  end
  bad("gives neither an LFS sha256 nor a blob id for %s", path)
end

-- The commit and the files (sibling's) of the revision, from the hub's listing.
local function listing(pull)
  local url = ("%s/api/models/%s/revision/%s?blobs=true"):format(pull.endpoint, pull.id,
    hub_http.escape(pull.revision))
  local status, headers, stream = hub_http.get(url, { token = pull.token })
  local body = hub_http.body(stream, MAX_LISTING, url)
  if status ~= 200 then error(hub_http.refusal(status, headers, pull.what, url), 0) end
  local function bad(why, ...) error(("%s: the hub's file list (%s) %s"):format(pull.what, url, why:format(...)), 0) end
  local info = dkjson.decode(body)
  if type(info) ~= "table" then bad("is not a JSON object") end
  if type(info.sha) ~= "string" or not hub.is_commit(info.sha) then bad("has no commit id (sha)") end
  if type(info.siblings) ~= "table" then bad("has no files (siblings)") end
  local list = {}
  for i, s in ipairs(info.siblings) do list[i] = sibling(s, bad) end
  return info.sha:lower(), list
end

-- The files of list that include's globs take (none: those at the top of the repository).
local function chosen(pull, list)
  local patterns, picked, names = {}, {}, {}
  for i, glob in ipairs(pull.include) do patterns[i] = hub_pull.glob_pattern(glob) end
  for _, file in ipairs(list) do
    local take = #patterns == 0 and not file.path:find("/", 1, true)
    for _, pattern in ipairs(patterns) do take = take or file.path:find(pattern) ~= nil end
    if take then picked[#picked + 1] = file end
    names[#names + 1] = file.path
  end
  if #picked == 0 then
    error(("%s: no file matches %s (the files: %s)"):format(pull.what, #patterns > 0 and "--include "
      .. table.concat(pull.include, ", --include ") or "the top of the repository", table.concat(names, ", ")), 0)
  end
  return picked
end

-- mkdir -p
local function folders(path)
  local at = path:sub(1, 1) == "/" and "" or "."
  for part in path:gmatch("[^/]+") do
    at = at .. "/" .. part
    if lfs.attributes(at, "mode") ~= "directory" then
      local ok, why = lfs.mkdir(at)
      if not ok and lfs.attributes(at, "mode") ~= "directory" then
        error(("cannot make the folder '%s': %s"):format(at, tostring(why)), 0)
      end
    end
  end
end

-- The lock of a blob's download, held until the file it returns is closed.
local function locked(pull, file)
  local dir = ("%s/.locks/%s"):format(pull.cache, pull.repo:match("[^/]+$"))
  folders(dir)
  local path = ("%s/%s.lock"):format(dir, file.blob)
  local f, why = io.open(path, "a")
  if not f then error(("cannot open the lock '%s': %s"):format(path, tostring(why)), 0) end
  if not lfs.lock(f, "w") then
    f:close()
    error(("%s: %s: another pull is fetching it (it holds %s)"):format(pull.what, file.path, path), 0)
  end
  return f
end

-- a fresh hash of file's kind: sha256, or git's blob id (sha1 of "blob SIZE\0" and the bytes)
local function new_hash(file)
  if file.algorithm == "sha256" then return digest.new("sha256") end
  local hash = digest.new("sha1")
  hash:update(("blob %d\0"):format(file.size))
  return hash
end

local function opened(path, mode)
  local f, why = io.open(path, mode)
  if not f then error(("cannot open '%s': %s"):format(path, tostring(why)), 0) end
  return f
end

-- A partial download's file closed when the state goes out of scope (a <close> variable)
local Partial = { __close = function(st) if io.type(st.f) == "file" then st.f:close() end end }

-- A blob's partial download {part = path, f = opened for appending, hash =, have = bytes},
-- its bytes so far hashed again; one longer than the file is started over.
local function partial(path, file)
  local st = setmetatable({ part = path, hash = new_hash(file), have = 0 }, Partial)
  local size = lfs.attributes(path, "size")
  if size and size <= file.size then
    local f <close> = opened(path, "rb")
    for block in f:lines(BLOCK) do
      st.hash:update(block)
      st.have = st.have + #block
    end
  end
  st.f = opened(path, st.have > 0 and "ab" or "wb")
  return st
end

-- One request for the rest of the file: the bytes it brought, and why it stopped short.
local function receive(pull, file, st, report)
  local status, headers, stream = hub_http.get(file.url, { token = pull.token, first = st.have })
  local _ <close> = hub_http.closing(stream)
  local range = headers:get("content-range")
  if status == 200 and st.have > 0 then -- the server sent the whole file: start over
    report(-st.have, true)
    st.f:close()
    st.f, st.hash, st.have = opened(st.part, "wb"), new_hash(file), 0
  elseif status == 206 and tonumber((range or ""):match("^bytes (%d+)%-")) ~= st.have then
    error(("%s: %s: asked from byte %d, the server sent %s"):format(pull.what, file.path, st.have,
      tostring(range)), 0)
  elseif status ~= 200 and status ~= 206 then
    error(hub_http.refusal(status, headers, ("%s: %s"):format(pull.what, file.path), file.url), 0)
  end
  local added = 0
  while true do
    local chunk, why = stream:get_next_chunk(hub_http.TIMEOUT)
    if not chunk then return added, why end
    if st.have + #chunk > file.size then
      error(("%s: %s: the server sent more than the %d bytes the hub lists"):format(pull.what, file.path, file.size), 0)
    end
    local ok, werr = st.f:write(chunk)
    if not ok then error(("cannot write '%s': %s"):format(st.part, tostring(werr)), 0) end
    st.hash:update(chunk)
    st.have, added = st.have + #chunk, added + #chunk
    report(#chunk)
  end
end

local function hex(bytes)
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- blobs/NAME of file, fetched unless it is there; report(bytes, present) counts them.
local function fetch(pull, file, report)
  local blob = ("%s/blobs/%s"):format(pull.repo, file.blob)
  if lfs.attributes(blob, "size") == file.size then return report(file.size, true) end
  local lock <close> = locked(pull, file)
  local st <close> = partial(blob .. ".incomplete", file)
  report(st.have, true)
  while st.have < file.size do
    local added, why = receive(pull, file, st, report)
    if added == 0 and st.have < file.size then
      error(("%s: %s: the connection dropped at byte %d of %d (%s): the same pull again resumes there")
        :format(pull.what, file.path, st.have, file.size, tostring(why or "closed")), 0)
    end
  end
  local closed, why = st.f:close()
  if not closed then error(("cannot write '%s': %s"):format(st.part, tostring(why)), 0) end
  local got = hex(st.hash:final())
  if got ~= file.blob then
    os.remove(st.part)
    error(("%s: %s: the bytes received hash to %s, not to the %s the hub lists (%s): discarded, nothing kept")
      :format(pull.what, file.path, got, file.blob, file.algorithm == "sha256" and "sha256" or "git blob id"), 0)
  end
  local renamed, rwhy = os.rename(st.part, blob)
  if not renamed then error(("cannot rename '%s' to '%s': %s"):format(st.part, blob, tostring(rwhy)), 0) end
end

-- snapshots/COMMIT/PATH made a link to the blob, relative as huggingface_hub makes them
local function link(pull, file)
  local path = ("%s/%s"):format(pull.snapshot, file.path)
  folders(path:match("^(.*)/"))
  local target = ("../"):rep(select(2, file.path:gsub("/", "")) + 2) .. "blobs/" .. file.blob
  if lfs.symlinkattributes(path, "mode") then os.remove(path) end
  local ok, why = lfs.link(target, path, true)
  if not ok then error(("cannot link '%s' to '%s': %s"):format(path, target, tostring(why)), 0) end
end

--- "openai/gpt-oss-20b: 3.21 of 12.83 GiB, 45.2 MiB/s, 3:38 left" from a report {id =, done =,
-- total =, fetched = (bytes fetched by this run), elapsed =}: the rate is this run's.
function hub_pull.progress_line(p)
  local rate = p.elapsed > 0 and p.fetched / p.elapsed or 0
  local left = p.done >= p.total and "0:00" or rate > 0 and progress.duration((p.total - p.done) / rate) or "--"
  return ("%s: %.2f of %.2f GiB, %.1f MiB/s, %s left"):format(p.id, p.done / 2 ^ 30, p.total / 2 ^ 30,
    rate / 2 ^ 20, left)
end

--- Downloads a model into the cache. opts: id ("ORG/NAME"), revision (a branch, tag or
-- commit; default main), include (globs), cache (default hub.cache_dir()), endpoint
-- (hub.endpoint()), token (default hub.token(); false: none), on_progress(report) (hub_pull.progress_line's
-- report, after each piece). Returns {commit =, snapshot =, model_dir = what gptoss.load
-- takes (nil when the files chosen hold no config.json), files =, bytes =, fetched =}.
function hub_pull.run(opts)
  opts = util.options("pull", opts, { "id", "revision", "include", "cache", "endpoint", "token", "on_progress" }, 2)
  local revision = opts.revision or hub.DEFAULT_REVISION
  if type(opts.id) ~= "string" or hub.parse(opts.id) ~= opts.id then
    error(("pull: %s is not a Hugging Face model id (ORG/NAME)"):format(util.quoted(opts.id)), 2)
  elseif type(revision) ~= "string" or not hub.revision_ok(revision) then
    error(("pull: %s is not a revision (a branch, a tag or a commit)"):format(util.quoted(revision)), 2)
  end
  for _, glob in ipairs(opts.include or {}) do
    if type(glob) ~= "string" then error(("pull: include holds %s, not a glob"):format(util.quoted(glob)), 2) end
  end
  local cache, token = opts.cache or hub.cache_dir(), opts.token
  if token == nil then token = hub.token() end
  local pull = { id = opts.id, revision = revision, include = opts.include or {}, cache = cache,
    endpoint = (opts.endpoint or hub.endpoint()):gsub("/+$", ""), token = token or nil,
    repo = hub.repo_dir(cache, opts.id), what = ("%s at %s"):format(opts.id, revision) }
  local commit, list = listing(pull)
  pull.snapshot = ("%s/snapshots/%s"):format(pull.repo, commit)
  local picked, total = chosen(pull, list), 0
  for _, file in ipairs(picked) do
    total = total + file.size
    file.url = ("%s/%s/resolve/%s/%s"):format(pull.endpoint, pull.id, commit, hub_http.escape(file.path, true))
  end
  folders(pull.repo .. "/blobs")
  local started = gptoss.clock()
  local report = { id = opts.id, done = 0, total = total, fetched = 0, elapsed = 0 }
  local function count(bytes, present)
    report.done, report.elapsed = report.done + bytes, gptoss.clock() - started
    if not present then report.fetched = report.fetched + bytes end
    if opts.on_progress then opts.on_progress(report) end
  end
  for _, file in ipairs(picked) do
    fetch(pull, file, count)
    link(pull, file)
  end
  if not hub.is_commit(revision) then
    local ref = ("%s/refs/%s"):format(pull.repo, revision)
    folders(ref:match("^(.*)/"))
    files.write("pull", ref, commit)
  end
  return { commit = commit, snapshot = pull.snapshot, model_dir = hub.model_dir(pull.snapshot), files = #picked,
    bytes = total, fetched = report.fetched }
end

return hub_pull
