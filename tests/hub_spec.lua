-- Models by their Hugging Face id (gptoss.hub, gptoss.hub_pull, `gptoss pull`,
-- docs/getting-models.md): the cache's folder from the environment, ids resolved from a cache
-- tree built by hand, and pulls from a fake hub on loopback (tests/fake_hub.lua, a child
-- process) that serves a 7m saved with model:save and a tiny model: the cache written as
-- huggingface_hub writes it and loaded by its id, a dropped connection resumed with a Range
-- request, a wrong hash refused, 401 and 404, --include.
local dkjson = require "dkjson"
local gptoss = require "gptoss"
local hub = require "gptoss.hub"
local H = require "helpers"

local q, expect_error = H.shell_quote, H.expect_error
local have_pull, why_no_pull = pcall(require, "gptoss.hub_pull")
local hub_pull = have_pull and why_no_pull
local COMMIT, OTHER_COMMIT = ("1234abcd"):rep(5), ("5678cdef"):rep(5)

local function env(t) return function(name) return t[name] end end

-- Checkpoints the specs serve and copy (hard links: a blob must be a file of the cache):
-- SOURCE/7m-hf, 7m-original (a synthetic 7m saved in each layout), tiny-hf, tiny-original, and
-- the repositories the fake hub serves, repo-7m and repo-tiny (both layouts each).
local SOURCE

