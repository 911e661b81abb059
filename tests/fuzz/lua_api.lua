-- The driver of the lua_api fuzz target (lua_api.c says what it drives and its cost
-- caps): the calls a program made of the input (lua_api_input.lua) runs on require
-- "gptoss", each with plausible arguments that I.maybe may swap for generated ones.
local gptoss = require "gptoss"
local core = require "gptoss.core"
local I = dofile(FUZZ_DIR .. "lua_api_input.lua")

local CAP, MAX_VALUES = 1 << 20, 4096 -- a model's or replica's bytes; a new tensor's values
local SCRATCH, OUT = FUZZ_SCRATCH, FUZZ_SCRATCH .. "/out"
local TINY = { vocab_size = 97, hidden_dim = 16, n_experts = 8, experts_per_token = 4, intermediate_dim = 12,
  n_layers = 2, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64, sliding_window = 4 }
local MODEL_BIN, CHECKPOINT, TOKENIZER = SCRATCH .. "/tiny.bin", SCRATCH .. "/tiny-hf", SCRATCH .. "/tokenizer.bin"

-- Written once: the tiny model as a course file and as a checkpoint, and a tokenizer.bin of
-- its 97 ids (bytes, some merges, specials at the special score).
do
  local m = gptoss.synthetic(TINY, { seed = 3 })
  m:save(MODEL_BIN)
  m:save(CHECKPOINT, { format = "hf" })
  local entries = {}
  for c in ("\n !',.?0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\xc3\xa9"):gmatch(".") do
    entries[#entries + 1] = { c, #entries }
  end
  for _, s in ipairs { "he", "ll", "llo", "hello", " w", "or", "ld", " world", "\xc3\xa9", "12", "123",
    "<0x00>", "in", "the", " the", "an", "ing", "er" } do
    entries[#entries + 1] = { s, #entries }
  end
  for _, s in ipairs { "<|start|>", "<|end|>", "<|message|>", "<|return|>", "<|channel|>", "<|call|>",
    "<|endoftext|>", "<|constrain|>" } do
    entries[#entries + 1] = { s, -1e30 }
  end
  assert(#entries == TINY.vocab_size)
  local parts = { string.pack("<i4", 16) }
  for i, e in ipairs(entries) do parts[i + 1] = string.pack("<fi4", e[2], #e[1]) .. e[1] end
  local f = assert(io.open(TOKENIZER, "wb"))
  f:write(table.concat(parts))
  f:close()
end

local FIELDS = {}
for k in pairs(gptoss.config("7m")) do FIELDS[#FIELDS + 1] = k end
table.sort(FIELDS) -- picked by index: the same order in every process
local TEXTS = { "hello world", "<|start|>user<|message|>hi<|end|>", " the 12345 \xc3\xa9\xc3", "\0\xff\xfe",
  ("ab"):rep(40), "" }
local TENSORS = { "embedding", "w_qkv", "w_mlp1", "b_mlp2", "attn_sinks", "rms_out_w", "unembedding", "w_router" }
-- the first is the input's own file, set for each input
I.PATHS = { "", MODEL_BIN, CHECKPOINT, TOKENIZER, OUT .. "/t.bin", OUT .. "/m0", SCRATCH, "/nonexistent/x" }

local byte, int, pick, maybe, value, obj, keep = I.byte, I.int, I.pick, I.maybe, I.value, I.obj, I.keep
local action, own, info, remember = I.action, I.own, I.info, I.remember

-- A plausible object of each kind, made when a call wants one and the pool has none, so
-- that a few bytes reach any call.
I.MAKE["gptoss.model"] = function()
  local m = gptoss.synthetic(TINY, { seed = 1 })
  remember(m, { vocab = TINY.vocab_size, bytes = m.bytes })
  return m
end
I.MAKE["gptoss.replica"] = function()
  local m = obj("gptoss.model")
  if info(m).bytes > CAP then m = keep(I.MAKE["gptoss.model"]()) end
  local r = m:replica { slots = 2, ctx = 16, threads = 1 }
  remember(r, { slots = 2, ctx = 16, vocab = info(m).vocab })
  return r
end
I.MAKE["gptoss.step"] = function()
  local r = obj("gptoss.replica")
  return r:step { slots = { 1, 1 }, positions = { r:length(1), r:length(1) + 1 }, tokens = { 5, 7 } }
end
I.MAKE["gptoss.tokenizer"] = function() return gptoss.tokenizer(TOKENIZER, { vocab_size = TINY.vocab_size }) end
I.MAKE["gptoss.decoder"] = function() return obj("gptoss.tokenizer"):decoder() end
I.MAKE["gptoss.sampler"] = function() return gptoss.sampler { seed = 1 } end
I.MAKE["gptoss.tensor"] = function() return I.MAKE["gptoss.step"]():logits()[1] end -- the latest step's
I.MAKE["gptoss.grammar"] = function() return gptoss.grammar.regex("[a-z ]{1,6}") end
I.MAKE["gptoss.matcher"] = function()
  local tok = obj("gptoss.tokenizer")
  return obj("gptoss.grammar"):matcher(tok, { end_ids = { tok.special["end"] } })
end

-- The path a save may write: p where the binding refuses it (no string or number) or
-- cannot write it ("", a missing folder), or where it is in out/; any other (a relative
-- path, the startup files) is out/x: the fuzzer writes nowhere else.
local function out_path(p)
  if type(p) ~= "string" and type(p) ~= "number" or p == "" or p == "/nonexistent/x" then return p end
  p = tostring(p)
  return p:sub(1, #OUT + 1) == OUT .. "/" and not p:find("..", 1, true) and p or OUT .. "/x"
end

local function sample_opts(vocab, with_mode)
  local o, mask = {}, byte()
  if mask & 1 ~= 0 then o.temperature = maybe(pick { 0, 0.8, 1, 1e-46, -1 }) end
  if mask & 2 ~= 0 then o.top_p = maybe(pick { 0.9, 0, 1, 1.5 }) end
  if mask & 4 ~= 0 then o.top_k = maybe(int(0, 5)) end
  if mask & 8 ~= 0 then o.min_p = maybe(pick { 0.05, 0, -0.1 }) end
  if mask & 16 ~= 0 then o.seed = maybe(int(0, 9)) end
  if mask & 32 ~= 0 then o.logit_bias = maybe({ [maybe(int(0, vocab - 1))] = maybe(pick { 1.5, -math.huge, 0 }) }) end
  if mask & 64 ~= 0 then o.logprobs = maybe(int(0, 3)) end
  if with_mode and mask & 128 ~= 0 then o.mode = maybe(pick { "default", "course" }) end
  return o
end

local function ids()
  local list = {}
  for i = 1, int(0, 5) do list[i] = maybe(int(0, 96)) end
  return list
end

-- ---- the calls ----

local function new_model()
  local b, m = byte() % 6, nil
  local c = gptoss.config("7m")
  for k, v in pairs(TINY) do c[k] = v end
  while byte() >= 208 do c[pick(FIELDS)] = value() end
  if b == 0 then m = gptoss.synthetic(maybe(c), maybe({ seed = int(0, 9) }))
  elseif b == 1 then m = core.synthetic(maybe(c), maybe(int(0, 9)))
  elseif b == 2 then m = gptoss.load(maybe(MODEL_BIN))
  elseif b == 3 then m = gptoss.load(maybe(CHECKPOINT))
  elseif b == 4 then m = core.load(maybe(pick(I.PATHS)))
  else m = gptoss.synthetic(maybe(pick { "7m", "20b", "20b-2l", "120b", "x" })) end
  keep(m)
  remember(m, { vocab = m.config.vocab_size, bytes = m.bytes })
end

local REPLICA_OPTIONS = { "device", "slots", "ctx", "weights", "kv", "threads", "rows", "chunk" }
local function new_replica()
  local m = obj("gptoss.model")
  local opts = own(maybe({ device = maybe("cpu"), slots = maybe(int(1, 4)), ctx = maybe(int(1, 24)),
    weights = maybe(pick { "fp32", "bf16", "mxfp4" }), kv = maybe(pick { "fp32", "bf16" }), threads = maybe(1),
    on_progress = byte() >= 192 and action() or nil }))
  -- The replica the options ask for, as the binding will read them (through a trap, its
  -- table): the known options but on_progress, none that is a trap. Where the plan fails,
  -- the same value makes the replica fail before it allocates.
  local plan, seen = {}, I.plain(opts)
  for _, k in ipairs(type(seen) == "table" and REPLICA_OPTIONS or {}) do
    local v = rawget(seen, k)
    if I.plain(v) == v then plan[k] = v end
  end
  local ok, memory = pcall(function() return m:replica_bytes(plan) end)
  local threads = tonumber(plan.threads)
  if ok and memory.total > CAP or threads and threads > 4 then return end
  local r = keep(m:replica(opts))
  remember(r, { slots = r.slots, ctx = r.ctx, vocab = info(m).vocab })
end

-- A ragged batch: rows of one slot from where it stands (or anywhere), some of other
-- slots; tokens, or a step feeding them (tokens = h, or from = h and tokens -j).
local function step()
  local r = obj("gptoss.replica")
  local inf = info(r)
  local s, n = int(1, inf.slots), int(0, 6)
  local ok, length = pcall(function() return r:length(s) end)
  local start = byte() >= 224 and int(0, inf.ctx) or ok and length or 0
  local slots, positions, tokens = {}, {}, {}
  for i = 1, n do
    slots[i] = maybe(byte() >= 232 and int(1, inf.slots) or s)
    positions[i] = maybe(start + i - 1)
    tokens[i] = maybe(int(0, inf.vocab - 1))
  end
  local batch, feed = { slots = maybe(slots), positions = maybe(positions), tokens = maybe(tokens) }, byte() % 4
  if feed == 1 then
    batch.tokens = maybe(obj("gptoss.step"))
  elseif feed == 2 then
    batch.from = maybe(obj("gptoss.step"))
    for i = 1, n do if byte() >= 128 then tokens[i] = -int(1, 4) end end
  end
  local rows = byte() % 5
  if rows == 1 then batch.logits = true
  elseif rows == 2 then batch.logits = maybe({ maybe(int(1, n + 1)) })
  elseif rows == 3 then batch.logits = { n, 1 } end
  local draw = byte() % 4
  if draw == 1 then batch.draw = {}
  elseif draw == 2 then batch.draw = maybe({ maybe(int(1, n + 1)), maybe(int(1, n)) }) end
  if byte() >= 192 then batch.constraint = maybe({ [maybe(int(1, n + 1))] = maybe(obj("gptoss.matcher")) }) end
  local h = keep(r:step(maybe(batch)))
  if byte() >= 128 then h:tokens() end
end

-- h:tokens() and h:logprobs()'s options: none, or partial
local function partial() return byte() >= 128 and maybe({ partial = maybe(true) }) or nil end

local function use_step()
  local h, b = obj("gptoss.step"), byte() % 5
  if b == 0 then h:tokens(partial())
  elseif b == 1 then keep(h:logits())
  elseif b == 2 then h:logprobs(partial())
  elseif b == 3 then return h.rows
  else return tostring(h) end
end

local function sampling()
  local r = obj("gptoss.replica")
  local inf = info(r)
  if byte() < 32 then return r:sampling(maybe(int(1, inf.slots))) end
  if byte() < 64 then return r:check_sampling(maybe(sample_opts(inf.vocab, false))) end
  r:sampling(maybe(int(1, inf.slots)), maybe(sample_opts(inf.vocab, false)))
end

local function use_replica()
  local r, b = obj("gptoss.replica"), byte() % 9
  local inf = info(r)
  if b == 0 then
    r:fork(maybe(int(1, inf.slots)), maybe(int(1, inf.slots)), byte() >= 128 and maybe(int(0, inf.ctx)) or nil)
  elseif b == 1 then r:reset(maybe(int(1, inf.slots)))
  elseif b == 2 then r[pick { "length", "rewind_limit" }](r, maybe(int(1, inf.slots)))
  elseif b == 3 then
    keep(r:trace(maybe(int(1, inf.slots)), maybe(int(0, inf.vocab - 1)), maybe(int(0, inf.ctx - 1))).logits)
  elseif b == 4 then r:profile(maybe(byte() >= 128))
  elseif b == 5 then r:close()
  elseif b == 6 then return r[pick { "device", "slots", "ctx", "weights", "kv", "threads", "memory", "closed" }]
  elseif b == 7 then return tostring(r)
  else keep(r.model) end
end

local function new_tokenizer()
  local path = maybe(TOKENIZER)
  if path == nil then path = TOKENIZER end -- not the full vocabulary: see lua_api.c
  local opts = maybe({ vocab_size = maybe(TINY.vocab_size) })
  keep((byte() % 2 == 0 and gptoss.tokenizer or core.tokenizer)(path, opts))
end

local function use_tokenizer()
  local t, b = obj("gptoss.tokenizer"), byte() % 8
  if b == 0 then
    t:encode(maybe(pick(TEXTS)), byte() >= 128 and maybe({ special = maybe(true), max_tokens = maybe(int(0, 8)),
      mode = maybe(pick { "course", "o200k" }) }) or nil)
  elseif b == 1 then return t:decode(maybe(ids()))
  elseif b == 2 then return t:piece(maybe(int(0, 96)))
  elseif b == 3 then return t:id(maybe(pick(TEXTS)))
  elseif b == 4 then return t:entry(maybe(int(0, 96)))
  elseif b == 5 then keep(t:decoder())
  elseif b == 6 then return t[pick { "special", "vocab_size", "max_token_length" }]
  else return tostring(t) end
end

local function use_decoder()
  local d, b = obj("gptoss.decoder"), byte() % 4
  if b == 0 then return d:add(maybe(byte() >= 128 and int(0, 96) or ids()))
  elseif b == 1 then return d:flush()
  elseif b == 2 then return d.pending
  else return tostring(d) end
end

local function new_sampler()
  local opts = maybe(sample_opts(97, true))
  keep((byte() % 2 == 0 and gptoss.sampler or core.sampler)(opts))
end

local function sample()
  local s, b, row = obj("gptoss.sampler"), byte() % 3, nil
  if b == 0 then row = obj("gptoss.tensor")
  elseif b == 1 then
    row = {}
    for i = 1, int(0, 8) do row[i] = maybe(int(-3, 3) / 2) end
  else row = value() end
  local where, at_position = byte() % 3, nil
  if where == 1 then at_position = maybe(int(0, 9))
  elseif where == 2 then
    at_position = maybe({ position = maybe(int(0, 9)), logprobs = maybe(int(0, 3)),
      logit_bias = maybe({ [int(0, 8)] = maybe(-math.huge) }) })
  end
  return s:sample(maybe(row), at_position)
end

local function nested()
  local rows = {}
  for i = 1, int(1, 3) do
    rows[i] = {}
    for j = 1, int(1, 3) do rows[i][j] = maybe(int(-2, 2)) end
  end
  return maybe(rows)
end

local function new_tensor()
  local b, shape = byte() % 4, {}
  for i = 1, int(1, 3) do shape[i] = maybe(int(1, 4)) end
  shape = own(maybe(shape))
  local dtype = maybe(pick { "f32", "i32" })
  if b == 0 and I.values_in(shape) <= MAX_VALUES then keep(gptoss.tensor.zeros(shape, dtype))
  elseif b == 1 then keep(gptoss.tensor.from(nested(), dtype))
  elseif b == 2 then keep(gptoss.tensor.load(maybe(pick(I.PATHS)), dtype, byte() >= 128 and shape or nil))
  elseif b == 3 and I.values_in(shape) <= MAX_VALUES then
    local flat = {}
    for i = 1, int(0, 8) do flat[i] = maybe(int(-2, 2)) end
    keep(core.tensor(dtype, shape, maybe(flat)))
  end
end

local function use_tensor()
  local t, b = obj("gptoss.tensor"), byte() % 10
  if b == 0 then keep(t[maybe(int(1, 3))])
  elseif b == 1 then t[maybe(int(1, 3))] = maybe(pick { 1.5, -1, 0 / 0, 1e300 })
  elseif b == 2 then return #t
  elseif b == 3 then return t:argmax()
  elseif b == 4 then return t:max_abs_diff(maybe(obj("gptoss.tensor")))
  elseif b == 5 then return t:allclose(maybe(obj("gptoss.tensor")), maybe(1e-5), maybe(1e-5))
  elseif b == 6 then return t:totable()
  -- the pool may give another kind: a model saves too, so only a small one (an 11 GB one
  -- filled the scratch folder for half a minute)
  elseif b == 7 and (I.kind(t) ~= "gptoss.model" or info(t).bytes <= CAP) then t:save(out_path(maybe(OUT .. "/t.bin")))
  elseif b == 8 then return t[pick { "shape", "dtype", "ndim", "numel" }]
  else return tostring(t) end
end

local function use_model()
  local m, b = obj("gptoss.model"), byte() % 8
  local small = info(m).bytes <= CAP
  if b == 0 and small then
    keep(m:tensor(maybe(pick(TENSORS)), byte() >= 128 and maybe(int(1, 2)) or nil,
      byte() >= 192 and maybe(int(1, 8)) or nil))
  elseif b == 1 and small then
    m:save(out_path(maybe(OUT .. "/m" .. int(0, 3))), byte() >= 128
      and maybe({ format = maybe(pick { "course", "hf", "original" }), shard_bytes = maybe(pick { 4096, 1 }) }) or nil)
  elseif b == 2 and small then return m:experts_mxfp4()
  elseif b == 3 then
    local field = pick { "config", "bytes", "trailing_bytes", "path", "format", "seed", "synthetic", "tensors",
      "windowed" }
    if small or field ~= "windowed" then return m[field] end
  elseif b == 4 then
    return m:replica_bytes(maybe({ device = maybe(pick { "cpu", 0, 1 }), slots = maybe(int(1, 64)),
      ctx = maybe(int(1, 64) * 64), rows = maybe(256), chunk = maybe(128) }))
  elseif b == 5 then return m:gpu_tensor(maybe(1), maybe("embedding"))
  else return tostring(m) end
end

local MODULE = { gptoss.bf16_round, gptoss.isatty, gptoss.device_memory, gptoss.copy_bandwidth, gptoss.config,
  core.named_config, gptoss.devices, gptoss.default_devices, gptoss.weight_formats, gptoss.weight_format_names,
  gptoss.trace_stages, gptoss.sample_options, gptoss.clock, gptoss.realtime_ms, gptoss.tokenizer_path }
local function module_fn() return pick(MODULE)(value(), value()) end

-- Grammars of each reader, good and bad, and a matcher's methods (docs/structured.md).
local GRAMMARS = {
  function() return gptoss.grammar.regex(maybe(pick { "[a-z ]{1,6}", "(he|llo)+!?", "a{2,", "" })) end,
  function()
    local schemas = { { type = "integer", maximum = 99 }, '{"type":"string","maxLength":3}',
      { type = "object", properties = { a = { type = "boolean" } } }, "{" }
    return gptoss.grammar.json_schema(maybe(pick(schemas)), maybe({ whitespace = maybe(int(0, 2)) }))
  end,
  function() return gptoss.grammar.ebnf(maybe(pick { 'root ::= "a" [0-9]* item\nitem ::= "x"?', "root ::= root" })) end,
}
local function new_grammar() keep(pick(GRAMMARS)()) end

local function use_matcher()
  local b = byte() % 8
  if b == 0 then
    local opts = maybe({ end_ids = maybe({ maybe(int(0, 96)) }) })
    return keep(obj("gptoss.grammar"):matcher(obj("gptoss.tokenizer"), opts))
  end
  local m = obj("gptoss.matcher")
  if b == 1 then return m:accept(maybe(int(0, 96)))
  elseif b == 2 then return m:allows(maybe(int(0, 96)))
  elseif b == 3 then return #m:allowed()
  elseif b == 4 then return m:mask()
  elseif b == 5 then return keep(m:fork())
  elseif b == 6 then return m:rollback(maybe(int(0, 2)))
  else return m:forced() end
end

-- A sender's surface (docs/api.md#sockets-written-from-a-thread) without a socket: a
-- generated descriptor could be the harness's own, which its bytes would then reach, so
-- attach is only given one that is never open (tests/sender_spec.lua sends to sockets).
I.MAKE["gptoss.sender"] = function() return gptoss.sender { timeout = 0.5, max_queued = 4096 } end
local function use_sender()
  local b = byte() % 6
  if b == 0 then
    return keep(gptoss.sender(maybe({ timeout = maybe(0.5), max_queued = maybe(int(1, 4096)) })))
  end
  local s = obj("gptoss.sender")
  if b == 1 then return s:attach(-1)
  elseif b == 2 then return s:send(maybe(int(1, 3)), maybe("chunk"), maybe("\r\n"))
  elseif b == 3 then return s:pending(maybe(int(1, 3)))
  elseif b == 4 then return s:detach(maybe(int(1, 3)))
  else
    s:flush()
    return s.bytes, s.closed
  end
end

-- A method of one object's class called on any pool object (none whose cost grows with
-- a model's size: their caps could not hold).
local METHODS = { "step", "trace", "reset", "length", "close", "sampling", "check_sampling", "fork", "tokens",
  "logits", "logprobs", "encode", "decode", "piece", "decoder", "add", "flush", "sample", "argmax", "totable",
  "matcher", "accept", "mask", "fork" }
local function cross()
  local f = I.any()[pick(METHODS)]
  return f(I.any(), value(), value())
end

-- A finaliser (or __close) run by hand where the metatable is reachable.
local KINDS = { "gptoss.model", "gptoss.replica", "gptoss.step", "gptoss.tokenizer", "gptoss.decoder",
  "gptoss.sampler", "gptoss.tensor", "gptoss.grammar", "gptoss.matcher", "gptoss.sender" }
local function finalize()
  local x = obj(pick(KINDS))
  local mt = getmetatable(x)
  local f = type(mt) == "table" and (byte() % 2 == 0 and mt.__gc or mt.__close)
  if f then f(x) end
end

-- An object as a to-be-closed variable while a call runs.
local function scope()
  local x = I.any()
  local closing <close> = x
  I.act()
end

-- Garbage whose finalisers act whenever a collection step (inside any call) reaches them.
local function bombs() for _ = 1, int(1, 4) do setmetatable({}, { __gc = action() }) end end

-- Generational mode collects (and finalises) at whatever allocation a minor collection
-- falls on, in one go: inside a C function between two of its steps, say.
local function gc_mode()
  if byte() % 2 == 0 then collectgarbage("generational", int(1, 40), int(1, 100))
  else collectgarbage("incremental", int(1, 100), int(100, 400), int(1, 13)) end
end

local function compare()
  local a, b = value(), value()
  return a == b, pcall(function() return a < b end)
end

local function mutate()
  local t = I.any()
  if type(t) == "table" then t[value()] = value() end
end

-- step twice: the call that most of a replica's state hangs on
I.OPS = { new_model, new_replica, step, step, use_step, sampling, use_replica, new_tokenizer, use_tokenizer,
  use_decoder, new_sampler, sample, new_tensor, use_tensor, use_model, module_fn, cross, finalize, new_grammar,
  use_matcher, use_sender,
  function() collectgarbage(byte() % 2 == 0 and "collect" or "step") end,
  I.drop, I.bury, I.exhume, scope, bombs, gc_mode, compare, mutate, function() keep(value()) end, I.raise }

I.HAZARDS = { finalize, step, function() obj("gptoss.replica"):close() end, function() collectgarbage() end,
  I.exhume, mutate, use_replica, I.raise }

return function(path, input)
  fuzz_scratch_clear()
  I.PATHS[1] = path -- the input's own bytes, as a file of any kind
  I.run(input)
end
