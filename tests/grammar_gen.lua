-- What the grammar specs share: a seeded generator, random JSON schemas and regexes with
-- bounded instances, random walks through a matcher (each token drawn uniformly among the
-- allowed ones, the mask checked against the matcher's direct answer on the way), and the
-- independent checks: ajv through node (one batch per spec) and PCRE2.
local json = require "dkjson"
local H = require "helpers"

local G = {}

--- A generator of integers 1..n from a seed (xorshift32): the same on every machine.
function G.rng(seed)
  local x = (seed * 2654435761 + 1) & 0xffffffff
  if x == 0 then x = 1 end
  return function(n)
    x = x ~ ((x << 13) & 0xffffffff)
    x = x ~ (x >> 17)
    x = x ~ ((x << 5) & 0xffffffff)
    return x % n + 1
  end
end

local function pick(rng, list) return list[rng(#list)] end

-- Patterns whose strings are bounded, between them: classes, groups, counts, alternation,
-- characters JSON escapes (", \ and controls), non-ASCII, '.', escapes and classes.
G.PATTERNS = {
  "^[a-z]{1,6}$", "^[A-Z][a-z]{0,4}$", "^(red|green|blue)$", "^[0-9]{3}-[0-9]{4}$", "^x[0-9a-f]{2,4}$",
  "^(ab|cd){1,3}$", "^\\d{2}:\\d{2}$", "^[a-z\"\\\\]{1,4}$", "^[\\t\\n ]{1,3}x$", "^é[ü-ÿ]{1,2}$",
  "^.{1,3}$", "^[^a-z]{2}$", "^(?:v|V)\\d\\.\\d$", "^\\w{1,5}$", "^\\S{2,3}$", "^[+-]?[0-9]{1,3}$",
}
G.FORMATS = { "date", "time", "date-time", "uuid", "email" }
local WORDS = { "name", "age", "id", "tags", "kind", "value", "next", "é", "a b", "x\"y", "items", "ok" }

local function integer_schema(rng, t)
  local lo = rng(2001) - 1001
  local s = { type = t }
  local which = rng(4)
  if which ~= 2 then s[rng(2) == 1 and "minimum" or "exclusiveMinimum"] = lo end
  if which ~= 3 then s[rng(2) == 1 and "maximum" or "exclusiveMaximum"] = lo + rng(300) + 1 end
  if which == 4 and t == "number" then s = { type = t, minimum = lo / 8, maximum = lo / 8 + rng(900) / 16 } end
  return s
end

local function string_schema(rng)
  local which = rng(4)
  if which == 1 then
    local max = rng(8)
    return { type = "string", maxLength = max, minLength = rng(max + 1) - 1 }
  elseif which == 2 then
    return { type = "string", pattern = pick(rng, G.PATTERNS) }
  elseif which == 3 then
    local f = pick(rng, G.FORMATS)
    return f == "email" and { type = "string", format = f, maxLength = 16 } or { type = "string", format = f }
  end
  return { type = "string", enum = { "a", "b c", "\"q\"", "ü", "" } }
end

local schema

local function object_schema(rng, depth)
  local props, required, used = {}, {}, {}
  for _ = 1, rng(5) do
    local name = pick(rng, WORDS)
    if not used[name] then
      used[name] = true
      props[name] = schema(rng, depth + 1)
      if rng(3) > 1 then required[#required + 1] = name end
    end
  end
  local s = { type = "object", properties = props, additionalProperties = false }
  if #required > 0 then s.required = required end
  return s
end

--- A random schema (a Lua table) whose instances are bounded: every string has a bounded
-- length, every number bounds or the grammar's digit caps, arrays at most 3 items.
function schema(rng, depth)
  local k = depth >= 3 and rng(7) or rng(13)
  if k == 1 or k == 2 then return string_schema(rng) end
  if k == 3 then return integer_schema(rng, "integer") end
  if k == 4 then return integer_schema(rng, "number") end
  if k == 5 then return { type = pick(rng, { "boolean", "null" }) } end
  if k == 6 then return { enum = { 1, "two", 3.5, true, json.null, { a = 1 } } } end
  if k == 7 then return { const = pick(rng, { "fixed", 42, false }) } end
  if k == 8 or k == 9 then return object_schema(rng, depth) end
  if k == 10 then
    local max = rng(3)
    return { type = "array", items = schema(rng, depth + 1), maxItems = max, minItems = rng(max + 1) - 1 }
  end
  if k == 11 then return { anyOf = { schema(rng, depth + 1), schema(rng, depth + 1) } } end
  if k == 12 then return { type = { "string", "null" }, maxLength = rng(6) } end
  return { type = "integer" } -- unbounded: the grammar's 20-digit cap bounds it
end
G.schema = schema

--- A recursive schema: a linked list or a tree through $defs and $ref, ended by null.
function G.recursive_schema(rng)
  if rng(2) == 1 then
    return { ["$defs"] = { node = { type = "object", additionalProperties = false, required = { "value", "next" },
      properties = { value = { type = "integer", minimum = 0, maximum = 9 },
        next = { anyOf = { { type = "null" }, { ["$ref"] = "#/$defs/node" } } } } } },
      ["$ref"] = "#/$defs/node" }
  end
  return { type = "object", additionalProperties = false, required = { "label" },
    properties = { label = { type = "string", maxLength = 3 },
      children = { type = "array", maxItems = 2, items = { ["$ref"] = "#" } } } }
end

--- A random regex of bounded strings, in the PCRE2 subset: literals, classes, groups,
-- alternation and counted repetition.
function G.regex(rng, depth)
  depth = depth or 0
  local k = depth >= 3 and rng(4) or rng(8)
  if k == 1 then return pick(rng, { "a", "b", "xyz", "\\.", "é", "\\d", "\\w", "[a-c]", "[^a-z\\n]", "." }) end
  if k == 2 then return ("[%s]"):format(pick(rng, { "a-f0-9", "xyz_", "\\-+*", "α-ω" })) end
  if k == 3 then return pick(rng, { "foo", "bar", "0", "\\x41", "\\x{e9}" }) end
  if k == 4 then return "(?:" .. G.regex(rng, depth + 1) .. ")?" end
  if k == 5 then return G.regex(rng, depth + 1) .. G.regex(rng, depth + 1) end
  if k == 6 then return "(" .. G.regex(rng, depth + 1) .. "|" .. G.regex(rng, depth + 1) .. ")" end
  local min = rng(3) - 1
  return "(?:" .. G.regex(rng, depth + 1) .. ("){%d,%d}"):format(min, min + rng(3) - 1)
end

--- JSON text of a value, object keys sorted (so that a schema's properties come in one
-- order on every run); json.null is null, a table with 1..n an array.
function G.json(v)
  if v == json.null or type(v) ~= "table" then return json.encode(v) end
  local parts = {}
  if #v > 0 then
    for i, x in ipairs(v) do parts[i] = G.json(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do parts[i] = json.encode(k) .. ":" .. G.json(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- A random walk through matcher m: each token drawn uniformly among the allowed ones, and
-- at each step `probes` random ids and the drawn one checked: m:allows must agree with the
-- mask, and accept must take what it allows. Returns the text and whether an end token
-- came within max tokens.
function G.walk(m, tok, rng, max, probes)
  local parts = {}
  for _ = 1, max do
    local set = m:allowed()
    assert(#set > 0, "nothing is allowed before the end: " .. table.concat(parts))
    for _ = 1, probes do
      local id = rng(m.vocab_size) - 1
      assert(set:has(id) == m:allows(id), ("the mask and allows disagree on %d after %q"):format(id, table.concat(parts)))
    end
    local id = set:nth(rng(#set))
    local ok, why = m:accept(id)
    assert(ok, why)
    if m.ended then return table.concat(parts), true end
    parts[#parts + 1] = tok:decode(id)
  end
  return table.concat(parts), false
end

--- Why ajv cannot check here (node or the installed package missing), or nil.
function G.why_no_ajv()
  local root = H.TREE.root
  if not root then return "gptoss was not loaded from a source tree" end
  if not os.execute("command -v node >/dev/null 2>&1") then return "node is not installed" end
  local f = io.open(root .. "tests/schema-check/node_modules/ajv/package.json")
  if not f then return "ajv is not installed (npm ci in tests/schema-check)" end
  f:close()
  return nil
end

--- ajv's verdicts on cases {{schema =, outputs = {...}}, ...}: for each case, for each
-- output, true or why it is invalid. One node process for the whole batch.
function G.ajv(cases)
  local input = H.tmp()
  H.write_file(input, json.encode(cases))
  local preload = H.SANITIZED and "env -u LD_PRELOAD " or ""
  local p = assert(io.popen(("%snode %stests/schema-check/validate.mjs %s 2>&1"):format(preload, H.TREE.root,
    H.shell_quote(input))))
  local out = p:read("a")
  p:close()
  local verdicts = json.decode(out)
  assert(type(verdicts) == "table", "validate.mjs: " .. out)
  return verdicts
end

return G
