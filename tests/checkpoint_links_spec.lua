-- A checkpoint's files and the links among them (docs/checkpoints.md#links): gptoss reads
-- config.json, the index and the shards only where they lie in the checkpoint's directory,
-- links followed; a link out of it is refused, naming the file and where it leads, but for a
-- Hugging Face cache's snapshot, whose files link into the repository's blobs/.
local gptoss = require "gptoss"
local H = require "helpers"

local q, expect_error = H.shell_quote, H.expect_error
local m = gptoss.synthetic(H.TINY, { seed = 5 })
local SHARD_BYTES = 20000 -- the tiny model in several shards, with an index

-- m saved in a new directory ckpt inside `into` (default: a temporary directory)
local function saved(into, opts)
  local dir = (into or H.tmpdir()) .. "/ckpt"
  m:save(dir, opts or { format = "hf" })
  return dir
end

-- dir/name moved to `to`, and a link to it (its text: target) left in its place
local function moved_and_linked(dir, name, to, target)
  assert(os.rename(dir .. "/" .. name, to))
  assert(os.execute(("ln -s %s %s"):format(q(target or to), q(dir .. "/" .. name))))
end

local function same_model(dir)
  local loaded = gptoss.load(dir)
  assert.are.equal(H.tensor_bytes(m:tensor("w_qkv", 2)), H.tensor_bytes(loaded:tensor("w_qkv", 2)))
end

describe("links in a checkpoint directory", function()
  after_each(H.cleanup)

  it("refuses config.json, the index or a shard that links outside the directory, naming it", function()
    local shard -- the first of the index's shards
    for _, name in ipairs(H.list_dir(saved(nil, { format = "hf", shard_bytes = SHARD_BYTES }))) do
      shard = shard or name:match("^model%-.*%.safetensors$")
    end
    for _, case in ipairs { { "config.json", "checkpoint config" }, { "model.safetensors", "checkpoint shard" },
      { "model.safetensors.index.json", "checkpoint index", { format = "hf", shard_bytes = SHARD_BYTES } },
      { shard, "checkpoint shard", { format = "hf", shard_bytes = SHARD_BYTES } } } do
      local dir, outside = saved(nil, case[3]), H.tmpdir() .. "/elsewhere"
      moved_and_linked(dir, case[1], outside)
      expect_error(function() gptoss.load(dir) end, ("%s '%s/%s' is a link to '"):format(case[2], dir, case[1]),
        "elsewhere', outside the checkpoint's directory: gptoss reads no file a checkpoint links to outside it")
    end
  end)

  it("follows links that stay inside it, and a Hugging Face snapshot's links into its repository's blobs/", function()
    local dir = saved()
    assert(os.execute("mkdir " .. q(dir .. "/kept")))
    moved_and_linked(dir, "model.safetensors", dir .. "/kept/model.safetensors", "kept/model.safetensors")
    same_model(dir)
    -- huggingface_hub's cache: repo/snapshots/REVISION/NAME -> ../../blobs/HASH
    local repo = H.tmpdir() .. "/models--openai--tiny"
    assert(os.execute(("mkdir -p %s/blobs %s/snapshots/0123abc"):format(q(repo), q(repo))))
    local snapshot = saved(repo .. "/snapshots/0123abc", { format = "hf", shard_bytes = SHARD_BYTES })
    for i, name in ipairs(H.list_dir(snapshot)) do
      moved_and_linked(snapshot, name, ("%s/blobs/%d"):format(repo, i), ("../../../blobs/%d"):format(i))
    end
    same_model(snapshot)
    -- but not into another folder of the repository
    local index = snapshot .. "/model.safetensors.index.json"
    assert(os.execute(("mkdir %s/other && cp %s %s/other/index.json && ln -sf ../../../other/index.json %s"):format(
      q(repo), q(index), q(repo), q(index))))
    expect_error(function() gptoss.load(snapshot) end, "checkpoint index", "outside the checkpoint's directory")
  end)
end)
