-- Every commit id and branch name the documents mention (docs/*.md, README.md,
-- examples/RESULTS.md and examples/results.jsonl) names a commit on the checked-out branch (main
-- in CI), so that a reader can follow it: only main is kept, so an id of a branch never merged, or
-- the branch's name, can never be followed. A commit id here: a word of 7 to 40 hexadecimal
-- digits with a letter among them (a word of digits alone reads as a number: such an id is
-- checked only in results.jsonl's commit fields); a branch name: what follows "branch" in
-- backticks, or the word after it where it has a digit, "_", "-", "." or "/" (a plain word is
-- prose: "a branch that"). Pending outside a git checkout and in a shallow clone, where the older
-- commits are missing (.ci/run deepens CI's clone first).
local json = require "dkjson"
local H = require "helpers"

-- git's output in the tree, or nil when git fails there (not a checkout, no git)
local function git(root, args)
  local p = assert(io.popen(("git -C %s %s 2>/dev/null"):format(H.shell_quote(root), args)))
  local out = p:read("a")
  return p:close() and out or nil
end

-- The documents' paths from the tree's root.
local function documents(root)
  local paths = { "README.md", "examples/RESULTS.md", "examples/results.jsonl" }
  for _, name in ipairs(H.list_dir(root .. "docs")) do
    if name:match("%.md$") then paths[#paths + 1] = "docs/" .. name end
  end
  return paths
end

-- The ids and branch names text mentions, each {ref, what}; all_digits: a word of digits alone
-- counts as an id too (a commit field).
local function mentions(text, all_digits, found, where)
  -- a number in exponent form is no id: 6.0448000673205e-05's fraction reads as hex
  for word in text:gsub("%d%.%d+[eE][-+]?%d+", ""):gmatch("%f[%w]%w+%f[%W]") do
    if #word >= 7 and #word <= 40 and word:match("^%x+$") and (all_digits or word:match("%a")) then
      found[#found + 1] = { word, where }
    end
  end
  for quoted, name in text:gmatch("[Bb]ranch%s+(`?)([%w_./-]*[%w_])") do
    if quoted == "`" or name:find("[%d_./-]") then found[#found + 1] = { name, where .. " (a branch)" } end
  end
end

describe("the documents' commit ids and branch names", function()
  it("each name a commit on the checked-out branch", function()
    local root = H.TREE.root
    if not root then pending("gptoss was not loaded from a source tree") end
    local shallow = git(root, "rev-parse --is-shallow-repository")
    if not shallow then pending("not a git checkout") end
    if shallow:match("true") then pending("a shallow clone: the older commits are missing (git fetch --unshallow)") end
    local on_branch, names = {}, {}
    for id in git(root, "rev-list HEAD"):gmatch("%x+") do on_branch[#on_branch + 1] = id end
    for line in git(root, "for-each-ref --format='%(refname:short) %(objectname)'"):gmatch("[^\n]+") do
      local name, id = line:match("^(%S+) (%x+)$")
      names[name] = id
    end
    local function resolves(ref)
      for _, id in ipairs(on_branch) do
        if id:sub(1, #ref) == ref:lower() then return true end
      end
      return names[ref] ~= nil and git(root, ("merge-base --is-ancestor %s HEAD"):format(names[ref])) ~= nil
    end
    local found = {}
    for _, path in ipairs(documents(root)) do
      local text = H.read_file(root .. path)
      mentions(text, false, found, path)
      if path:match("%.jsonl$") then
        local n = 0
        for line in text:gmatch("[^\n]+") do
          n = n + 1
          mentions(json.decode(line).commit, true, found, ("%s:%d's commit"):format(path, n))
        end
      end
    end
    local missing = {}
    for _, f in ipairs(found) do
      if not resolves(f[1]) then missing[#missing + 1] = ("%s in %s"):format(f[1], f[2]) end
    end
    assert.is_true(#found > 100, #found)
    assert.are.same({}, missing)
  end)
end)