-- from (a file, or a folder's files) hard-linked at to
local function hard_link(from, to)
  assert(os.execute(("mkdir -p %s && cp -rl %s %s"):format(q(to:match("^(.*)/")), q(from), q(to))))
end

local function mkdir(path) assert(os.execute("mkdir -p " .. q(path))) end

local function link_target(path)
  local p = assert(io.popen("readlink " .. q(path)))
  local target = p:read("l")
  p:close()
  return target
end

local function hex_digest(kind, data)
  return (require("openssl.digest").new(kind):final(data):gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

describe("models by their Hugging Face id", function()
  setup(function()
    SOURCE = os.tmpname()
    os.remove(SOURCE)
    mkdir(SOURCE)
    for _, layout in ipairs { "hf", "original" } do
      gptoss.synthetic("7m"):save(("%s/7m-%s"):format(SOURCE, layout), { format = layout })
      gptoss.synthetic(H.TINY, { seed = 3 }):save(("%s/tiny-%s"):format(SOURCE, layout), { format = layout })
    end
    -- both layouts in one repository, as OpenAI's have them
    for _, name in ipairs { "7m", "tiny" } do
      hard_link(("%s/%s-hf"):format(SOURCE, name), ("%s/repo-%s"):format(SOURCE, name))
      hard_link(("%s/%s-original"):format(SOURCE, name), ("%s/repo-%s/original"):format(SOURCE, name))
    end
    H.write_file(SOURCE .. "/repo-7m/README.md", "# a synthetic 7m\n")
  end)
  teardown(function() os.execute("rm -rf " .. q(SOURCE)) end)

  describe("gptoss.hub: ids and the local cache", function()
    after_each(H.cleanup)

    it("reads ORG/NAME[@REVISION] ids, refusing paths and revisions that leave refs/", function()
      assert.are.same({ "openai/gpt-oss-20b" }, { hub.parse("openai/gpt-oss-20b") })
      assert.are.same({ "openai/gpt-oss-120b", "refs/pr/1" }, { hub.parse("openai/gpt-oss-120b@refs/pr/1") })
      for _, bad in ipairs { "gpt-oss-20b", "./openai/x", "/abs/x", "a/b/c", "a/..", "a/b@", "a/b@../x", "a/b@x//y",
        "a/b@/x", "a b/c" } do
        assert.is_nil(hub.parse(bad), bad)
      end
    end)

    it("finds the cache as huggingface_hub does: HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME, ~/.cache", function()
      local all = { HF_HUB_CACHE = "/c/hub", HF_HOME = "/h", XDG_CACHE_HOME = "/x", HOME = "/home/u" }
      assert.are.equal("/c/hub", hub.cache_dir(env(all)))
      all.HF_HUB_CACHE = nil
      assert.are.equal("/h/hub", hub.cache_dir(env(all)))
      all.HF_HOME = nil
      assert.are.equal("/x/huggingface/hub", hub.cache_dir(env(all)))
      all.XDG_CACHE_HOME = ""
      assert.are.equal("/home/u/.cache/huggingface/hub", hub.cache_dir(env(all)))
      assert.are.equal("/home/u/c", hub.cache_dir(env { HF_HUB_CACHE = "~/c/", HOME = "/home/u" }))
      assert.are.equal("https://huggingface.co", hub.endpoint(env {}))
      assert.are.equal("http://127.0.0.1:9", hub.endpoint(env { HF_ENDPOINT = "http://127.0.0.1:9/" }))
    end)

    it("takes HF_TOKEN, else the token huggingface-cli login saved", function()
      local home = H.tmpdir()
      assert.is_nil(hub.token(env { HF_HOME = home }))
      H.write_file(home .. "/token", "hf_saved\n")
      assert.are.equal("hf_saved", hub.token(env { HF_HOME = home }))
      assert.are.equal("hf_env", hub.token(env { HF_HOME = home, HF_TOKEN = "hf_env" }))
    end)

    -- CACHE/models--openai--gpt-oss-7m by hand: main at COMMIT (Hugging Face's layout), v1 at
    -- OTHER_COMMIT (original/ only), each file a link into blobs/
    local function hand_built_cache()
      local cache = H.tmpdir()
      local repo = cache .. "/models--openai--gpt-oss-7m"
      mkdir(repo .. "/blobs")
      for commit, layout in pairs { [COMMIT] = "hf", [OTHER_COMMIT] = "original" } do
        local folder = ("%s/snapshots/%s%s"):format(repo, commit, layout == "original" and "/original" or "")
        mkdir(folder)
        for _, name in ipairs(H.list_dir(SOURCE .. "/7m-" .. layout)) do
          local blob = ("%s-%s"):format(layout, name)
          hard_link(("%s/7m-%s/%s"):format(SOURCE, layout, name), repo .. "/blobs/" .. blob)
          local up = layout == "original" and "../../../" or "../../"
          assert(os.execute(("ln -s %s %s"):format(q(up .. "blobs/" .. blob), q(folder .. "/" .. name))))
        end
      end
      mkdir(repo .. "/refs")
      H.write_file(repo .. "/refs/main", COMMIT)
      H.write_file(repo .. "/refs/v1", OTHER_COMMIT .. "\n")
      return cache, repo
    end

    it("resolves an id from refs and snapshots, the original/ folder where that is what is there", function()
      local cache, repo = hand_built_cache()
      local getenv = env { HF_HUB_CACHE = cache }
      local main = hub.resolve("openai/gpt-oss-7m", getenv)
      assert.are.equal(("%s/snapshots/%s"):format(repo, COMMIT), main)
      assert.are.equal("hf", gptoss.load(main).format)
      local v1 = hub.resolve("openai/gpt-oss-7m@v1", getenv)
      assert.are.equal(("%s/snapshots/%s/original"):format(repo, OTHER_COMMIT), v1)
      assert.are.equal(v1, hub.resolve("openai/gpt-oss-7m@" .. OTHER_COMMIT:upper(), getenv))
      assert.are.equal("original", gptoss.load(v1).format)
      expect_error(function() hub.resolve("openai/gpt-oss-7m@v2", getenv) end,
        ("'openai/gpt-oss-7m@v2' is not in the Hugging Face cache %s (no %s/refs/v2): gptoss pull "
          .. "openai/gpt-oss-7m --revision v2, or huggingface-cli download openai/gpt-oss-7m --revision v2 gets it")
          :format(cache, repo))
      expect_error(function() hub.resolve("openai/gpt-oss-20b", getenv) end, "models--openai--gpt-oss-20b/refs/main",
        ": gptoss pull openai/gpt-oss-20b, or huggingface-cli download openai/gpt-oss-20b gets it")
      H.write_file(repo .. "/refs/main", "not a commit")
      expect_error(function() hub.resolve("openai/gpt-oss-7m", getenv) end, "refs/main does not hold a commit id")
    end)

    -- `gptoss demo MODEL` in dir with env: exit code, the model's line, stderr
    local function demo(dir, model, environment)
      local code, out, err = H.gptoss(pending, dir, { "demo", model, "--max-tokens", "2" }, environment)
      return code, out:match("^[^\n]*"), err
    end

    it("lets every command name a cached model by its id, a path that is there winning, shapes unchanged", function()
      local cache = hand_built_cache()
      local dir = H.tmpdir()
      local code, model, err = demo(dir, "openai/gpt-oss-7m", { HF_HUB_CACHE = cache })
      assert.are.equal(0, code, err)
      assert.truthy(model:find("snapshots/" .. COMMIT, 1, true), model)
      -- a folder of that name in the current directory is the model instead
      hard_link(SOURCE .. "/7m-hf", dir .. "/openai/gpt-oss-7m")
      code, model, err = demo(dir, "openai/gpt-oss-7m", { HF_HUB_CACHE = cache })
      assert.are.equal(0, code, err)
      assert.truthy(model:find("(hf openai/gpt-oss-7m:", 1, true), model)
      -- HF_HUB_CACHE comes before HF_HOME: an empty one hides HF_HOME's copy
      local home = H.tmpdir()
      assert(os.rename(cache, home .. "/hub"))
      code, model, err = demo(H.tmpdir(), "openai/gpt-oss-7m", { HF_HOME = home })
      assert.are.equal(0, code, err)
      assert.truthy(model:find(home .. "/hub/models--openai--gpt-oss-7m/snapshots/", 1, true), model)
      code, _, err = demo(H.tmpdir(), "openai/gpt-oss-7m", { HF_HOME = home, HF_HUB_CACHE = H.tmpdir() })
      assert.are.equal(1, code)
      assert.truthy(err:find("^gptoss demo: load: cannot open model file 'openai/gpt%-oss%-7m': No such file or "
        .. "directory; nor is it a model in the Hugging Face cache .*: gptoss pull openai/gpt%-oss%-7m, or "
        .. "huggingface%-cli download openai/gpt%-oss%-7m gets it\n$"), err)
      code, model = demo(dir, "7m", {})
      assert.are.same({ 0, "synthetic" }, { code, model:match("%((%a+)") })
    end)
  end)

  describe("gptoss pull", function()
    local hub_process -- {endpoint =, pid =, pipe =, log =, config =}
    local TINY_REPO = { dir = "repo-tiny", commit = COMMIT, refs = { main = COMMIT } }

    -- the fake hub's repositories: 7m and tiny ones, and tiny ones that misbehave
    local function repositories()
      local function tiny(changes) return H.with(TINY_REPO, changes) end
      local repos = {
        ["openai/gpt-oss-7m"] = { dir = "repo-7m", commit = COMMIT, refs = { main = COMMIT } },
        ["test/tiny"] = tiny(),
        ["test/private"] = tiny { token = "hf_secret" },
        ["test/cut-once"] = tiny { cut = { ["model.safetensors"] = { at = 10000, times = 1 } } },
        ["test/cut-twice"] = tiny { cut = { ["model.safetensors"] = { at = 10000, times = 2 } } },
        ["test/bad-hash"] = tiny { wrong_sha256 = { ["model.safetensors"] = true } },
        ["test/outside"] = tiny { extra_siblings = { { rfilename = "../escape", size = 1, blobId = COMMIT } } },
      }
      for _, repo in pairs(repos) do repo.dir = SOURCE .. "/" .. repo.dir end
      return repos
    end

    setup(function()
      if not have_pull then return end
      local config, log = os.tmpname(), os.tmpname()
      H.write_file(config, dkjson.encode(repositories()))
      local pipe = assert(io.popen(("LUA_PATH=%s LUA_CPATH=%s %s %s %s %s 2>&1 & echo pid $!"):format(q(package.path),
        q(package.cpath), q(H.TREE.lua), q(H.TREE.root .. "tests/fake_hub.lua"), q(config), q(log))))
      local port, pid, said = nil, nil, {}
      for _ = 1, 2 do
        local line = pipe:read("l") or ""
        port, pid, said[#said + 1] = port or line:match("^port (%d+)$"), pid or line:match("^pid (%d+)$"), line
      end
      hub_process = { pid = pid, pipe = pipe, log = log, config = config }
      assert(port, "the fake hub did not start: " .. table.concat(said, "\n"))
      hub_process.endpoint = "http://127.0.0.1:" .. port
    end)

    teardown(function()
      if not hub_process then return end
      if hub_process.pid then os.execute("kill " .. hub_process.pid) end
      hub_process.pipe:close()
      os.remove(hub_process.config)
      os.remove(hub_process.log)
    end)

    before_each(function()
      if not have_pull then pending(why_no_pull) end
    end)
    after_each(H.cleanup)

    -- hub_pull.run against the fake hub, anonymous unless opts say otherwise
    local function pull(opts)
      opts.endpoint, opts.token = hub_process.endpoint, opts.token or false
      return hub_pull.run(opts)
    end

    -- the fake hub's requests since a mark (the log's length then): mark(), then requests(m)
    local function mark() return #H.read_file(hub_process.log) end
    local function requests(since, server)
      local lines = {}
      for line in H.read_file(hub_process.log):sub(since + 1):gmatch("[^\n]+") do
        if not server or line:match("^" .. server) then lines[#lines + 1] = line end
      end
      return lines
    end

    local function git_blob_id(data) return hex_digest("sha1", ("blob %d\0"):format(#data) .. data) end

    it("writes the cache as huggingface_hub does, where every command then finds the model by its id", function()
      local cache, since, reports = H.tmpdir(), mark(), {}
      local pulled = pull { id = "openai/gpt-oss-7m", cache = cache, token = "hf_x",
        on_progress = function(p) reports[#reports + 1] = p.done end }
      local repo = cache .. "/models--openai--gpt-oss-7m"
      local snapshot = ("%s/snapshots/%s"):format(repo, COMMIT)
      assert.are.same({ COMMIT, 3, snapshot, snapshot },
        { pulled.commit, pulled.files, pulled.snapshot, pulled.model_dir })
      assert.are.equal(COMMIT, H.read_file(repo .. "/refs/main"))
      local blobs, bytes = {}, 0
      for _, name in ipairs { "README.md", "config.json", "model.safetensors" } do
        local data = H.read_file(SOURCE .. "/repo-7m/" .. name)
        local blob = name:match("safetensors$") and hex_digest("sha256", data) or git_blob_id(data)
        assert.are.equal("../../blobs/" .. blob, link_target(snapshot .. "/" .. name))
        assert.are.equal(data, H.read_file(snapshot .. "/" .. name))
        blobs[#blobs + 1], bytes = blob, bytes + #data
      end
      table.sort(blobs)
      assert.are.same(blobs, H.list_dir(repo .. "/blobs")) -- no .incomplete left, original/ not fetched
      assert.are.same({ bytes, bytes, bytes }, { pulled.bytes, pulled.fetched, reports[#reports] })
      -- the token goes to the hub, never to the CDN that sends the LFS file
      local seen = requests(since)
      assert.are.equal(5, #seen) -- the listing, three files, the CDN
      for _, line in ipairs(seen) do
        assert.truthy(line:find(line:match("^hub") and " auth=Bearer hf_x$" or " auth=nil$"), line)
      end
      local dir = H.tmpdir()
      local code, out, err = H.gptoss(pending, dir, { "demo", "openai/gpt-oss-7m", "--max-tokens", "2" },
        { HF_HUB_CACHE = cache })
      assert.are.equal(0, code, err)
      local _, synthetic = H.gptoss(pending, dir, { "demo", "7m", "--max-tokens", "2" })
      assert.are.equal(synthetic:match("generated: [^\n]*"), out:match("generated: [^\n]*"))
      -- pulled again: the listing, and nothing fetched
      since = mark()
      assert.are.equal(0, pull { id = "openai/gpt-oss-7m", cache = cache }.fetched)
      assert.are.equal(1, #requests(since))
    end)

    it("resumes a file a dropped connection cut, with a Range request, in the same pull or the next", function()
      local tiny = H.read_file(SOURCE .. "/tiny-hf/model.safetensors")
      local cache, since = H.tmpdir(), mark()
      local pulled = pull { id = "test/cut-once", cache = cache }
      assert.are.equal(tiny, H.read_file(pulled.snapshot .. "/model.safetensors"))
      assert.are.same({ "cdn /cdn/test/cut-once/model.safetensors range=nil auth=nil",
        "cdn /cdn/test/cut-once/model.safetensors range=bytes=10000- auth=nil" }, requests(since, "cdn"))
      -- the try again is cut before its first byte as well: the pull stops, its bytes kept
      local blob = ("%s/models--test--cut-twice/blobs/%s"):format(cache, hex_digest("sha256", tiny))
      expect_error(function() pull { id = "test/cut-twice", cache = cache } end, ("test/cut-twice at main: "
        .. "model.safetensors: the connection dropped at byte 10000 of %d (closed): the same pull again resumes there")
        :format(#tiny))
      assert.are.equal(tiny:sub(1, 10000), H.read_file(blob .. ".incomplete"))
      assert.is_nil(io.open(blob))
      since = mark()
      pulled = pull { id = "test/cut-twice", cache = cache }
      assert.are.same({ "cdn /cdn/test/cut-twice/model.safetensors range=bytes=10000- auth=nil" },
        requests(since, "cdn"))
      assert.are.equal(tiny, H.read_file(pulled.snapshot .. "/model.safetensors"))
      assert.is_nil(io.open(blob .. ".incomplete"))
    end)

    it("refuses a file whose bytes do not hash to what the hub lists, keeping nothing of it", function()
      local tiny = H.read_file(SOURCE .. "/tiny-hf/model.safetensors")
      local cache = H.tmpdir()
      expect_error(function() pull { id = "test/bad-hash", cache = cache } end, ("test/bad-hash at main: "
        .. "model.safetensors: the bytes received hash to %s, not to the %s the hub lists (sha256): discarded, "
        .. "nothing kept"):format(hex_digest("sha256", tiny), ("0"):rep(64)))
      local repo = cache .. "/models--test--bad-hash"
      assert.are.same({ git_blob_id(H.read_file(SOURCE .. "/tiny-hf/config.json")) }, H.list_dir(repo .. "/blobs"))
      assert.are.same({ "config.json" }, H.list_dir(("%s/snapshots/%s"):format(repo, COMMIT)))
    end)

    it("says HF_TOKEN on a 401, names the id and the revision on a 404, refuses paths out of the snapshot", function()
      expect_error(function() pull { id = "test/private", cache = H.tmpdir() } end,
        "test/private at main: the hub refused it (HTTP 401: Access to this model is restricted: you must be "
          .. "authenticated): the model is private, gated or not there; set HF_TOKEN to a token that can read it")
      assert.are.equal(COMMIT, pull { id = "test/private", cache = H.tmpdir(), token = "hf_secret" }.commit)
      expect_error(function() pull { id = "test/nope", cache = H.tmpdir() } end,
        ("test/nope at main: not found on %s (HTTP 404: Repository not found)"):format(hub_process.endpoint))
      expect_error(function() pull { id = "test/tiny", revision = "v9", cache = H.tmpdir() } end,
        ("test/tiny at v9: not found on %s (HTTP 404: Revision Not Found)"):format(hub_process.endpoint))
      expect_error(function() pull { id = "test/outside", cache = H.tmpdir() } end,
        "names a file '../escape' that is not a path inside the repository")
    end)

    it("takes the files --include's globs match, OpenAI's original/ among them", function()
      local cache = H.tmpdir()
      local pulled = pull { id = "test/tiny", cache = cache, include = { "original/*" } }
      assert.are.equal(pulled.snapshot .. "/original", pulled.model_dir)
      local original = H.read_file(SOURCE .. "/tiny-original/model.safetensors")
      assert.are.equal("../../../blobs/" .. hex_digest("sha256", original),
        link_target(pulled.snapshot .. "/original/model.safetensors"))
      assert.are.same({ "original" }, H.list_dir(pulled.snapshot))
      assert.are.equal(pulled.model_dir, hub.resolve("test/tiny", env { HF_HUB_CACHE = cache }))
      assert.are.equal("original", gptoss.load(pulled.model_dir).format)
      -- * crosses folders, as fnmatch's does; globs that take nothing list the files
      assert.are.equal(2, pull { id = "test/tiny", cache = H.tmpdir(), include = { "*.json" } }.files)
      expect_error(function() pull { id = "test/tiny", cache = H.tmpdir(), include = { "*.bin", "x/" } } end,
        "test/tiny at main: no file matches --include *.bin, --include x/ (the files: config.json, model.safetensors, "
          .. "original/config.json, original/model.safetensors)")
      for glob, paths in pairs {
        ["original/"] = { ["original/a.json"] = true, originalx = false },
        ["model-0000?-of-*.safetensors"] = { ["model-00001-of-00002.safetensors"] = true,
          ["model-1-of-2.safetensors"] = false },
        ["[!o]*"] = { ["config.json"] = true, ["original/config.json"] = false },
        ["a.b%"] = { ["a.b%"] = true, ["axb%"] = false },
      } do
        for path, matches in pairs(paths) do
          assert.are.equal(matches, path:find(hub_pull.glob_pattern(glob)) ~= nil, glob .. " " .. path)
        end
      end
    end)

    it("runs as gptoss pull, with HF_ENDPOINT, HF_HUB_CACHE and HF_TOKEN, one line for what is wrong", function()
      local cache, dir = H.tmpdir(), H.tmpdir()
      local environment = { HF_ENDPOINT = hub_process.endpoint, HF_HUB_CACHE = cache, HF_HOME = dir,
        HF_TOKEN = "hf_secret" }
      local code, out, err = H.gptoss(pending, dir, { "pull", "test/private@main", "--include", "original/*" },
        environment)
      assert.are.same({ 0, "" }, { code, err })
      assert.are.equal(("test/private at main (commit %s): 2 files, 0.00 GiB, 0.00 GiB of it fetched now\nin "
        .. "%s/models--test--private/snapshots/%s\n"):format(COMMIT, cache, COMMIT), out)
      environment.HF_TOKEN = ""
      code, out, err = H.gptoss(pending, dir, { "pull", "test/private" }, environment)
      assert.are.same({ 1, "" }, { code, out })
      assert.truthy(err:find("^gptoss pull: test/private at main: the hub refused it %(HTTP 401"), err)
      for _, case in ipairs {
        { { "pull", "nope" }, "gptoss pull: 'nope' is not a Hugging Face model id (ORG/NAME or ORG/NAME@REVISION)\n" },
        { { "pull", "a/b@x", "--revision", "y" }, "gptoss pull: 'a/b@x' and --revision y name two revisions\n" },
      } do
        code, _, err = H.gptoss(pending, dir, case[1], environment)
        assert.are.same({ 1, case[2] }, { code, err })
      end
    end)

    it("refuses options that name no model, revision or glob, before asking the hub", function()
      expect_error(function() hub_pull.run { id = "nope" } end,
        "pull: 'nope' is not a Hugging Face model id (ORG/NAME)")
      expect_error(function() hub_pull.run { id = "a/b@main" } end, "pull: 'a/b@main' is not a Hugging Face model id")
      expect_error(function() hub_pull.run { id = "a/b", revision = "../x" } end,
        "pull: '../x' is not a revision (a branch, a tag or a commit)")
      expect_error(function() hub_pull.run { id = "a/b", include = { 3 } } end, "pull: include holds 3, not a glob")
      expect_error(function() hub_pull.run { id = "a/b", tokn = "x" } end, "pull: unknown option 'tokn'")
    end)

    it("shows the bytes, the rate and the time left", function()
      assert.are.equal("openai/gpt-oss-20b: 1.00 of 4.00 GiB, 102.4 MiB/s, 0:30 left", hub_pull.progress_line {
        id = "openai/gpt-oss-20b", done = 2 ^ 30, total = 4 * 2 ^ 30, fetched = 2 ^ 30, elapsed = 10 })
      assert.are.equal("x/y: 0.00 of 1.00 GiB, 0.0 MiB/s, -- left", hub_pull.progress_line {
        id = "x/y", done = 0, total = 2 ^ 30, fetched = 0, elapsed = 0 })
    end)
  end)
end)
