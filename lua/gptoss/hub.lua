--- gptoss.hub: models named by their Hugging Face id (openai/gpt-oss-20b, or
-- openai/gpt-oss-120b@REVISION: a branch, a tag or a commit), found in the local Hugging Face
-- cache as huggingface_hub lays it out (docs/getting-models.md), which `gptoss pull`
-- (gptoss.hub_pull) and `huggingface-cli download` both fill:
--
--   CACHE/models--ORG--NAME/refs/REVISION          the commit a branch or tag names (40 hex digits)
--   CACHE/models--ORG--NAME/snapshots/COMMIT/PATH  the repository's files at that commit, as links
--   CACHE/models--ORG--NAME/blobs/NAME             into blobs/: each file's bytes once, named by
--                                                  its sha256 (LFS files) or its git blob id
--
-- CACHE is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
-- ~/.cache/huggingface/hub. The environment is read through a getenv function (os.getenv by
-- default), so that the specs can give their own.
local gptoss = require "gptoss"
local files = require "gptoss.files"
local util = require "gptoss.util"

local hub = {}

hub.DEFAULT_ENDPOINT = "https://huggingface.co"
hub.DEFAULT_REVISION = "main"

-- a name of an id's two parts: what the hub allows in them, "." and ".." excepted
local function part_ok(s)
  return s:match("^[%w_.-]+$") ~= nil and s ~= "." and s ~= ".."
end

--- Whether path is relative and stays in the folder it starts from: no empty, "." or ".."
-- segment, no NUL or backslash.
function hub.inside(path)
  if path == "" or path:find("[%z\\]") then return false end
  for segment in (path .. "/"):gmatch("([^/]*)/") do
    if segment == "" or segment == "." or segment == ".." then return false end
  end
  return true
end

--- Whether revision can name a ref: "main", "v1.0", "refs/pr/1"; never a path out of refs/.
function hub.revision_ok(revision)
  return revision:match("^[%w_.-][%w_./-]*$") ~= nil and hub.inside(revision)
end

--- "ORG/NAME[@REVISION]" -> id, revision (nil when not given); nil when spec is not such an id.
function hub.parse(spec)
  local id, at, revision = spec:match("^([^@]*)(@?)(.*)$")
  local org, name = id:match("^([^/]+)/([^/]+)$")
  if not (org and part_ok(org) and part_ok(name)) then return nil end
  if at == "" then return id end
  if not hub.revision_ok(revision) then return nil end
  return id, revision
end

local function is_commit(revision)
  return #revision == 40 and revision:match("^%x+$") ~= nil
end
hub.is_commit = is_commit

-- a folder named by the environment, "~/" expanded as huggingface_hub expands it
local function folder(getenv, name)
  local value = getenv(name)
  if value == nil or value == "" then return nil end
  local home = getenv("HOME")
  if home then value = value:gsub("^~/", home .. "/") end
  return (value:gsub("/+$", ""))
end

--- $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
function hub.home(getenv)
  getenv = getenv or os.getenv
  local xdg = folder(getenv, "XDG_CACHE_HOME")
  return folder(getenv, "HF_HOME") or (xdg and xdg .. "/huggingface")
    or ("%s/.cache/huggingface"):format(getenv("HOME") or "")
end

--- The cache's folder: $HF_HUB_CACHE, else hub.home()'s hub/.
function hub.cache_dir(getenv)
  getenv = getenv or os.getenv
  return folder(getenv, "HF_HUB_CACHE") or hub.home(getenv) .. "/hub"
end

--- $HF_ENDPOINT (without a trailing "/"), else https://huggingface.co.
function hub.endpoint(getenv)
  local value = (getenv or os.getenv)("HF_ENDPOINT")
  return value and value ~= "" and (value:gsub("/+$", "")) or hub.DEFAULT_ENDPOINT
end

--- The token requests carry: $HF_TOKEN, else the one `huggingface-cli login` saved
-- ($HF_TOKEN_PATH, else hub.home()'s token file); nil without any.
function hub.token(getenv)
  getenv = getenv or os.getenv
  local token = getenv("HF_TOKEN")
  if token and token ~= "" then return token end
  local path = folder(getenv, "HF_TOKEN_PATH") or hub.home(getenv) .. "/token"
  if gptoss.regular_file(path) ~= true then return nil end
  token = files.read("hub", path):match("^%s*(%S+)")
  return token
end

--- The repository's folder in cache: CACHE/models--ORG--NAME.
function hub.repo_dir(cache, id)
  return ("%s/models--%s"):format(cache, (id:gsub("/", "--")))
end

--- How to get id at revision (nil: the default branch) into the cache, for messages.
function hub.how_to_get(id, revision)
  local rev = revision and revision ~= hub.DEFAULT_REVISION and (" --revision " .. revision) or ""
  return ("gptoss pull %s%s, or huggingface-cli download %s%s"):format(id, rev, id, rev)
end

--- The commit revision names in repo (a commit is itself), or nil and why.
function hub.commit(repo, revision)
  if is_commit(revision) then return revision:lower() end
  local ref = ("%s/refs/%s"):format(repo, revision)
  if gptoss.regular_file(ref) ~= true then return nil, ("no %s"):format(ref) end
  local commit = files.read("hub", ref):match("^%s*(%x+)%s*$")
  if not (commit and is_commit(commit)) then return nil, ("%s does not hold a commit id"):format(ref) end
  return commit:lower()
end

--- The folder of snapshot that gptoss.load takes: the snapshot itself when it holds
-- config.json (Hugging Face's layout), else its original/ (OpenAI's); nil when neither.
function hub.model_dir(snapshot)
  for _, dir in ipairs { snapshot, snapshot .. "/original" } do
    if gptoss.regular_file(dir .. "/config.json") == true then return dir end
  end
  return nil
end

--- The folder of the cached model spec names ("ORG/NAME[@REVISION]"), for gptoss.load; nil
-- and what the cache lacks, with how to get it, when it lacks the model.
function hub.locate(spec, getenv)
  local id, revision = hub.parse(spec)
  if not id then error(("'%s' is not a Hugging Face model id (ORG/NAME[@REVISION])"):format(spec), 0) end
  local cache = hub.cache_dir(getenv)
  local repo = hub.repo_dir(cache, id)
  local commit, why = hub.commit(repo, revision or hub.DEFAULT_REVISION)
  local snapshot = commit and ("%s/snapshots/%s"):format(repo, commit)
  local dir = snapshot and hub.model_dir(snapshot)
  if dir then return dir end
  why = why or ("%s holds neither config.json nor original/config.json"):format(snapshot)
  return nil, ("%s (%s): %s gets it"):format(cache, why, hub.how_to_get(id, revision))
end

--- hub.locate's folder, or an error saying what the cache lacks and how to get it.
function hub.resolve(spec, getenv)
  local dir, missing = hub.locate(spec, getenv)
  if not dir then error(("'%s' is not in the Hugging Face cache %s"):format(spec, missing), 0) end
  return dir
end

--- The model a MODEL argument that is an id, with nothing of that name here, names: the
-- cached one; where the cache lacks it, the loader's error on the path, then what the cache
-- lacks and how to get it.
function hub.load(spec, getenv)
  local dir, missing = hub.locate(spec, getenv)
  if dir then return gptoss.load(dir) end
  local ok, model = pcall(gptoss.load, spec)
  if ok then return model end
  error(("%s; nor is it a model in the Hugging Face cache %s"):format(util.bare(model), missing), 0)
end

return hub
