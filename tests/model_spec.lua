-- The course .bin model file (docs/course.md#the-model-file) and synthetic
-- models: header parsing and validation, tensor layout and offsets, save/load round trips,
-- trailing bytes, the synthetic-weight recipe (src/core/synth.h) and model:tensor slicing.
--
-- Every file written here lives under an os.tmpname() path and is removed after each test.
-- No 20b/120b weights are ever materialised: only their layouts and one 20b w_mlp2 slice.

local gptoss = require "gptoss"
local H = require "helpers"
local FIELDS, CONFIG_7M, with = H.CONFIG_FIELDS, H.CONFIG_7M, H.with
local read_file, write_file, expect_error, tmp, cleanup = H.read_file, H.write_file, H.expect_error, H.tmp, H.cleanup

---------------------------------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------------------------------

local HEADER_FMT = "<i4i4i4i4i4i4i4i4i4i4i4ffi4f" -- 11 ints, 2 floats, 1 int, 1 float
local FLOAT_FIELD = { rope_theta = true, rope_scaling_factor = true, swiglu_limit = true }

local CONFIG_20B = {
   vocab_size = 201088, hidden_dim = 2880, n_experts = 32, experts_per_token = 4,
   intermediate_dim = 2880, n_layers = 24, head_dim = 64, n_attn_heads = 64, n_kv_heads = 8,
   seq_len = 2048, initial_context_length = 4096, rope_theta = 150000.0,
   rope_scaling_factor = 32.0, sliding_window = 128, swiglu_limit = 7.0,
}

local CONFIG_120B = with(CONFIG_20B, { n_experts = 128, n_layers = 36 })
local CONFIG_20B_2L = with(CONFIG_20B, { n_layers = 2 })

-- A tiny model whose fields all differ, so that a swap of two header fields cannot go unnoticed.
-- YaRN bounds for head_dim 8: low ~ 1.01, high ~ 2.17, inside (0, 3).
local TINY = {
   vocab_size = 64, hidden_dim = 16, n_experts = 6, experts_per_token = 5, intermediate_dim = 12,
   n_layers = 3, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 96,
   initial_context_length = 4096, rope_theta = 150000.0, rope_scaling_factor = 32.0,
   sliding_window = 7, swiglu_limit = 7.5,
}

local function header(config)
   local values = {}
   for i, name in ipairs(FIELDS) do
      local v = config[name]
      assert(v ~= nil, "header: missing field " .. name)
      values[i] = v
   end
   return string.pack(HEADER_FMT, table.unpack(values))
end

-- Tensor order and shapes of docs/course.md#tensor-order-and-shapes, computed here independently
-- of the C layout.
local function layout(c)
   local V, H, L, E = c.vocab_size, c.hidden_dim, c.n_layers, c.n_experts
   local I, D, Hq, Hkv = c.intermediate_dim, c.head_dim, c.n_attn_heads, c.n_kv_heads
   local Q = D * Hq + 2 * D * Hkv
   local shapes = {
      { "token_embedding_table", { V, H } }, { "out", { V, H } }, { "rms_attn_w", { L, H } },
      { "rms_ffn_w", { L, H } }, { "rms_out_w", { H } }, { "w_qkv", { L, Q, H } },
      { "b_qkv", { L, Q } }, { "w_o", { L, H, Hq * D } }, { "b_o", { L, H } },
      { "attn_sinks", { L, Hq } }, { "w_router", { L, E, H } }, { "b_router", { L, E } },
      { "w_mlp1", { L, E, 2 * I, H } }, { "b_mlp1", { L, E, 2 * I } }, { "w_mlp2", { L, E, H, I } },
      { "b_mlp2", { L, E, H } },
   }
   local out, offset = {}, 60
   for i, s in ipairs(shapes) do
      local n = 1
      for _, d in ipairs(s[2]) do n = n * d end
      out[i] = { name = s[1], shape = s[2], bytes = 4 * n, offset = offset }
      out[s[1]] = out[i]
      offset = offset + 4 * n
   end
   return out, offset
end

local function file_size(path)
   local f = assert(io.open(path, "rb"))
   local n = f:seek("end")
   f:close()
   return n
end

local function read_at(path, offset, n)
   local f = assert(io.open(path, "rb"))
   f:seek("set", offset)
   local s = f:read(n)
   f:close()
   return s
end

-- Compares two files in 1 MiB chunks; returns true or false and the first differing byte offset.
local function same_files(a, b)
   local fa, fb = assert(io.open(a, "rb")), assert(io.open(b, "rb"))
   local pos = 0
   while true do
      local x, y = fa:read(1 << 20), fb:read(1 << 20)
      if x ~= y then
         fa:close(); fb:close()
         if x == nil or y == nil then return false, pos end
         for i = 1, math.max(#x, #y) do
            if x:byte(i) ~= y:byte(i) then return false, pos + i - 1 end
         end
         return false, pos
      end
      if x == nil then break end
      pos = pos + #x
   end
   fa:close(); fb:close()
   return true
end

local tensor_bytes = H.tensor_bytes

local function assert_same_config(got, want)
   for _, name in ipairs(FIELDS) do
      assert.are.equal(want[name], got[name], "config field " .. name)
   end
   for k in pairs(got) do
      assert.is_not_nil(want[k], "unexpected config field " .. tostring(k))
   end
end

-- e2m1 magnitudes (docs/course.md#how-the-checkpoints-were-exported)
local E2M1 = { [0] = true, [0.5] = true, [1] = true, [1.5] = true, [2] = true, [3] = true,
   [4] = true, [6] = true }
local E2M1_MAGS = { 0.5, 1, 1.5, 2, 3, 4, 6 }

local function is_pow2(s)
   if not (s > 0 and s < math.huge) then return false end
   local k = math.floor(math.log(s, 2) + 0.5)
   return 2.0 ^ k == s
end

-- true when every value of vals[first..last] is e2m1 x s for one power of two s
local function block_is_mxfp4(vals, first, last)
   local m = 0
   for i = first, last do
      local a = math.abs(vals[i])
      if a > m then m = a end
   end
   if m == 0 then return true end
   for _, q in ipairs(E2M1_MAGS) do
      local s = m / q
      if is_pow2(s) then
         local ok = true
         for i = first, last do
            if not E2M1[math.abs(vals[i]) / s] then ok = false; break end
         end
         if ok then return true end
      end
   end
   return false
end

-- Checks a row (a Lua array) block by block; returns nil or a description of the first bad block.
local function check_mxfp4_row(row)
   for first = 1, #row, 32 do
      local last = math.min(first + 31, #row)
      if not block_is_mxfp4(row, first, last) then
         return ("block %d..%d is not e2m1 x 2^k"):format(first, last)
      end
   end
end

-- the two low bytes (little-endian) of an f32 are its 16 low mantissa bits
local function is_bf16(v)
   local s = string.pack("<f", v)
   return s:byte(1) == 0 and s:byte(2) == 0
end

local function check_bf16_row(row)
   for i = 1, #row do
      if not is_bf16(row[i]) then return ("value %d = %.9g is not bf16"):format(i, row[i]) end
   end
end

-- The synthetic recipe of src/core/synth.h, in Lua's wrapping 64-bit integers.
local mix64 = H.mix64
local function synth_key(seed, tensor) return mix64(seed ~ ((tensor + 1) * -3335678366873096957)) end -- 0xD1B54A32D192ED03
local function synth_hash(key, index) return mix64(key + (index + 1) * -7046029254386353131) end -- 0x9E3779B97F4A7C15
local function unit(h) return (h >> 40) * 2.0 ^ -23 - 1.0 end
local function umod3(h) return ((h >> 32) + (h & 0xffffffff)) % 3 end -- 2^32 = 1 (mod 3)
local E2M1_CODE = { [0] = 0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6 }

---------------------------------------------------------------------------------------------------
-- Loading a valid file
---------------------------------------------------------------------------------------------------

describe("loading a saved 7m synthetic model", function()
   local path, synth, model

   setup(function()
      path = os.tmpname()
      synth = gptoss.synthetic("7m", { seed = 1 })
      synth:save(path)
      model = gptoss.load(path)
   end)

   teardown(function()
      model, synth = nil, nil
      collectgarbage()
      os.remove(path)
   end)

   after_each(cleanup)

   it("has the course file size and the 7m config", function()
      assert.are.equal(53151948, file_size(path))
      assert.are.equal(53151948, model.bytes)
      assert.are.equal(0, model.trailing_bytes)
      assert_same_config(model.config, CONFIG_7M)
      assert_same_config(synth.config, CONFIG_7M)
      assert.are.equal(path, model.path)
      assert.is_false(model.synthetic)
      assert.is_nil(model.seed)
      assert.is_true(synth.synthetic)
      assert.are.equal(1, synth.seed)
      assert.is_nil(synth.path)
   end)

   it("writes the 60-byte header in course order", function()
      assert.are.equal(header(CONFIG_7M), read_at(path, 0, 60))
   end)

   it("puts every tensor at the offset of docs/course.md's tensor order (7m column)", function()
      local want = {
         token_embedding_table = 60, out = 25739324, rms_attn_w = 51478588, rms_ffn_w = 51478844,
         rms_out_w = 51479100, w_qkv = 51479228, b_qkv = 51511996, w_o = 51513020, b_o = 51529404,
         attn_sinks = 51529660, w_router = 51529676, b_router = 51537868, w_mlp1 = 51538124,
         b_mlp1 = 52586700, w_mlp2 = 52619468, b_mlp2 = 53143756,
      }
      local tensors = model.tensors
      assert.are.equal(16, #tensors)
      local names = {}
      for i, t in ipairs(tensors) do
         names[i] = t.name
         assert.are.equal(want[t.name], t.offset, t.name .. " offset")
         assert.are.equal(t, tensors[t.name])
      end
      assert.are.same({
         "token_embedding_table", "out", "rms_attn_w", "rms_ffn_w", "rms_out_w", "w_qkv", "b_qkv",
         "w_o", "b_o", "attn_sinks", "w_router", "b_router", "w_mlp1", "b_mlp1", "w_mlp2", "b_mlp2",
      }, names)
      local last = tensors[16]
      assert.are.equal(53151948, last.offset + last.bytes)
      assert.are.same({ 2, 32, 128, 32 }, tensors.w_mlp1.shape)
      assert.are.same({ 2, 32, 32, 64 }, tensors.w_mlp2.shape)
      assert.are.same({ 2, 128, 32 }, tensors.w_qkv.shape)
      assert.are.same({ 201088, 32 }, tensors.out.shape)
   end)

   it("stores each tensor's first and last value at its offset in the file", function()
      for _, d in ipairs(model.tensors) do
         local t = synth:tensor(d.name)
         local flat = tensor_bytes(t)
         assert.are.equal(d.bytes, #flat, d.name .. " bytes")
         assert.are.equal(flat:sub(1, 4), read_at(path, d.offset, 4), d.name .. " first value")
         assert.are.equal(flat:sub(-4), read_at(path, d.offset + d.bytes - 4, 4),
            d.name .. " last value")
         t, flat = nil, nil
         collectgarbage()
      end
   end)

   it("describes itself with layers and hidden size", function()
      local s = tostring(model)
      assert.truthy(s:find("2 layers", 1, true), s)
      assert.truthy(s:find("hidden 32", 1, true), s)
      assert.truthy(s:find(path, 1, true), s)
      local t = tostring(synth)
      assert.truthy(t:find("synthetic seed=1", 1, true), t)
      assert.truthy(t:find("32 experts (top 4)", 1, true), t)
   end)

   it("gives every tensor bit-identical to the synthetic model", function()
      for _, d in ipairs(model.tensors) do
         local a, b = synth:tensor(d.name), model:tensor(d.name)
         assert.are.same(d.shape, a.shape)
         assert.are.same(d.shape, b.shape)
         assert.are.equal(0, a:max_abs_diff(b), d.name)
         a, b = nil, nil
         collectgarbage()
      end
   end)

   it("gives bit-identical slices (raw bytes, signed zeros included)", function()
      local cases = {
         { "w_qkv", 2 }, { "w_mlp1", 2, 32 }, { "w_mlp2", 1, 7 }, { "b_mlp2" }, { "b_mlp2", 2, 1 },
         { "rms_out_w" }, { "attn_sinks", 1 }, { "w_router", 2 },
      }
      for _, c in ipairs(cases) do
         local label = table.concat(c, ",")
         local a, b = synth:tensor(table.unpack(c)), model:tensor(table.unpack(c))
         assert.are.same(a.shape, b.shape, label)
         assert.are.equal(tensor_bytes(a), tensor_bytes(b), label)
      end
      -- the embedding row of token 0 is the first H floats after the header
      local emb = synth:tensor("token_embedding_table")
      assert.are.equal(tensor_bytes(emb[1]), read_at(path, 60, 32 * 4))
      assert.are.equal(tensor_bytes(emb[201088]), read_at(path, 60 + 201087 * 32 * 4, 32 * 4))
   end)

   it("cuts slices at the right place of the whole tensor", function()
      local full = model:tensor("w_mlp1")
      assert.are.same({ 2, 32, 128, 32 }, full.shape)
      local slice = model:tensor("w_mlp1", 2, 32)
      assert.are.same({ 128, 32 }, slice.shape)
      assert.are.equal(0, full[2][32]:max_abs_diff(slice))
      assert.is_true(full[2][31]:max_abs_diff(slice) > 0)
      local layer = model:tensor("w_mlp1", 1)
      assert.are.same({ 32, 128, 32 }, layer.shape)
      assert.are.equal(0, full[1]:max_abs_diff(layer))
      local qkv = model:tensor("w_qkv")
      assert.are.equal(0, qkv[2]:max_abs_diff(model:tensor("w_qkv", 2)))
      assert.are.same({ 128, 32 }, model:tensor("w_qkv", 2).shape)
   end)

   it("saves a loaded model byte-identically (save -> load -> save)", function()
      local again = tmp()
      model:save(again)
      assert.are.equal(53151948, file_size(again))
      local same, at = same_files(path, again)
      assert(same, "files differ at byte " .. tostring(at))
   end)
end)

describe("loading hand-built files", function()
   after_each(cleanup)

   it("reads all 15 header fields in course order", function()
      local _, total = layout(TINY)
      local p = tmp()
      write_file(p, header(TINY) .. string.rep("\0", total - 60))
      local m = gptoss.load(p)
      assert_same_config(m.config, TINY)
      assert.are.equal(total, m.bytes)
      assert.are.equal(0, m.trailing_bytes)
      local w = m:tensor("w_mlp2", 3, 6)
      assert.are.same({ 16, 12 }, w.shape)
      for _, row in ipairs(w:totable()) do
         for _, v in ipairs(row) do assert.are.equal(0, v) end
      end
   end)

   it("computes the course layout for a config with odd sizes", function()
      local want = layout(TINY)
      local m = gptoss.synthetic(TINY)
      for i, d in ipairs(m.tensors) do
         assert.are.equal(want[i].name, d.name)
         assert.are.same(want[i].shape, d.shape, d.name)
         assert.are.equal(want[i].bytes, d.bytes, d.name)
         assert.are.equal(want[i].offset, d.offset, d.name)
      end
   end)

   it("reads values at the layout's offsets", function()
      -- tensor k holds the value k everywhere, so each read shows which bytes it came from
      local lay, total = layout(TINY)
      local parts = { header(TINY) }
      for k, d in ipairs(lay) do parts[#parts + 1] = string.pack("<f", k):rep(d.bytes // 4) end
      local p = tmp()
      write_file(p, table.concat(parts))
      local m = gptoss.load(p)
      assert.are.equal(total, m.bytes)
      for k, d in ipairs(lay) do
         local t = m:tensor(d.name)
         local flat = tensor_bytes(t)
         assert.are.equal(string.pack("<f", k):rep(d.bytes // 4), flat, d.name)
      end
   end)

   it("keeps trailing bytes: loads, counts them, and saves them back", function()
      local p = tmp()
      gptoss.synthetic(TINY, { seed = 3 }):save(p)
      local _, total = layout(TINY)
      assert.are.equal(total, file_size(p))
      local tail = {}
      for i = 1, 100 do tail[i] = string.char((i * 37) % 256) end
      tail = table.concat(tail)
      local f = assert(io.open(p, "ab"))
      f:write(tail)
      f:close()
      local m = gptoss.load(p)
      assert.are.equal(100, m.trailing_bytes)
      assert.are.equal(total, m.bytes)
      assert_same_config(m.config, TINY)
      local q = tmp()
      m:save(q)
      assert.are.equal(total + 100, file_size(q))
      assert.are.equal(read_file(p), read_file(q))
      assert.are.equal(tail, read_at(q, total, 100))
      -- and the tensors are unchanged by the tail
      local s = gptoss.synthetic(TINY, { seed = 3 })
      assert.are.equal(0, s:tensor("b_mlp2"):max_abs_diff(m:tensor("b_mlp2")))
   end)

   it("can save a loaded model over its own file", function()
      local p = tmp()
      gptoss.synthetic(TINY, { seed = 4 }):save(p)
      local before = read_file(p)
      local m = gptoss.load(p)
      m:save(p)
      assert.are.equal(before, read_file(p))
      assert.are.equal(0, m:tensor("w_o"):max_abs_diff(gptoss.synthetic(TINY, { seed = 4 }):tensor("w_o")))
   end)

   it("reports a save into a missing directory", function()
      local m = gptoss.synthetic(TINY)
      expect_error(function() m:save("/nonexistent-gptoss-dir/x.bin") end,
         "save:", "cannot write", "/nonexistent-gptoss-dir/x.bin")
   end)
end)

---------------------------------------------------------------------------------------------------
-- Invalid files
---------------------------------------------------------------------------------------------------

describe("loading invalid files", function()
   after_each(cleanup)

   it("rejects a 7m file cut short by one byte, naming both sizes", function()
      local p = tmp()
      gptoss.synthetic("7m", { seed = 1 }):save(p)
      local s = read_file(p)
      write_file(p, s:sub(1, -2))
      s = nil
      expect_error(function() gptoss.load(p) end,
         "truncated: expected 53151948 bytes, file has 53151947", p)
   end)

   it("rejects a header-only file", function()
      local p = tmp()
      local _, total = layout(TINY)
      write_file(p, header(TINY))
      expect_error(function() gptoss.load(p) end,
         ("truncated: expected %d bytes, file has 60"):format(total))
   end)

   it("rejects files shorter than the 60-byte header", function()
      for _, n in ipairs({ 0, 1, 59 }) do
         local p = tmp()
         write_file(p, header(TINY):sub(1, n))
         expect_error(function() gptoss.load(p) end, "truncated",
            ("expected at least 60 bytes (the header), file has %d"):format(n), p)
      end
   end)

   it("rejects garbage headers", function()
      math.randomseed(20240917)
      for _ = 1, 20 do
         local b = {}
         for i = 1, 200 do b[i] = string.char(math.random(0, 255)) end
         local p = tmp()
         write_file(p, table.concat(b))
         local err = expect_error(function() gptoss.load(p) end, "load:", p)
         assert.truthy(err:find("config:", 1, true) or err:find("rope:", 1, true)
            or err:find("truncated", 1, true), err)
      end
   end)

   local function load_header(changes)
      local p = tmp()
      write_file(p, header(with(CONFIG_7M, changes)))
      return function() gptoss.load(p) end, p
   end

   it("names a non-positive size field", function()
      for _, name in ipairs(FIELDS) do
         if not FLOAT_FIELD[name] and name ~= "sliding_window" then
            for _, v in ipairs({ 0, -1 }) do
               local fn, p = load_header({ [name] = v })
               expect_error(fn, ("config: %s = %d must be positive"):format(name, v), p)
            end
         end
      end
      expect_error((load_header({ hidden_dim = 0 })), "config: hidden_dim = 0 must be positive")
   end)

   it("rejects n_attn_heads that is not a multiple of n_kv_heads", function()
      expect_error((load_header({ n_attn_heads = 3, n_kv_heads = 2 })),
         "config: n_attn_heads = 3 is not a multiple of n_kv_heads = 2")
   end)

   it("says which header fields make a file too short: a layer count of 10^8, at once", function()
      local fn, p = load_header({ n_layers = 100000000 })
      local t = gptoss.clock()
      expect_error(fn, "truncated: expected", ("file has 60 (the header's n_layers = 100000000, n_experts = %d")
         :format(CONFIG_7M.n_experts), p)
      assert.is_true(gptoss.clock() - t < 0.5)
   end)

   it("rejects an odd head_dim", function()
      expect_error((load_header({ head_dim = 7 })), "config: head_dim = 7 must be even")
   end)

   it("rejects experts_per_token > n_experts", function()
      expect_error((load_header({ n_experts = 8, experts_per_token = 9 })),
         "config: experts_per_token = 9 exceeds n_experts = 8")
      -- equal is fine as far as validation goes (the file is then just short)
      expect_error((load_header({ n_experts = 8, experts_per_token = 8 })), "truncated")
   end)

   it("rejects a negative sliding window and bad floats", function()
      expect_error((load_header({ sliding_window = -1 })), "config: sliding_window = -1")
      expect_error((load_header({ rope_theta = 1.0 })), "config: rope_theta")
      expect_error((load_header({ rope_theta = 0 / 0 })), "config: rope_theta")
      expect_error((load_header({ rope_scaling_factor = 0.0 })), "config: rope_scaling_factor")
      expect_error((load_header({ rope_scaling_factor = math.huge })), "config: rope_scaling_factor")
      expect_error((load_header({ swiglu_limit = -7.0 })), "config: swiglu_limit")
      expect_error((load_header({ swiglu_limit = 0 / 0 })), "config: swiglu_limit")
   end)

   it("rejects YaRN bounds outside (0, head_dim/2 - 1)", function()
      -- head_dim 4: high ~ 1.09 is not below head_dim/2 - 1 = 1
      expect_error((load_header({ head_dim = 4 })), "rope:", "head_dim=4")
      -- without YaRN (factor 1) the same head_dim is accepted by validation
      expect_error((load_header({ head_dim = 4, rope_scaling_factor = 1.0 })), "truncated")
   end)

   it("rejects a qkv width beyond 2^31-1", function()
      expect_error((load_header({ head_dim = 65536, n_attn_heads = 32768, n_kv_heads = 1 })),
         "exceeds 2^31-1")
      -- a product past 2^63, once signed overflow in the check itself
      expect_error((load_header({ head_dim = 2147483646, n_attn_heads = 2147483647, n_kv_heads = 2147483647 })),
         "config: head_dim*(n_attn_heads+2*n_kv_heads) = 2147483646*(2147483647+2*2147483647)", "exceeds 2^31-1")
   end)

   it("rejects sizes whose byte count overflows 64 bits", function()
      -- each tensor fits in 64 bits, their sum does not: V*H*4 = 2^64 - 2^34 + 4 for the
      -- embedding, and as much again for out
      expect_error((load_header({ vocab_size = 0x7fffffff, hidden_dim = 0x7fffffff })),
         "config: the file size overflows 64 bits at tensor ")
      -- one tensor alone: w_router is L*E*H*4 = ~2^62 * 128 bytes
      expect_error((load_header({ n_layers = 0x7fffffff, n_experts = 0x7fffffff,
         intermediate_dim = 0x3fffffff })), "config: the byte size of tensor w_router overflows 64 bits")
      expect_error(function()
         gptoss.synthetic({ n_layers = 0x7fffffff, n_experts = 0x7fffffff,
            intermediate_dim = 0x3fffffff })
      end, "overflows 64 bits")
      -- sizes that fit but would make per-layer work long (a replica's plan)
      expect_error(function() gptoss.synthetic({ n_layers = (1 << 24) + 1 }) end,
         "synthetic: n_layers = 16777217 is more than a synthetic model's 16777216")
      local t0 = os.clock()
      local m = gptoss.synthetic({ n_layers = 1 << 24 })
      assert.is_true(m:replica_bytes({ device = 0 }).total > 0)
      assert.is_true(os.clock() - t0 < 5, "a plan of 2^24 layers took " .. os.clock() - t0 .. " s")
   end)

   it("never reports a byte count of 2^63 or more as a negative integer", function()
      -- 2^62 (embedding) + 2^62 (out) + small: a total above 2^63 that still fits in 64 bits.
      -- Lua integers are signed: such a model must be rejected or report its true sizes.
      local cfg = {
         vocab_size = 1 << 30, hidden_dim = 1 << 30, n_experts = 1, experts_per_token = 1,
         intermediate_dim = 1, n_layers = 1, head_dim = 2, n_attn_heads = 1, n_kv_heads = 1,
         rope_scaling_factor = 1.0,
      }
      local ok, m = pcall(gptoss.synthetic, cfg)
      if ok then
         -- accepted: then its sizes must read back as the true (positive) byte counts
         assert.is_true(m.bytes > 0, "model.bytes = " .. tostring(m.bytes))
         for _, d in ipairs(m.tensors) do
            assert.is_true(d.offset > 0, d.name .. " offset = " .. tostring(d.offset))
         end
      else
         assert.truthy(tostring(m):find("overflow", 1, true), tostring(m))
      end
   end)

   it("reports a missing file", function()
      local p = tmp()
      os.remove(p)
      expect_error(function() gptoss.load(p) end, ("cannot open model file '%s'"):format(p),
         "No such file")
   end)

   it("reports a path that is neither a file nor a directory", function()
      expect_error(function() gptoss.load("/dev/null") end, "neither a regular file nor a directory",
         "'/dev/null'")
   end)

   it("refuses a named pipe before opening it, within a second", function()
      local fifo = H.fifo()
      H.expect_error_soon(("require('gptoss').load(%q)"):format(fifo), nil,
         ("load: model file '%s' is a named pipe, neither a regular file nor a directory"):format(fifo))
      -- the command lines ask whether MODEL names something before loading it
      H.expect_error_soon(("require('gptoss.naming').open(%q)"):format(fifo), nil,
         ("model file '%s' is a named pipe"):format(fifo))
   end)

   it("reads a directory as a checkpoint, and says so when it holds none", function()
      local dir = H.tmpdir()
      expect_error(function() gptoss.load(dir) end, ("cannot open checkpoint config '%s/config.json'"):format(dir))
   end)

   it("requires a string path", function()
      expect_error(function() gptoss.load(42) end, "load: path must be a string")
      expect_error(function() gptoss.load() end, "load: path must be a string")
   end)
end)

---------------------------------------------------------------------------------------------------
-- Synthetic models
---------------------------------------------------------------------------------------------------

describe("synthetic models", function()
   after_each(cleanup)

   it("are deterministic per seed", function()
      local a = gptoss.synthetic("7m", { seed = 7 })
      local b = gptoss.synthetic("7m", { seed = 7 })
      for _, d in ipairs(a.tensors) do
         local x, y = a:tensor(d.name), b:tensor(d.name)
         assert.are.equal(tensor_bytes(x), tensor_bytes(y), d.name)
         x, y = nil, nil
         collectgarbage()
      end
      -- a saved file is the same whichever object wrote it
      local p, q = tmp(), tmp()
      a:save(p)
      b:save(q)
      assert.is_true((same_files(p, q)))
   end)

   it("differ between seeds in every tensor", function()
      local a = gptoss.synthetic("7m", { seed = 1 })
      local b = gptoss.synthetic("7m", { seed = 2 })
      local z = gptoss.synthetic("7m")
      assert.are.equal(gptoss.DEFAULT_SEED, z.seed) -- the default
      for _, d in ipairs(a.tensors) do
         local x, y = a:tensor(d.name), b:tensor(d.name)
         assert.is_true(x:max_abs_diff(y) > 0, d.name)
         assert.is_true(x:max_abs_diff(z:tensor(d.name)) > 0, d.name)
         x, y = nil, nil
         collectgarbage()
      end
   end)

   it("follow the documented recipe (src/core/synth.h)", function()
      local m = gptoss.synthetic("7m", { seed = 1 })
      -- UNIFORM, embedding (tensor 0, scale 2^0): first row and an element far in
      local key = synth_key(1, 0)
      local emb = m:tensor("token_embedding_table")
      for _, idx in ipairs({ 0, 1, 2, 31, 32, 12345, 201088 * 32 - 1 }) do
         local row, col = idx // 32 + 1, idx % 32 + 1
         assert.are.equal(unit(synth_hash(key, idx)), emb[row][col], "embedding index " .. idx)
      end
      emb = nil
      -- NORM: 1 + small, within [1 - 2^-3, 1 + 2^-3)
      for _, name in ipairs({ "rms_attn_w", "rms_ffn_w", "rms_out_w" }) do
         local t = m:tensor(name)
         local rows = t.ndim == 1 and { t:totable() } or t:totable()
         for _, row in ipairs(rows) do
            for _, v in ipairs(row) do
               assert.is_true(v >= 0.875 and v < 1.125, name .. " = " .. v)
            end
         end
      end
      -- MXFP4, w_mlp1 (tensor 12): e2m1[h & 15] * 2^(scale_exp + d - 1), d shared per block
      -- of 32 inputs. scale_exp is not pinned here: the ratio to the code's value must be the
      -- same power of two for every element with the same d.
      local k1, kb = synth_key(1, 12), synth_key(1, 12 + 64)
      local w = m:tensor("w_mlp1", 1, 1) -- elements 0 .. 128*32-1 of the tensor
      local scale_of_d = {}
      local rows = w:totable()
      for r = 1, #rows do
         for c = 1, 32 do
            local idx = (r - 1) * 32 + (c - 1)
            local code = synth_hash(k1, idx) & 15
            local d = umod3(synth_hash(kb, (r - 1) * 1 + (c - 1) // 32))
            local v, e = rows[r][c], E2M1_CODE[code]
            if e == 0 then
               assert.are.equal(0, v, ("w_mlp1[1][1][%d][%d]"):format(r, c))
               -- the sign of zero follows the code
               assert.are.equal(string.pack("<f", e), string.pack("<f", v))
            else
               local s = v / e
               assert.is_true(is_pow2(s), ("w_mlp1[1][1][%d][%d] = %g, code %d"):format(r, c, v, code))
               scale_of_d[d] = scale_of_d[d] or s
               assert.are.equal(scale_of_d[d], s, ("w_mlp1[1][1][%d][%d] d=%d"):format(r, c, d))
            end
         end
      end
      -- consecutive d differ by a factor 2
      if scale_of_d[0] and scale_of_d[1] then assert.are.equal(2 * scale_of_d[0], scale_of_d[1]) end
      if scale_of_d[1] and scale_of_d[2] then assert.are.equal(2 * scale_of_d[1], scale_of_d[2]) end
   end)

   it("have the named configs of docs/course.md", function()
      assert_same_config(gptoss.config("7m"), CONFIG_7M)
      assert_same_config(gptoss.config("20b"), CONFIG_20B)
      assert_same_config(gptoss.config("120b"), CONFIG_120B)
      assert_same_config(gptoss.config("20b-2l"), CONFIG_20B_2L)
      assert_same_config(gptoss.synthetic("7m").config, CONFIG_7M)
      assert_same_config(gptoss.synthetic("20b").config, CONFIG_20B)
      assert_same_config(gptoss.synthetic("120b").config, CONFIG_120B)
      assert_same_config(gptoss.synthetic("20b-2l").config, CONFIG_20B_2L)
      -- a returned config is a fresh table
      local c = gptoss.config("7m")
      c.n_layers = 99
      assert.are.equal(2, gptoss.config("7m").n_layers)
   end)

   it("have the course's 20b and 120b sizes and offsets without materialising weights", function()
      local want = {
         ["20b"] = { 60, 2316533820, 4633067580, 4633344060, 4633620540, 4633632060, 6049209660,
            6049701180, 7182163260, 7182439740, 7182445884, 7191293244, 7191296316, 58152089916,
            58169784636, 83650181436, total = 83659028796 },
         ["120b"] = { 60, 2316533820, 4633067580, 4633482300, 4633897020, 4633908540, 6757274940,
            6758012220, 8456705340, 8457120060, 8457129276, 8510213436, 8510231868, 314274993468,
            314381161788, 467263542588, total = 467316626748 },
      }
      for name, offsets in pairs(want) do
         local m = gptoss.synthetic(name)
         assert.are.equal(offsets.total, m.bytes, name)
         for i, d in ipairs(m.tensors) do
            assert.are.equal(offsets[i], d.offset, name .. " " .. d.name)
         end
         assert.truthy(tostring(m):find(("%d layers"):format(m.config.n_layers), 1, true))
      end
      assert.are.equal(83659028796, gptoss.synthetic("20b").bytes)
      assert.are.equal(467316626748, gptoss.synthetic("120b").bytes)
      -- 20b-2l: the 20b widths over two layers, by the independent layout
      local _, total = layout(CONFIG_20B_2L)
      assert.are.equal(total, gptoss.synthetic("20b-2l").bytes)
   end)

   it("match the independent layout for every named shape", function()
      for name, cfg in pairs({ ["7m"] = CONFIG_7M, ["20b"] = CONFIG_20B, ["120b"] = CONFIG_120B,
         ["20b-2l"] = CONFIG_20B_2L }) do
         local want, total = layout(cfg)
         local m = gptoss.synthetic(name)
         assert.are.equal(total, m.bytes, name)
         for i, d in ipairs(m.tensors) do
            assert.are.same(want[i].shape, d.shape, name .. " " .. d.name)
            assert.are.equal(want[i].bytes, d.bytes, name .. " " .. d.name)
            assert.are.equal(want[i].offset, d.offset, name .. " " .. d.name)
         end
      end
   end)

   it("fill missing config fields with the 7m values", function()
      local m = gptoss.synthetic({ n_layers = 1, vocab_size = 100 }, { seed = 5 })
      assert_same_config(m.config, with(CONFIG_7M, { n_layers = 1, vocab_size = 100 }))
      assert.are.equal(5, m.seed)
      assert_same_config(gptoss.synthetic({}).config, CONFIG_7M)
      -- same config, same seed: the same weights as the named shape
      local a = gptoss.synthetic({}, { seed = 9 })
      local b = gptoss.synthetic("7m", { seed = 9 })
      assert.are.equal(0, a:tensor("w_mlp2", 2, 3):max_abs_diff(b:tensor("w_mlp2", 2, 3)))
   end)

   it("reject unknown shapes, fields and bad options", function()
      expect_error(function() gptoss.synthetic("13b") end, "unknown model shape '13b'")
      expect_error(function() gptoss.config("7b") end, "unknown model shape '7b'")
      expect_error(function() gptoss.synthetic({ n_layer = 2 }) end,
         "unknown config field 'n_layer'")
      expect_error(function() gptoss.synthetic({ hidden_dim = 2.5 }) end, "hidden_dim",
         "32-bit integer")
      expect_error(function() gptoss.synthetic({ hidden_dim = "x" }) end, "hidden_dim")
      expect_error(function() gptoss.synthetic({ rope_theta = "x" }) end, "rope_theta",
         "must be a number")
      expect_error(function() gptoss.synthetic({ n_layers = 1 << 40 }) end, "n_layers",
         "32-bit integer")
      expect_error(function() gptoss.synthetic({ head_dim = 7 }) end,
         "config: head_dim = 7 must be even")
      expect_error(function() gptoss.synthetic("7m", { seed = 1.5 }) end, "seed must be an integer")
      expect_error(function() gptoss.synthetic("7m", 3) end, "options must be a table")
      expect_error(function() gptoss.synthetic("7m", { sed = 1 }) end, "synthetic: unknown option 'sed' (known: seed)")
      expect_error(function() gptoss.synthetic(42) end, "expected a shape name or a config table")
   end)

   it("raise the core's errors at the caller's line, not inside the module", function()
      local here = debug.getinfo(1, "S").short_src
      for _, case in ipairs {
         { function() gptoss.load("/nonexistent-gptoss.bin") end, "load: cannot open model file" },
         { function() gptoss.synthetic({ head_dim = 7 }) end, "synthetic: config: head_dim = 7 must be even" },
         { function() gptoss.tokenizer("/nonexistent-gptoss-tokenizer.bin") end, "cannot open tokenizer file" },
         { function() gptoss.sampler { temperature = -1 } end, "sampler: temperature" },
         { function() gptoss.tensor.zeros({ 0 }) end, "tensor: shape[1]" },
         { function() gptoss.tensor.from({ 1 }, "f16") end, "tensor" },
         { function() gptoss.tensor.load("/nonexistent-gptoss.f32") end, "tensor.load: cannot open" },
      } do
         local err = expect_error(case[1], case[2])
         assert.are.equal(here, err:match("^(.-):%d+: "), err)
      end
   end)
end)

---------------------------------------------------------------------------------------------------
-- MXFP4 representability and router distinctness
---------------------------------------------------------------------------------------------------

describe("synthetic MoE weights", function()
   after_each(cleanup)

   it("the block checker itself rejects non-MXFP4 blocks", function()
      assert.is_true(block_is_mxfp4({ 6, -0.5, 0, 3 }, 1, 4))
      assert.is_true(block_is_mxfp4({ 0.75, 0.25, -0.125 }, 1, 3)) -- 1.5, 0.5, -0.25 times 2^-1
      assert.is_true(block_is_mxfp4({ 0, 0, -0.0 }, 1, 3))
      assert.is_false(block_is_mxfp4({ 6, 0.25 }, 1, 2))     -- 6 needs s >= 1, 0.25 needs s <= 0.5
      assert.is_false(block_is_mxfp4({ 1.25 }, 1, 1))        -- 5/4 is no e2m1 value
      assert.is_false(block_is_mxfp4({ 1, 5 * 2 ^ -20 }, 1, 2))
      assert.is_true(is_bf16(1.5))
      assert.is_false(is_bf16(1 + 2 ^ -20))
   end)

   it("are e2m1 x 2^k per block of 32 inputs and bf16-exact (7m, all of w_mlp1 and w_mlp2)", function()
      local m = gptoss.synthetic("7m", { seed = 1 })
      for _, name in ipairs({ "w_mlp1", "w_mlp2" }) do
         local t = m:tensor(name)
         local nonzero_blocks, exps = 0, {}
         for l, layer in ipairs(t:totable()) do
            for e, expert in ipairs(layer) do
               for r, row in ipairs(expert) do
                  local where = ("%s[%d][%d][%d]"):format(name, l, e, r)
                  local bad = check_mxfp4_row(row) or check_bf16_row(row)
                  assert(not bad, where .. ": " .. tostring(bad))
                  for c = 1, #row do
                     if row[c] ~= 0 then
                        exps[math.floor(math.log(math.abs(row[c]), 2))] = true
                        nonzero_blocks = nonzero_blocks + 1
                     end
                  end
               end
            end
         end
         assert.is_true(nonzero_blocks > 0, name)
         local n = 0
         for _ in pairs(exps) do n = n + 1 end
         assert.is_true(n >= 3, name .. " uses several exponents") -- not one global scale
      end
   end)

   it("a 7m model loaded from disk keeps them MXFP4 (w_mlp2 layer 2 expert 32)", function()
      local p = tmp()
      gptoss.synthetic("7m", { seed = 1 }):save(p)
      local m = gptoss.load(p)
      for r, row in ipairs(m:tensor("w_mlp2", 2, 32):totable()) do
         local bad = check_mxfp4_row(row) or check_bf16_row(row)
         assert(not bad, ("row %d: %s"):format(r, tostring(bad)))
      end
   end)

   it("are e2m1 x 2^k per block of 32 in a 20b w_mlp2 slice (2880 x 2880)", function()
      local m = gptoss.synthetic("20b", { seed = 1 })
      local t = m:tensor("w_mlp2", 24, 32)
      assert.are.same({ 2880, 2880 }, t.shape)
      -- every 9th row (320 rows, all 90 blocks each) keeps the test fast; include the last row
      local rows = {}
      for r = 1, 2880, 9 do rows[#rows + 1] = r end
      rows[#rows + 1] = 2880
      for _, r in ipairs(rows) do
         local row = t[r]:totable()
         local bad = check_mxfp4_row(row) or check_bf16_row(row)
         assert(not bad, ("row %d: %s"):format(r, tostring(bad)))
      end
      t = nil
      collectgarbage()
   end)

   it("have no exactly equal router weights within a layer (7m, several seeds)", function()
      for _, seed in ipairs({ 0, 1, 2 }) do
         local m = gptoss.synthetic("7m", { seed = seed })
         for l = 1, 2 do
            local seen = {}
            for e, row in ipairs(m:tensor("w_router", l):totable()) do
               for i, v in ipairs(row) do
                  assert(not seen[v], ("seed %d layer %d: w_router[%d][%d] = %.9g repeats %s")
                     :format(seed, l, e, i, v, tostring(seen[v])))
                  seen[v] = ("[%d][%d]"):format(e, i)
               end
            end
         end
      end
   end)

   it("give a strict top-4 for router logits of embedding rows", function()
      local m = gptoss.synthetic("7m", { seed = 1 })
      local emb = m:tensor("token_embedding_table")
      for l = 1, 2 do
         local W, b = m:tensor("w_router", l):totable(), m:tensor("b_router", l):totable()
         for _, tok in ipairs({ 1, 2, 3, 100, 1000, 50000, 201088 }) do
            local x = emb[tok]:totable()
            local logits = {}
            for e = 1, #W do
               local s = b[e]
               for i = 1, #x do s = s + W[e][i] * x[i] end
               logits[e] = s
            end
            table.sort(logits, function(p, q) return p > q end)
            assert.is_true(logits[4] > logits[5], ("layer %d token %d"):format(l, tok))
         end
      end
   end)
end)

---------------------------------------------------------------------------------------------------
-- model:tensor arguments
---------------------------------------------------------------------------------------------------

describe("model:tensor", function()
   local m = gptoss.synthetic("7m", { seed = 1 })

   it("returns f32 host tensors of the slice shapes", function()
      local t = m:tensor("w_mlp1", 2, 32)
      assert.are.equal("f32", t.dtype)
      assert.are.same({ 128, 32 }, t.shape)
      assert.are.same({ 2, 32 }, m:tensor("rms_attn_w").shape)
      assert.are.same({ 32 }, m:tensor("rms_attn_w", 2).shape)
      assert.are.same({ 32 }, m:tensor("b_mlp2", 1, 5).shape)
      assert.are.same({ 32, 32 }, m:tensor("b_mlp2", 2).shape)
      assert.are.same({ 2 }, m:tensor("attn_sinks", 1).shape)
      -- nil arguments are the same as absent ones
      assert.are.same({ 32, 128, 32 }, m:tensor("w_mlp1", 1, nil).shape)
   end)

   it("rejects an unknown tensor name", function()
      expect_error(function() m:tensor("w_mlp3") end, "unknown tensor 'w_mlp3'")
      expect_error(function() m:tensor("embedding") end, "unknown tensor 'embedding'")
   end)

   it("rejects a layer out of range", function()
      expect_error(function() m:tensor("w_qkv", 3) end, "layer 3 is out of range 1..2")
      expect_error(function() m:tensor("w_qkv", 0) end, "layer 0 is out of range 1..2")
      expect_error(function() m:tensor("w_mlp1", -1, 1) end, "layer -1 is out of range 1..2")
      expect_error(function() m:tensor("w_mlp1", 2 ^ 32 + 1) end, "layer 4294967297 is out of range 1..2")
      expect_error(function() m:tensor("w_qkv", 1.5) end, "number has no integer representation")
   end)

   it("rejects an expert out of range", function()
      expect_error(function() m:tensor("w_mlp1", 1, 33) end, "expert 33 is out of range 1..32")
      expect_error(function() m:tensor("b_mlp1", 2, 0) end, "expert 0 is out of range 1..32")
   end)

   it("rejects an expert on a non-expert tensor and a layer on a global tensor", function()
      expect_error(function() m:tensor("w_qkv", 1, 1) end, "w_qkv has no expert dimension")
      expect_error(function() m:tensor("w_router", 1, 1) end, "w_router has no expert dimension")
      expect_error(function() m:tensor("out", 1) end, "out has no layer dimension")
      expect_error(function() m:tensor("rms_out_w", 1) end, "rms_out_w has no layer dimension")
   end)
end)
