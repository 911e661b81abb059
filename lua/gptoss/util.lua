--- gptoss.util: small helpers the Lua modules share.
local util = {}

--- The class name of a gptoss object ("gptoss.model", "gptoss.replica", "gptoss.tensor",
-- ...: the __name of its metatable), else the Lua type of v. For checks and messages:
-- util.kind(v) == "gptoss.replica".
function util.kind(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return type(mt) == "table" and type(mt.__name) == "string" and mt.__name or type(v)
end

--- Appends the values of a (nested) list to out in order, depth first; returns out.
function util.flatten(t, out)
  for i = 1, #t do
    local v = t[i]
    if type(v) == "table" then util.flatten(v, out) else out[#out + 1] = v end
  end
  return out
end

return util
