--- gptoss.util: small helpers the Lua modules share.
local util = {}

--- The class name of a gptoss object ("gptoss.model", "gptoss.replica", "gptoss.tensor",
-- ...: the __name of its metatable), else the Lua type of v. For checks and messages:
-- util.kind(v) == "gptoss.replica".
function util.kind(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return type(mt) == "table" and type(mt.__name) == "string" and mt.__name or type(v)
end

--- True when v is a gptoss object of that class: util.is_a(r, "gptoss.replica").
function util.is_a(v, name) return util.kind(v) == name end

--- True when name is one of the values of list.
function util.listed(list, name)
  for _, v in ipairs(list) do
    if v == name then return true end
  end
  return false
end

--- Raises "<fn>: unknown <what> '<key>' (known: <known, in order>)" at `level` (as for
-- error, counted from the caller) for the first key of t that is not in the list known.
function util.check_known(fn, t, known, what, level)
  for k in pairs(t) do
    if not util.listed(known, k) then
      error(("%s: unknown %s '%s' (known: %s)"):format(fn, what, tostring(k), table.concat(known, ", ")),
        level + 1)
    end
  end
end

--- An optional options table: nil gives {}, anything but a table is an error
-- naming fn, and with known every key must be listed there (check_known).
function util.options(fn, opts, known, level)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(("%s: options must be a table (got %s)"):format(fn, type(opts)), level + 1)
  end
  if known then util.check_known(fn, opts, known, "option", level + 1) end
  return opts
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
