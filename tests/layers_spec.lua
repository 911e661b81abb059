-- docs/architecture.md's layer diagram against the C and HIP sources: each "LAYER → A, B" line
-- says which layers LAYER's #include lines reach, and the includes must reach exactly those, so
-- that the diagram is what the code does rather than what it was meant to do.
local H = require "helpers"

-- the folders the diagram's C and HIP layers are, but for src/core's formulas (a layer of their
-- own: the files the diagram's formulas line names)
local FOLDERS = { "src/lua", "src/hip", "src/core", "kernels", "contract" }

-- The diagram's arrows {[layer] = {[layer it includes] = true}} and the formulas' file names.
local function diagram(text)
  local section = assert(text:match("\n## Layers\n(.-)\n## "), "docs/architecture.md has no Layers section")
  local block = assert(section:match("\n```\n(.-)\n```\n"), "the Layers section has no diagram")
  local arrows, formulas, in_formulas = {}, {}, false
  for line in block:gmatch("[^\n]+") do
    local layer, reached = line:match("^(%S+)%s+→%s+(.-)%s%s")
    if layer then
      arrows[layer] = {}
      for name in reached:gmatch("[^,%s]+") do arrows[layer][name] = true end
    end
    in_formulas = line:match("^formulas%s") ~= nil or (in_formulas and line:match("^%s") ~= nil)
    if in_formulas then
      for name in line:gmatch("[%w_]+%.h") do formulas["src/core/" .. name] = true end
    end
  end
  arrows.formulas = arrows.formulas or {}
  return arrows, formulas
end

-- path with its "dir/../" steps taken out
local function normal(path)
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." and #parts > 0 and parts[#parts] ~= ".." then parts[#parts] = nil
    elseif part ~= "." then parts[#parts + 1] = part end
  end
  return table.concat(parts, "/")
end

-- The layers the includes reach: {[from] = {[to] = "file: its include"}}, one include for each.
local function include_graph(root, formulas)
  local function layer_of(path)
    if formulas[path] then return "formulas" end
    return path:match("^(.*)/[^/]+$")
  end
  local graph = {}
  for _, folder in ipairs(FOLDERS) do
    for _, name in ipairs(H.list_dir(root .. folder)) do
      if name:match("%.[ch]$") or name:match("%.hip$") then
        local path = folder .. "/" .. name
        for target in H.read_file(root .. path):gmatch("\n#include \"([^\"]+)\"") do
          local to, from = normal(folder .. "/" .. target), layer_of(path)
          assert.truthy(io.open(root .. to), ("%s includes %s, which is not there"):format(path, to))
          local reached = layer_of(to)
          if reached ~= from then
            graph[from] = graph[from] or {}
            graph[from][reached] = graph[from][reached] or ("%s: #include \"%s\""):format(path, target)
          end
        end
      end
    end
  end
  return graph
end

describe("docs/architecture.md's layers", function()
  it("draw the arrows the #include lines of the C and HIP sources follow, and no others", function()
    local root = H.TREE.root
    if not root then pending("gptoss was not loaded from a source tree") end
    local arrows, formulas = diagram(H.read_file(root .. "docs/architecture.md"))
    assert.is_true(next(formulas) ~= nil, "the diagram's formulas line names no header")
    for path in pairs(formulas) do assert.truthy(io.open(root .. path), path .. ": a formula that is not there") end
    for _, folder in ipairs(FOLDERS) do assert.truthy(arrows[folder], folder .. " has no line in the diagram") end
    local graph, wrong = include_graph(root, formulas), {}
    for from, reached in pairs(graph) do
      for to, include in pairs(reached) do
        if not (arrows[from] and arrows[from][to]) then
          wrong[#wrong + 1] = ("no arrow %s → %s (%s)"):format(from, to, include)
        end
      end
    end
    for from, drawn in pairs(arrows) do
      for to in pairs(drawn) do
        if not (graph[from] and graph[from][to]) then wrong[#wrong + 1] = ("%s → %s: no include"):format(from, to) end
      end
    end
    table.sort(wrong)
    assert.are.same({}, wrong)
  end)
end)
