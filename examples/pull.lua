#!/usr/bin/env lua5.4
-- Downloads a model from the Hugging Face hub into the local Hugging Face cache, where every
-- command then finds it by its id (gptoss chat openai/gpt-oss-20b), as huggingface-cli
-- download would (gptoss.hub_pull; docs/getting-models.md):
--   gptoss pull ID [--revision R] [--include GLOB]...
-- ID is ORG/NAME (openai/gpt-oss-20b) or ORG/NAME@REVISION. Without --include, the files at
-- the top of the repository (the Hugging Face layout); --include 'original/*' takes OpenAI's.
-- A pull that stopped resumes where it stopped. HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE and
-- HF_HOME are read as huggingface_hub reads them. On a terminal, stderr shows the progress.
-- Exit status: 0 done, 1 anything wrong (usage, network, a file that is not what the hub
-- lists), with one message on stderr.
local argparse = require "argparse"
local gptoss = require "gptoss"
local hub = require "gptoss.hub"
local progress = require "gptoss.progress"
local script = require "gptoss.script"

local parser = argparse(script.name, "Download a model from the Hugging Face hub into its local cache.")
parser:argument("id", "The model's id: ORG/NAME (openai/gpt-oss-20b), or ORG/NAME@REVISION.")
parser:option("--revision", "A branch, a tag or a commit (default: main)."):argname("<rev>")
parser:option("--include", "A glob of the files to get, as huggingface-cli's (repeatable; default: the files "
  .. "at the top of the repository).", {}):argname("<glob>"):count("*")
local a = script.parse(parser)

script.run(function()
  local hub_pull = require "gptoss.hub_pull" -- here, so that a module it lacks is one line
  local id, revision = hub.parse(a.id)
  if not id then error(("'%s' is not a Hugging Face model id (ORG/NAME or ORG/NAME@REVISION)"):format(a.id), 0) end
  if revision and a.revision and revision ~= a.revision then
    error(("'%s' and --revision %s name two revisions"):format(a.id, a.revision), 0)
  end
  revision = a.revision or revision or hub.DEFAULT_REVISION
  local bar = gptoss.isatty(2) and progress.new { write = function(s) io.stderr:write(s) end,
    format = hub_pull.progress_line }
  local ok, pulled = pcall(hub_pull.run, { id = id, revision = revision, include = a.include,
    on_progress = bar and function(p) bar:update(p) end or nil })
  if bar then bar:close() end
  if not ok then error(pulled, 0) end
  print(("%s at %s (commit %s): %d files, %.2f GiB, %.2f GiB of it fetched now"):format(id, revision, pulled.commit,
    pulled.files, pulled.bytes / 2 ^ 30, pulled.fetched / 2 ^ 30))
  print(("in %s%s"):format(pulled.snapshot, pulled.model_dir and ""
    or "; no config.json among the files: not a model gptoss loads (--include 'original/*' takes OpenAI's layout)"))
end)
