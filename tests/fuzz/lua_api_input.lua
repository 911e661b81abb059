-- What the lua_api fuzz target (lua_api.c, whose comment says what it drives and its cost
-- caps) makes of its input: bytes read one at a time, the values generated from them
-- (constants, pool objects, tables, traps, actions), the pool of objects the program calls
-- on, and the program itself: calls run one after another, and from inside metamethods and
-- finalisers. An input that runs out reads zeros, and a zero always means the plausible
-- choice (or the end of a loop), so a short input is a short plausible program.
-- tests/fuzz/lua_api.lua fills in the calls (I.OPS, I.HAZARDS), how to make an object a
-- call wants (I.MAKE) and the paths values may be (I.PATHS).
local I = { MAX_OPS = 48, MAX_DEPTH = 3, POOL = 8, OPS = {}, HAZARDS = {}, MAKE = {}, PATHS = {} }

local CONSTS = table.pack(nil, false, true, 0, 1, 2, 3, -1, 7, 64, 96, 97, 255, 1024, 0x7fffffff,
  0x80000000, -0x80000000, -0x80000001, math.maxinteger, math.mininteger, 0.5, -0.0, 2.5, 1e300, -1e300,
  1 / 0, -1 / 0, 0 / 0, 2 ^ 53, "", "1", "-1", "0x10", "1e3", " 2 ", "nan", "cpu", "fp32", "bf16", "mxfp4",
  "course", "default", "o200k", "hf", "original", "f32", "i32", "w_mlp1", "embedding", "7m",
  "<|start|>", ("x"):rep(300), "\0\xff")
-- the option and config names of the API, for records of them
local KEYS = { "slots", "positions", "tokens", "from", "logits", "device", "ctx", "weights", "kv", "threads",
  "rows", "chunk", "on_progress", "mode", "temperature", "top_k", "top_p", "min_p", "seed", "logit_bias",
  "logprobs", "position", "special", "max_tokens", "vocab_size", "format", "shard_bytes", "n_layers", 1, 2 }

-- per input (I.start resets them)
local data, at, ops, depth, vdepth, cursor = "", 0, I.MAX_OPS, 0, 0, 1
local pool, info, trapped, graves, early = {}, {}, {}, {}, nil
-- info and trapped must not keep their keys alive: a dropped object is garbage
local WEAK_KEYS = { __mode = "k" }

function I.byte()
  at = at + 1
  return data:byte(at) or 0
