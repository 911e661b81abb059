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

--- v as messages show it: a string in single quotes ('hi'), anything else by tostring.
function util.quoted(v)
  return type(v) == "string" and ("'%s'"):format(v) or tostring(v)
end

--- An error message without the "file:line: " position Lua put in front of it. Never
-- raises: an error object whose __tostring fails is named by its type, so that code
-- turning errors into messages (chat's tools) cannot be made to raise by one.
function util.bare(msg)
  local ok, text = pcall(tostring, msg)
  if not ok then text = ("(a %s error object that cannot be shown)"):format(type(msg)) end
  return (text:gsub("^[^:\n]+:%d+: ", ""))
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

-- level counts from contains_itself's caller
local function contains_itself(what, depth, level)
  error(("%s: the nested table contains itself (a table at depth %d is one of its own ancestors)")
    :format(what, depth), level and level + 1)
end

-- Appends the values of list t, at depth, to out, depth first. Without shape a table is
-- walked into and anything else is a value; with shape (see util.flatten_shaped) every
-- table at depth d must hold shape[d] entries and be tables down to depth #shape, whose
-- entries are the values. open holds t's ancestors: a table among them is a cycle, which
-- would never end. Errors name `what` and are raised at level, counted from
-- util.flatten_shaped's caller.
local function walk(t, out, depth, shape, what, level, open)
  if shape and #t ~= shape[depth] then
    error(("%s: ragged nested table: %d values where %d were expected at depth %d")
      :format(what, #t, shape[depth], depth), level + depth)
  end
  open[t] = true
  for i = 1, #t do
    local v = t[i]
    if open[v] then contains_itself(what or "flatten", depth + 1, level and level + depth) end
    if shape and depth < #shape then
      if type(v) ~= "table" then
        error(("%s: expected a table at depth %d, got %s"):format(what, depth + 1, type(v)), level + depth)
      end
      walk(v, out, depth + 1, shape, what, level, open)
    elseif not shape and type(v) == "table" then
      walk(v, out, depth + 1, nil, nil, nil, open)
    else
      out[#out + 1] = v
    end
  end
  open[t] = nil
  return out
end

--- The values of t appended to out (default a fresh list), which is returned: t a host
-- tensor (row-major), a (nested) list (depth first), or a single value.
function util.flatten(t, out)
  if util.is_a(t, "gptoss.tensor") then
    local values = t:totable()
    if t.ndim == 1 and out == nil then return values end
    t = values
  elseif type(t) ~= "table" then
    out = out or {}
    out[#out + 1] = t
    return out
  end
  return walk(t, out or {}, 1, nil, nil, nil, {})
end

--- A nested list of regular shape as one flat list of its values, and that shape (the
-- length at each depth, read down the first entries): what tensor.from builds a tensor
-- of. A ragged table, a value where a table belongs, a table nested deeper than
-- max_depth or one that contains itself is an error "<what>: ...", raised at level
-- (counted from the caller, as for error).
function util.flatten_shaped(values, what, level, max_depth)
  local shape, t, open = {}, values, {}
  repeat
    if open[t] then contains_itself(what, #shape + 1, level + 1) end
    if #shape == max_depth then
      error(("%s: nested deeper than %d tables (the most dimensions a tensor has)"):format(what, max_depth),
        level + 1)
    end
    open[t] = true
    shape[#shape + 1] = #t
    t = t[1]
  until type(t) ~= "table"
  local flat = walk(values, {}, 1, shape, what, level + 1, {})
  return flat, shape
end

return util
