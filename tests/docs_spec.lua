-- The commands of README.md and docs/*.md run as written from a directory outside the tree
-- (docs/building.md#the-documents-commands): in each ```sh block, the lines that start with
-- gptoss, ./gptoss or printf, in order, in a fresh directory where the tree's gptoss is on
-- PATH and linked as ./gptoss, each within LIMIT seconds; the exit status 0 or the one its
-- comment gives ("exit N"); not run where its comment says "(a GPU)" on a build without one,
-- where it draws (--plot) without gnuplot, or where it names a downloaded model (gpt-oss-...).
local gptoss = require "gptoss"
local H = require "helpers"

local LIMIT = 60 -- seconds a line may take: the suite stays fast, and a line that hangs fails

-- Lines of ```sh blocks in a Markdown text: a list of blocks, each a list of {text =, line =}.
local function sh_blocks(text)
  local blocks, block, n = {}, nil, 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    if block then
      if line:match("^```") then
        blocks[#blocks + 1], block = block, nil
      else
        block[#block + 1] = { text = line, line = n }
      end
    elseif line:match("^```sh%s*$") then
      block = {}
    end
  end
  return blocks
end

-- whether the spec runs a line of a ```sh block at all
local function runs(text)
  return text:match("^%.?/?gptoss%s") or text:match("^printf%s")
end

local HAS_GNUPLOT = os.execute("command -v gnuplot >/dev/null 2>&1")

-- whether it can here: not with a downloaded model, nor one for a GPU on a build without one,
-- nor a benchmark's --plot without gnuplot (the GPU machine's case)
local function runs_here(text)
  return not text:find("gpt-oss-", 1, true) and not (text:find("(a GPU)", 1, true) and #gptoss.devices() == 0)
    and not (text:find("--plot", 1, true) and not HAS_GNUPLOT)
end

-- the documents with ```sh blocks, and those blocks
local DOCUMENTS, BLOCKS = {}, {}
if H.TREE.root then
  local names = { "README.md" }
  for _, name in ipairs(H.list_dir(H.TREE.root .. "docs")) do
    if name:match("%.md$") then names[#names + 1] = "docs/" .. name end
  end
  for _, doc in ipairs(names) do
    local blocks = sh_blocks(H.read_file(H.TREE.root .. doc))
    if #blocks > 0 then DOCUMENTS[#DOCUMENTS + 1], BLOCKS[doc] = doc, blocks end
  end
end

describe("the documents' commands", function()
  after_each(H.cleanup)

  it("show the main commands each in a line they run", function()
    if not H.TREE.root then pending("gptoss was not loaded from a source tree") end
    local named = {}
    for _, doc in ipairs(DOCUMENTS) do
      for _, block in ipairs(BLOCKS[doc]) do
        for _, l in ipairs(block) do
          if runs(l.text) then
            for command in (" " .. l.text):gmatch("[%s|]%.?/?gptoss%s+([%w_]+)") do named[command] = true end
          end
        end
      end
    end
    for _, command in ipairs { "help", "run", "chat", "demo", "parity", "checker", "speculative", "beam_search",
      "best_of_n", "lua" } do
      assert.is_true(named[command], command)
    end
  end)

  for _, doc in ipairs(DOCUMENTS) do
    it(("in %s run as written from another directory"):format(doc), function()
      local tree = H.TREE
      if not (tree.root and tree.build) then pending("gptoss was not loaded from a source tree and a build folder") end
      local ran = 0
      for _, block in ipairs(BLOCKS[doc]) do
        local dir = H.tmpdir()
        assert(os.execute(("ln -s %s %s/gptoss"):format(H.shell_quote(tree.root .. "gptoss"), H.shell_quote(dir))))
        -- ./gptoss with the specs' interpreter and build folder, as H.gptoss runs it
        local env = { PATH = dir .. ":" .. os.getenv("PATH"), GPTOSS_LUA = tree.lua, GPTOSS_BUILD = tree.build }
        for _, l in ipairs(block) do
          if runs(l.text) and runs_here(l.text) then
            local status = tonumber(l.text:match("#.-exit (%d+)")) or 0
            local code, out, err = H.run_in(dir, env, { "timeout", tostring(LIMIT), "sh", "-c", l.text })
            local where = ("%s:%d: %s\n%s%s"):format(doc, l.line, l.text, out, err)
            assert.are_not.equal(124, code, ("took more than %d s: "):format(LIMIT) .. where)
            assert.are.equal(status, code, where)
            ran = ran + 1
          end
        end
      end
      if ran == 0 then pending(("%s's commands need what this machine has not"):format(doc)) end
    end)
  end
end)