end
local byte = I.byte
function I.int(lo, hi) return lo + byte() % (hi - lo + 1) end
local int = I.int
function I.pick(list) return list[byte() % (list.n or #list) + 1] end
local pick = I.pick
-- a pool slot's object (any kind, or nil)
function I.any() return pool[byte() % I.POOL + 1] end
function I.drop() pool[byte() % I.POOL + 1] = nil end

-- The class of a gptoss object ("gptoss.replica", ...), else the value's type.
function I.kind(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__name") or type(v)
end

function I.keep(v)
  if v ~= nil then
    pool[cursor] = v
    cursor = cursor % I.POOL + 1
  end
  return v
end

-- What the driver knows of a model (vocab, bytes) or a replica (slots, ctx, vocab) it
-- made; defaults for anything else, a model's size unknown (so too large to use whole).
local NO_INFO = { slots = 1, ctx = 8, vocab = 97, bytes = math.huge }
function I.remember(v, known) info[v] = setmetatable(known, { __index = NO_INFO }) end
function I.info(v) return info[v] or NO_INFO end

-- An object of the pool: mostly of the kind asked for, the latest one first (a new one,
-- I.MAKE's, where there is none); else any.
function I.obj(want)
  local b, same = byte(), {}
  for k = 1, I.POOL do
    local v = pool[(cursor - k - 1) % I.POOL + 1]
    if I.kind(v) == want then same[#same + 1] = v end
  end
  if b >= 224 then return pool[b % I.POOL + 1] end
  if #same == 0 then return I.keep(I.MAKE[want]()) end
  return same[b < 128 and 1 or b % #same + 1]
end

-- A call that raises (out of a metamethod, say), with a string or a trap.
function I.raise() error(byte() < 128 and "raised by the program" or I.trap({}), 0) end

-- One call of the program, protected; I.raise's error goes on. Called from inside another
-- call (hazard), it is one of I.HAZARDS half the time: a call that changes what the
-- binding may hold (a replica closed, a finaliser run, a collection, a step).
function I.act(hazard)
  if ops >= I.MAX_OPS or depth >= I.MAX_DEPTH then return end
  local b = byte()
  local op = hazard and b >= 128 and I.HAZARDS[b % #I.HAZARDS + 1] or I.OPS[b % #I.OPS + 1]
  ops, depth = ops + 1, depth + 1
  local ok, err = pcall(op)
  depth = depth - 1
  if not ok and op == I.raise then error(err, 0) end
end

-- A function that runs one call of the program when called, at most 1 to 3 times.
function I.action()
  local fires = int(1, 3)
  return function()
    if fires > 0 then
      fires = fires - 1
      I.act(true)
    end
  end
end

-- A shallow copy of a table that is no trap, else v: what a cost cap checked stays so
-- while the binding reads it, whatever a finaliser or a trap does to the pool's tables.
function I.own(v)
  if type(v) ~= "table" or trapped[v] then return v end
  local copy = {}
  for k, x in next, v do copy[k] = x end
  return copy
end

-- A table standing for (a copy of) t, or for a value wrapped in one, whose metamethods
-- act; its __len says #t, one more, -1 or 0.5.
function I.trap(t)
  t = type(t) == "table" and I.own(t) or { t }
  local fire, lenmode, proxy = I.action(), byte() % 4, {}
  trapped[proxy] = t
  return setmetatable(proxy, {
    __index = function(_, k) fire() return t[k] end,
    __newindex = function(_, k, v) fire() t[k] = v end,
    __len = function()
      fire()
      if lenmode == 0 then return #t elseif lenmode == 1 then return #t + 1 end
      return lenmode == 2 and -1 or 0.5
    end,
    __pairs = function() fire() return next, t, nil end,
    __tostring = function() fire() return "trap" end,
    __eq = function() fire() return false end,
    __lt = function() fire() return false end,
    __concat = function() fire() return "trap" end,
    __call = function() fire() end,
    __close = function() fire() end,
    __gc = function() fire() end,
  })
end

-- Any value: a constant, a pool object, a list, a record of option names, a trap, an
-- action, a table holding itself, a path, or bytes of the input.
function I.value()
  local b = byte()
  if b < 104 or vdepth >= 3 then return CONSTS[b % CONSTS.n + 1] end
  if b < 144 then return pool[b % I.POOL + 1] end
  vdepth = vdepth + 1
  local v = {}
  if b < 176 then
    for i = 1, int(0, 4) do v[i] = I.value() end
  elseif b < 200 then
    for _ = 1, int(1, 3) do v[pick(KEYS)] = I.value() end
  elseif b < 224 then
    v = I.trap(I.value())
  elseif b < 236 then
    v = I.action()
  elseif b < 244 then
    v[1], v[2] = v, I.value()
  elseif b < 250 then
    v = pick(I.PATHS)
  else
    local n = int(0, 16)
    v, at = data:sub(at + 1, at + n), at + n
  end
  vdepth = vdepth - 1
  return v
end

-- v itself mostly; else any value, or a trap standing for v.
function I.maybe(v)
  local b = byte()
  if b < 184 then return v end
  if b < 224 then return I.value() end
  return I.trap(v)
end

-- The table a trap (of a trap ...) stands for: what the binding will read through it.
function I.plain(v)
  while trapped[v] do v = trapped[v] end
  return v
end

-- A shape's element count as the binding will read it (1 for an element it refuses).
function I.values_in(shape)
  shape = I.plain(shape)
  if type(shape) ~= "table" then return 1 end
  local n = 1
  for i = 1, math.min(rawlen(shape), 8) do
    n = n * math.max(1, math.tointeger(tonumber(I.plain(rawget(shape, i)))) or 1)
  end
  return n
end

-- A table whose finaliser puts it (and what it holds) back in reach, then acts.
local function holder()
  return setmetatable({}, { __gc = function(h)
    graves[#graves + 1] = h
    I.act(true)
  end })
end

-- A pool object moved into the input's first holder (finalised after everything made
-- since, so it sees their finalisers run) or a new one (finalised before them).
function I.bury()
  local i, h = byte() % I.POOL + 1, nil
  h = byte() % 2 == 0 and early or holder()
  if h then h[#h + 1], pool[i] = pool[i], nil end
end

-- The first holder let go and everything collected; what the holders saved is used again.
function I.exhume()
  early = nil
  collectgarbage()
  collectgarbage()
  local saved = graves
  graves = {}
  for _, h in ipairs(saved) do for _, x in ipairs(h) do I.keep(x) end end
end

local DEFAULT_GC = { "incremental", 200, 100, 13 } -- Lua 5.4's

-- Runs the input as a program.
function I.run(input)
  -- what the last input left finalises first, with no program left to run
  ops, pool, early = I.MAX_OPS, {}, nil
  collectgarbage(table.unpack(DEFAULT_GC))
  collectgarbage()
  info, trapped, graves = setmetatable({}, WEAK_KEYS), setmetatable({}, WEAK_KEYS), {}
  data, at, ops, depth, vdepth, cursor = input, 0, 0, 0, 0, 1
  early = holder()
  while at < #data and ops < I.MAX_OPS do pcall(I.act) end
  ops = I.MAX_OPS
  collectgarbage(table.unpack(DEFAULT_GC))
end

return I
