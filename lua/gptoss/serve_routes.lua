--- gptoss.serve_routes (internal, gptoss.serve's): the route table of the HTTP front.
-- Routes are keyed "METHOD /path" (gptoss.serve_api's); a path may end in one {part}
-- ("/v1/models/{id}"), which matches the rest of a request's path, slashes included (model
-- names hold them: "openai/gpt-oss-20b"), percent-decoded.
--
--   local t = serve_routes.new(routes, cors)   cors: OPTIONS allowed on every path too
--   t:find(path)                               the route's path (a template's for a path it
--                                              matches) and the {part}; nil when none
--   t.allow[route_path]                        the methods it takes ("GET, HEAD"), for Allow
local serve_routes = {}

local Table = {}
Table.__index = Table

--- The table of routes (see the header); a {part} anywhere but at a path's end is an error.
function serve_routes.new(routes, cors)
  local methods, templates = {}, {}
  for key in pairs(routes) do
    local method, path = key:match("^(%S+) (.*)$")
    if not methods[path] and path:find("{", 1, true) then
      local head = path:match("^(.*/){[%w_]+}$")
      if not head then error("serve_routes: a route's {part} must end its path: " .. path, 0) end
      templates[#templates + 1] = { path = path, pattern = "^" .. head:gsub("%p", "%%%0") .. "(.+)$" }
    end
    methods[path] = methods[path] or {}
    table.insert(methods[path], method)
    if method == "GET" then table.insert(methods[path], "HEAD") end
  end
  local allow = {}
  for path, list in pairs(methods) do
    if cors then list[#list + 1] = "OPTIONS" end
    table.sort(list)
    allow[path] = table.concat(list, ", ")
  end
  return setmetatable({ allow = allow, templates = templates }, Table)
end

local function percent_decoded(text)
  return (text:gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end))
end

--- The route a path names, and its {part} (see the header).
function Table:find(path)
  if self.allow[path] then return path end
  for _, t in ipairs(self.templates) do
    local part = path:match(t.pattern)
    if part then return t.path, percent_decoded(part) end
  end
end

return serve_routes
