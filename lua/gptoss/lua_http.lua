--- gptoss.lua_http: lua-http's modules (gptoss serve's server, gptoss pull's client), found on
-- Lua 5.4 where Debian installs them.
--
-- Debian 12 packages lua-http for Lua 5.1 to 5.3 only; its code is plain Lua that runs on
-- 5.4 (upstream supports 5.4 since 0.4), so when it is not on 5.4's path the Debian directory
-- of those versions' pure-Lua modules (share/lua/5.1 beside each share/lua/5.4 on the path, a
-- private prefix's too) is searched after the usual ones.
local lua_http = {}

--- The modules named ("http.server", "http.headers", ...), in order; a missing lua-http (or
-- cqueues, luaossl under it) is an error saying which Debian package gives it.
function lua_http.require(...)
  if not package.searchpath("http.request", package.path) then
    local extra = {}
    for entry in package.path:gmatch("[^;]+") do
      if entry:find("/share/lua/5.4/", 1, true) then
        extra[#extra + 1] = (entry:gsub("/share/lua/5%.4/", "/share/lua/5.1/"))
      end
    end
    package.path = package.path .. ";" .. table.concat(extra, ";")
  end
  local modules = { ... }
  for i, name in ipairs(modules) do
    local ok, module = pcall(require, name)
    if not ok then
      local why = module:match("^[^\n]*")
      error(("lua-http is missing or incomplete (%s): apt install lua-http (Debian)"):format(why), 0)
    end
    modules[i] = module
  end
  return table.unpack(modules)
end

return lua_http
