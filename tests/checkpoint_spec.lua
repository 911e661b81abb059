-- Checkpoints as OpenAI ships them (docs/checkpoints.md): the Hugging Face and original
-- layouts written by model:save and read by gptoss.load, round trips bit for bit, the files'
-- layout read back here with a plain reader (helpers.read_safetensors, dkjson), the golden's
-- logits from either form, the experts' MXFP4 check, every refusal of a malformed file or
-- config naming the file and the tensor or field, and the command line on a checkpoint.
--
-- Fixtures are saved from synthetic models into temporary directories removed after each test.

local gptoss = require "gptoss"
local json = require "dkjson"
local H = require "helpers"
local read_file, write_file, expect_error, tmp, tmpdir, cleanup =
  H.read_file, H.write_file, H.expect_error, H.tmp, H.tmpdir, H.cleanup

-- Widths that are not multiples of 32 (MXFP4 rows end in a partial block), 3 layers (windowed,
-- full, windowed), grouped-query attention.
local TINY = {
  vocab_size = 64, hidden_dim = 40, n_experts = 4, experts_per_token = 2, intermediate_dim = 24,
  n_layers = 3, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 96, sliding_window = 7,
}
-- One layer whose w_mlp1 (32 x 130 x 260) passes 2^20 elements, so that a course save's
-- 2^20-element chunks start a read in the middle of an MXFP4 row.
local WIDE = {
  vocab_size = 64, hidden_dim = 260, n_experts = 32, experts_per_token = 4, intermediate_dim = 65,
  n_layers = 1, head_dim = 8, n_attn_heads = 4, n_kv_heads = 2, seq_len = 64,
}

local function tiny(seed) return gptoss.synthetic(TINY, { seed = seed or 5 }) end

-- m saved in a new directory inside a temporary one
local function saved(m, opts)
  local dir = tmpdir() .. "/ckpt"
  m:save(dir, opts)
  return dir
end

local function course_file(m)
  local path = tmp()
  m:save(path)
  return path
end

local bytes_of = H.tensor_bytes

-- every course tensor of a and b the same bytes (signed zeros and NaNs included)
local function assert_same_tensors(a, b)
  for _, d in ipairs(a.tensors) do
    assert.are.equal(bytes_of(a:tensor(d.name)), bytes_of(b:tensor(d.name)), d.name)
  end
end

-- {name = {dtype, shape, bytes, file}} of every tensor of a checkpoint directory's shards
local function checkpoint_tensors(dir)
  local all = {}
  for _, name in ipairs(H.list_dir(dir)) do
    if name:match("%.safetensors$") then
      for _, t in ipairs(H.read_safetensors(dir .. "/" .. name).tensors) do
        assert.is_nil(all[t.name], t.name .. " twice")
        all[t.name] = { dtype = t.dtype, shape = t.shape, bytes = t.bytes, file = name }
      end
    end
  end
  return all
end

local function assert_same_checkpoints(a, b)
  local x, y = checkpoint_tensors(a), checkpoint_tensors(b)
  for name, t in pairs(x) do
    assert.is_not_nil(y[name], name)
    assert.are.same({ t.dtype, t.shape }, { y[name].dtype, y[name].shape }, name)
    assert.are.equal(t.bytes, y[name].bytes, name)
  end
  for name in pairs(y) do assert.is_not_nil(x[name], name) end
end

local function read_json(path) return assert(json.decode(read_file(path))) end
local function write_json(path, v) write_file(path, json.encode(v)) end

-- The tensors of each layout by the spec's names (docs/checkpoints.md#tensor-names), with
-- their shapes computed here from the config: {name, shape, dtype: "dense" or "U8"}.
local function expected_tensors(c, layout)
  local V, Hd, E, I, D = c.vocab_size, c.hidden_dim, c.n_experts, c.intermediate_dim, c.head_dim
  local Hq, Hkv = c.n_attn_heads * D, c.n_kv_heads * D
  local function blocks(n) return (n + 31) // 32 end
  local out = {}
  local function add(name, shape, dtype) out[#out + 1] = { name = name, shape = shape, dtype = dtype or "dense" } end
  if layout == "hf" then
    add("model.embed_tokens.weight", { V, Hd }); add("lm_head.weight", { V, Hd }); add("model.norm.weight", { Hd })
    for l = 0, c.n_layers - 1 do
      local p = ("model.layers.%d."):format(l)
      add(p .. "input_layernorm.weight", { Hd }); add(p .. "post_attention_layernorm.weight", { Hd })
      add(p .. "self_attn.q_proj.weight", { Hq, Hd }); add(p .. "self_attn.q_proj.bias", { Hq })
      add(p .. "self_attn.k_proj.weight", { Hkv, Hd }); add(p .. "self_attn.k_proj.bias", { Hkv })
      add(p .. "self_attn.v_proj.weight", { Hkv, Hd }); add(p .. "self_attn.v_proj.bias", { Hkv })
      add(p .. "self_attn.o_proj.weight", { Hd, Hq }); add(p .. "self_attn.o_proj.bias", { Hd })
      add(p .. "self_attn.sinks", { c.n_attn_heads })
      add(p .. "mlp.router.weight", { E, Hd }); add(p .. "mlp.router.bias", { E })
      add(p .. "mlp.experts.gate_up_proj_blocks", { E, 2 * I, blocks(Hd), 16 }, "U8")
      add(p .. "mlp.experts.gate_up_proj_scales", { E, 2 * I, blocks(Hd) }, "U8")
      add(p .. "mlp.experts.gate_up_proj_bias", { E, 2 * I })
      add(p .. "mlp.experts.down_proj_blocks", { E, Hd, blocks(I), 16 }, "U8")
      add(p .. "mlp.experts.down_proj_scales", { E, Hd, blocks(I) }, "U8")
      add(p .. "mlp.experts.down_proj_bias", { E, Hd })
    end
  else
    add("embedding.weight", { V, Hd }); add("unembedding.weight", { V, Hd }); add("norm.scale", { Hd })
    for l = 0, c.n_layers - 1 do
      local p = ("block.%d."):format(l)
      add(p .. "attn.norm.scale", { Hd }); add(p .. "mlp.norm.scale", { Hd })
      add(p .. "attn.qkv.weight", { Hq + 2 * Hkv, Hd }); add(p .. "attn.qkv.bias", { Hq + 2 * Hkv })
      add(p .. "attn.out.weight", { Hd, Hq }); add(p .. "attn.out.bias", { Hd })
      add(p .. "attn.sinks", { c.n_attn_heads })
      add(p .. "mlp.gate.weight", { E, Hd }); add(p .. "mlp.gate.bias", { E })
      add(p .. "mlp.mlp1_weight.blocks", { E, 2 * I, blocks(Hd), 16 }, "U8")
      add(p .. "mlp.mlp1_weight.scales", { E, 2 * I, blocks(Hd) }, "U8")
      add(p .. "mlp.mlp1_bias", { E, 2 * I })
      add(p .. "mlp.mlp2_weight.blocks", { E, Hd, blocks(I), 16 }, "U8")
      add(p .. "mlp.mlp2_weight.scales", { E, Hd, blocks(I) }, "U8")
      add(p .. "mlp.mlp2_bias", { E, Hd })
    end
  end
  return out
end

-- e2m1 codes 0..15 (docs/checkpoints.md#mxfp4)
local E2M1 = { [0] = 0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6 }

-- Row r (0-based) of n inputs decoded from a blocks and a scales tensor's bytes.
local function decode_row(blocks, scales, r, n)
  local nb = (n + 31) // 32
  local row = {}
  for k = 0, n - 1 do
    local byte = blocks:byte(r * nb * 16 + (k // 32) * 16 + (k % 32) // 2 + 1)
    local code = k % 2 == 0 and byte & 15 or byte >> 4
    row[k + 1] = E2M1[code] * 2.0 ^ (scales:byte(r * nb + k // 32 + 1) - 127)
  end
  return row
end

-- the logits of a CPU replica stepping `tokens` from position 0, as bytes
local function logits_bytes(m, tokens)
  local r <close> = m:replica { slots = 1, ctx = 16 }
  local slots, pos = {}, {}
  for i = 1, #tokens do slots[i], pos[i] = 1, i - 1 end
  return bytes_of(r:step { slots = slots, positions = pos, tokens = tokens }:logits())
end

describe("checkpoints", function()
  after_each(cleanup)

  it("loads a saved Hugging Face checkpoint bit for bit, and says what it is", function()
    local m = tiny()
    local dir = saved(m, { format = "hf" })
    local h = gptoss.load(dir)
    assert.are.equal("hf", h.format)
    assert.are.equal(dir, h.path)
    assert.are.equal("synthetic", m.format)
    assert.truthy(tostring(h):find("hf " .. dir, 1, true), tostring(h))
    assert.are.same(m.config, h.config)
    assert_same_tensors(m, h)
    -- slices of a layer and an expert decode from their pieces alone
    assert.are.equal(bytes_of(m:tensor("w_mlp2", 3, 4)), bytes_of(h:tensor("w_mlp2", 3, 4)))
    assert.are.equal(bytes_of(m:tensor("b_qkv", 2)), bytes_of(h:tensor("b_qkv", 2)))
  end)

  it("loads a saved original/ checkpoint bit for bit", function()
    local m = tiny(9)
    local o = gptoss.load(saved(m, { format = "original" }))
    assert.are.equal("original", o.format)
    assert.are.same(m.config, o.config)
    assert_same_tensors(m, o)
  end)

  it("writes each layout's tensor names, dtypes and shapes", function()
    local m = tiny()
    for _, layout in ipairs { "hf", "original" } do
      local got = checkpoint_tensors(saved(m, { format = layout }))
      local want = expected_tensors(m.config, layout)
      local n = 0
      for _ in pairs(got) do n = n + 1 end
      assert.are.equal(#want, n, layout)
      for _, w in ipairs(want) do
        local t = got[w.name]
        assert.is_not_nil(t, w.name)
        assert.are.same(w.shape, t.shape, w.name)
        if w.dtype == "U8" then
          assert.are.equal("U8", t.dtype, w.name)
        else -- synthetic values sit on a 2^-23 grid: not bf16
          assert.are.equal("F32", t.dtype, w.name)
        end
      end
    end
  end)

  it("stores experts as MXFP4: low nibble first, e8m0 scales, partial last blocks", function()
    local m = tiny()
    local t = checkpoint_tensors(saved(m, { format = "hf" }))
    local c = m.config
    for l = 1, c.n_layers do
      local p = ("model.layers.%d.mlp.experts."):format(l - 1)
      for e = 1, c.n_experts do
        for _, x in ipairs { { "gate_up_proj", "w_mlp1", 2 * c.intermediate_dim, c.hidden_dim },
          { "down_proj", "w_mlp2", c.hidden_dim, c.intermediate_dim } } do
          local want = H.flatten(m:tensor(x[2], l, e))
          local rows, n = x[3], x[4]
          for r = 0, rows - 1 do
            local got = decode_row(t[p .. x[1] .. "_blocks"].bytes, t[p .. x[1] .. "_scales"].bytes,
              (e - 1) * rows + r, n)
            for k = 1, n do assert.are.equal(want[r * n + k], got[k]) end
          end
        end
      end
    end
  end)

  it("concatenates q, k and v into w_qkv and keeps gate/up interleaved as w_mlp1", function()
    local m = tiny()
    local t = checkpoint_tensors(saved(m, { format = "hf" }))
    local qkv = bytes_of(m:tensor("w_qkv", 2))
    local p = "model.layers.1.self_attn."
    assert.are.equal(qkv,
      t[p .. "q_proj.weight"].bytes .. t[p .. "k_proj.weight"].bytes .. t[p .. "v_proj.weight"].bytes)
    assert.are.equal(bytes_of(m:tensor("b_mlp1", 2)), t["model.layers.1.mlp.experts.gate_up_proj_bias"].bytes)
    assert.are.equal(bytes_of(m:tensor("out")), t["lm_head.weight"].bytes)
    assert.are.equal(bytes_of(m:tensor("rms_ffn_w", 3)), t["model.layers.2.post_attention_layernorm.weight"].bytes)
  end)

  it("writes the config a real Hugging Face checkpoint has", function()
    local m = tiny()
    local dir = saved(m, { format = "hf" })
    local c = read_json(dir .. "/config.json")
    assert.are.same({ "GptOssForCausalLM" }, c.architectures)
    assert.are.equal("gpt_oss", c.model_type)
    assert.are.same({ 64, 40, 4, 2, 24, 3, 8, 4, 2, 96, 7, 7.0, 150000.0 },
      { c.vocab_size, c.hidden_size, c.num_local_experts, c.num_experts_per_tok, c.intermediate_size,
        c.num_hidden_layers, c.head_dim, c.num_attention_heads, c.num_key_value_heads,
        c.max_position_embeddings, c.sliding_window, c.swiglu_limit, c.rope_theta })
    assert.are.same({ "sliding_attention", "full_attention", "sliding_attention" }, c.layer_types)
    assert.are.same({ rope_type = "yarn", factor = 32.0, original_max_position_embeddings = 4096,
      beta_fast = 32.0, beta_slow = 1.0, truncate = false }, c.rope_scaling)
    assert.are.equal(1e-5, c.rms_norm_eps)
    assert.are.equal("mxfp4", c.quantization_config.quant_method)
    assert.is_false(c.tie_word_embeddings)
    assert.is_true(c.attention_bias)
    assert.are.equal("bfloat16", c.torch_dtype)
    assert.are.same({ "config.json", "model.safetensors" }, H.list_dir(dir))
  end)

  it("splits shards at shard_bytes, with an index of every tensor", function()
    local m = tiny()
    local dir = saved(m, { format = "hf", shard_bytes = 30000 })
    local files = H.list_dir(dir)
    local index = read_json(dir .. "/model.safetensors.index.json")
    local shards, total = {}, 0
    for _, name in ipairs(files) do
      if name:match("%.safetensors$") then
        shards[#shards + 1] = name
        local data = #H.read_safetensors(dir .. "/" .. name).data
        total = total + data
      end
    end
    assert.is_true(#shards >= 3, table.concat(files, " "))
    assert.are.equal(("model-00001-of-%05d.safetensors"):format(#shards), shards[1])
    assert.are.equal(total, index.metadata.total_size)
    local t, listed = checkpoint_tensors(dir), 0
    for name, file in pairs(index.weight_map) do
      assert.are.equal(t[name].file, file, name)
      listed = listed + 1
    end
    assert.are.equal(#expected_tensors(m.config, "hf"), listed)
    -- a shard passes the cap only when one tensor alone does
    for _, name in ipairs(shards) do
      local st = H.read_safetensors(dir .. "/" .. name)
      assert.is_true(#st.data <= 30000 or #st.tensors == 1, name)
    end
    assert_same_tensors(m, gptoss.load(dir))
  end)

  it("round-trips course -> hf -> course to the same .bin bytes", function()
    for _, m in ipairs { tiny(), gptoss.synthetic("7m", { seed = 3 }), gptoss.synthetic(WIDE, { seed = 2 }) } do
      local bin = course_file(m)
      local dir = saved(gptoss.load(bin), { format = "hf", shard_bytes = 1 << 20 })
      assert.are.equal(read_file(bin), read_file(course_file(gptoss.load(dir))), tostring(m))
    end
  end)

  it("round-trips hf -> course -> hf and original -> hf -> original to the same tensor bytes", function()
    local m = tiny(4)
    local hf = saved(m, { format = "hf" })
    local back = saved(gptoss.load(course_file(gptoss.load(hf))), { format = "hf" })
    assert_same_checkpoints(hf, back)
    -- a checkpoint saved again copies its bytes, across layouts and shardings
    assert_same_checkpoints(hf, saved(gptoss.load(hf), { format = "hf", shard_bytes = 5000 }))
    local orig = saved(m, { format = "original" })
    local via_hf = saved(gptoss.load(orig), { format = "hf" })
    assert_same_checkpoints(orig, saved(gptoss.load(via_hf), { format = "original" }))
  end)

  it("writes dense tensors as BF16 when every value is a bf16, else F32, losslessly", function()
    -- a course file of TINY whose dense tensors are cut to bf16, w_o's first value excepted
    local m = tiny()
    local bin = course_file(m)
    local raw = read_file(bin)
    local pieces, at = { raw:sub(1, 60) }, 61
    for _, d in ipairs(m.tensors) do
      local body = raw:sub(at, at + d.bytes - 1)
      if not d.name:match("^w_mlp") then
        local out = {}
        for i = 1, #body, 4 do
          local keep = d.name == "w_o" and i == 1
          out[#out + 1] = keep and body:sub(i, i + 3) or ("\0\0" .. body:sub(i + 2, i + 3))
        end
        body = table.concat(out)
      end
      pieces[#pieces + 1] = body
      at = at + d.bytes
    end
    write_file(bin, table.concat(pieces))
    local course = gptoss.load(bin)
    local dir = saved(course, { format = "hf" })
    local t = checkpoint_tensors(dir)
    assert.are.equal("BF16", t["model.embed_tokens.weight"].dtype)
    assert.are.equal("BF16", t["model.layers.0.self_attn.q_proj.weight"].dtype)
    assert.are.equal("BF16", t["model.layers.1.self_attn.o_proj.weight"].dtype)
    assert.are.equal("F32", t["model.layers.0.self_attn.o_proj.weight"].dtype) -- the value kept
    assert.are.equal(2 * 64 * 40, #t["lm_head.weight"].bytes)
    local h = gptoss.load(dir)
    assert_same_tensors(course, h)
    assert.are.equal(read_file(bin), read_file(course_file(h)))
  end)

  it("gives the golden bit-identical logits from the hf, original and course forms", function()
    local m = tiny(8)
    local tokens = { 5, 17, 3, 60, 42, 1 }
    local want = logits_bytes(gptoss.load(course_file(m)), tokens)
    assert.are.equal(want, logits_bytes(m, tokens))
    assert.are.equal(want, logits_bytes(gptoss.load(saved(m, { format = "hf" })), tokens))
    assert.are.equal(want, logits_bytes(gptoss.load(saved(m, { format = "original" })), tokens))
  end)

  it("takes seq_len from max_position_embeddings, else initial context x the RoPE factor", function()
    local dir = saved(tiny(), { format = "hf" })
    local c = read_json(dir .. "/config.json")
    c.max_position_embeddings = nil
    write_json(dir .. "/config.json", c)
    assert.are.equal(4096 * 32, gptoss.load(dir).config.seq_len)
    local orig = saved(tiny(), { format = "original" })
    assert.are.equal(96, gptoss.load(orig).config.seq_len)
    c = read_json(orig .. "/config.json")
    c.max_position_embeddings = nil
    c.rope_scaling_factor = 2.5
    write_json(orig .. "/config.json", c)
    assert.are.equal(10240, gptoss.load(orig).config.seq_len)
  end)

  it("checks the model options of save", function()
    local m = tiny()
    local dir = tmpdir()
    expect_error(function() m:save(dir .. "/x", { format = "gguf" }) end,
      "save: format must be one of course, hf, original (got gguf)")
    expect_error(function() m:save(dir .. "/x", { fromat = "hf" }) end, "save: unknown option 'fromat'")
    expect_error(function() m:save(dir .. "/x", { shard_bytes = 10 }) end, "save: shard_bytes is for checkpoints")
    expect_error(function() m:save(dir .. "/x", { format = "hf", shard_bytes = 0 }) end,
      "save: shard_bytes must be a positive integer (got 0)")
    expect_error(function() m:save(dir .. "/x", { format = "hf", shard_bytes = 1.5 }) end,
      "save: shard_bytes must be an integer")
    expect_error(function() m:save(dir .. "/x", "hf") end, "table expected")
    assert.are.same({}, H.list_dir(dir))
  end)

  it("writes the tokenizer it is given beside the weights, as tokenizer.json, with every entry", function()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local m = gptoss.synthetic("7m", { seed = 1 })
    local dir = tmpdir() .. "/saved"
    m:save(dir .. "/", { format = "hf", tokenizer = tok })
    local back = gptoss.tokenizer(dir .. "/")
    assert.are.equal(tok.vocab_size, back.vocab_size)
    for id = 0, tok.vocab_size - 1 do
      local b1, s1 = tok:entry(id)
      local b2, s2 = back:entry(id)
      if b1 ~= b2 or s1 ~= s2 then error(("id %d: saved %q (%g), given %q (%g)"):format(id, b2, s2, b1, s1)) end
    end
    local text = "Hello <|start|>world\0 \xff ünïcödé"
    assert.are.same(tok:encode(text), back:encode(text))
    assert.are.equal(read_file(dir .. "/tokenizer.json"), read_file(saved(m, { format = "original", tokenizer = back })
      .. "/tokenizer.json"))
    local bare = saved(m, { format = "hf" })
    expect_error(function() gptoss.tokenizer(bare .. "/") end, ("'%s/tokenizer.json': No such file"):format(bare))
  end)

  it("refuses a tokenizer it cannot write, before writing anything", function()
    local m = tiny()
    local dir = tmpdir()
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    expect_error(function() m:save(dir .. "/x", { tokenizer = tok }) end,
      'save: tokenizer is for checkpoints (format = "hf" or "original")')
    expect_error(function() m:save(dir .. "/x", { format = "hf", tokenizer = "tokenizer.bin" }) end,
      "save: tokenizer must be a gptoss tokenizer (got string)")
    -- a course tokenizer.bin of these {bytes, score} entries
    local function course_tokenizer(entries)
      local parts = { string.pack("<i4", 8) }
      for _, e in ipairs(entries) do parts[#parts + 1] = string.pack("<fs4", e[2], e[1]) end
      local path = tmp()
      write_file(path, table.concat(parts))
      return gptoss.tokenizer(path, { vocab_size = #entries })
    end
    expect_error(function() m:save(dir .. "/x", { format = "hf", tokenizer = course_tokenizer { { "a", 0 }, { "b", 1 } } })
    end, ("save: cannot write '%s/x': the tokenizer has 2 entries, the model's vocab_size is %d"):format(dir,
      m.config.vocab_size))
    local unranked, twice = {}, {}
    for id = 0, m.config.vocab_size - 1 do
      unranked[id + 1] = { "t" .. id, id == 7 and 0.5 or id }
      twice[id + 1] = { id == 9 and "t3" or "t" .. id, id }
    end
    expect_error(function() m:save(dir .. "/x", { format = "hf", tokenizer = course_tokenizer(unranked) }) end,
      "tokenizer.json keeps a token's rank as its id, but token 7 has score 0.5")
    expect_error(function() m:save(dir .. "/x", { format = "hf", tokenizer = course_tokenizer(twice) }) end,
      "tokenizer.json: tokens 3 and 9 have the same bytes")
    local options = setmetatable({}, { __index = function(_, k)
      if k == "format" then getmetatable(tok).__gc(tok) return "hf" end
      if k == "tokenizer" then return tok end
    end })
    expect_error(function() m:save(dir .. "/x", options) end, "save: tokenizer: used after it was garbage-collected")
    assert.are.same({}, H.list_dir(dir))
  end)

  it("writes a new directory or an empty one, never over another", function()
    local m = tiny()
    local dir = tmpdir()
    write_file(dir .. "/keep", "x")
    expect_error(function() m:save(dir, { format = "hf" }) end,
      ("cannot write checkpoint '%s': it exists"):format(dir))
    assert.are.same({ "keep" }, H.list_dir(dir))
    local empty = tmpdir()
    m:save(empty .. "/", { format = "original" })
    assert_same_tensors(m, gptoss.load(empty))
    local parent, base = empty:match("^(.*)/([^/]*)$")
    for _, name in ipairs(H.list_dir(parent)) do
      assert.is_nil(name:find(base .. ".tmp-", 1, true), name) -- the temporary directory is gone
    end
    expect_error(function() m:save(tmpdir() .. "/no/such/dir", { format = "hf" }) end, "No such file or directory")
  end)
end)

describe("the experts' MXFP4 check", function()
  after_each(cleanup)

  -- a course file of m with one w_mlp1 value (0-based element i) replaced by the float v,
  -- or with a whole block (32 values from i) replaced by zeros and v first
  local function patched(m, i, v, whole_block)
    local bin = course_file(m)
    local raw = read_file(bin)
    local at = m.tensors.w_mlp1.offset + 4 * i
    local new = string.pack("<f", v) .. (whole_block and ("\0"):rep(4 * 31) or "")
    write_file(bin, raw:sub(1, at) .. new .. raw:sub(at + #new + 1))
    return gptoss.load(bin)
  end

  it("passes synthetic models, their course files and their checkpoints", function()
    local m = tiny()
    assert.is_true(m:experts_mxfp4())
    assert.is_true(gptoss.load(course_file(m)):experts_mxfp4())
    assert.is_true(gptoss.load(saved(m, { format = "hf" })):experts_mxfp4())
  end)

  it("names the first expert weight of a course file that is not MXFP4, and save refuses it", function()
    local m = tiny()
    -- layer 2, expert 3, row 5, input 34 (1-based): element ((1*4 + 2)*48 + 4)*40 + 33
    local i = ((1 * 4 + 2) * 48 + 4) * 40 + 33
    local c = patched(m, i, 0.3)
    local ok, why = c:experts_mxfp4()
    assert.is_false(ok)
    assert.are.equal("w_mlp1 layer 2 expert 3 row 5 input 34 = 0.300000012 is not exactly MXFP4 (an e2m1 "
      .. "value times a power of two shared by its block of 32 inputs)", why)
    assert.are.same({ false, why }, { c:experts_mxfp4() }) -- cached, the same answer
    local dir = tmpdir()
    expect_error(function() c:save(dir .. "/x", { format = "hf" }) end,
      ("save: cannot write '%s/x' as hf: the experts must be MXFP4: w_mlp1 layer 2 expert 3"):format(dir))
    assert.are.same({}, H.list_dir(dir)) -- nothing left behind
    c:save(dir .. "/x.bin") -- the course format takes any value
    assert.are.equal(0, c:tensor("w_mlp1"):max_abs_diff(gptoss.load(dir .. "/x.bin"):tensor("w_mlp1")))
  end)

  it("refuses scales the kernels do not take, but not a block of zeros", function()
    local m = tiny()
    -- 2^-127 alone in its block needs the scale byte 0: exact, but below 2
    local c = patched(m, 32 * 0 + 40, 2.0 ^ -127, true)
    local ok, why = c:experts_mxfp4()
    assert.is_false(ok)
    assert.truthy(why:find("w_mlp1 layer 1 expert 1 row 2 input 1 = ", 1, true), why)
    assert.truthy(why:find("needs the MXFP4 scale byte 0, outside the 2..128 the kernels take", 1, true), why)
    -- the same in a checkpoint: a scale byte set to 1 under nonzero codes, another to 255
    -- under codes of zero
    local dir = saved(m, { format = "hf" })
    local file = dir .. "/model.safetensors"
    local st = H.read_safetensors(file)
    local raw, start = read_file(file), #read_file(file) - #st.data
    local function set_byte(name, k, v)
      for _, t in ipairs(st.tensors) do
        if t.name == name then
          local at = start + t.offsets[1] + k
          raw = raw:sub(1, at) .. string.char(v) .. raw:sub(at + 2)
          return
        end
      end
      error(name)
    end
    local blocks = "model.layers.0.mlp.experts.down_proj_blocks"
    for k = 0, 15 do set_byte(blocks, k, 0) end -- row 1's first block: zeros
    set_byte("model.layers.0.mlp.experts.down_proj_scales", 0, 255)
    write_file(file, raw)
    assert.is_true(gptoss.load(dir):experts_mxfp4())
    set_byte("model.layers.1.mlp.experts.gate_up_proj_scales", 2 * 3 + 1, 1) -- row 4, block 2
    write_file(file, raw)
    local h = gptoss.load(dir)
    ok, why = h:experts_mxfp4()
    assert.is_false(ok)
    local input = tonumber(why:match("^w_mlp1 layer 2 expert 1 row 4 input (%d+) = "))
    assert.is_true(input and input >= 33, why) -- in the block of inputs 33..40
    assert.truthy(why:find("needs the MXFP4 scale byte 1", 1, true), why)
  end)
end)

describe("malformed checkpoints", function()
  after_each(cleanup)
  local C = TINY

  -- A good single-file hf checkpoint to break: its directory, its safetensors file read plainly.
  local function fixture()
    local dir = saved(tiny(), { format = "hf" })
    return dir, H.read_safetensors(dir .. "/model.safetensors")
  end

  local function entry(st, name)
    for _, t in ipairs(st.tensors) do if t.name == name then return t end end
    error(name)
  end

  -- gptoss keeps working after a refusal
  local function still_works()
    local m = gptoss.load(saved(tiny(), { format = "hf" }))
    assert.are.equal(bytes_of(tiny():tensor("w_o", 2)), bytes_of(m:tensor("w_o", 2)))
  end

  local function refuses(dir, ...)
    expect_error(function() gptoss.load(dir) end, "load: ", ...)
    still_works()
  end

  local function rewrite(dir, st, data, metadata, header_text)
    H.write_safetensors(dir .. "/model.safetensors", st.tensors, data or st.data, metadata, header_text)
    return dir .. "/model.safetensors"
  end

  it("refuses a header length beyond the file or past 100,000,000", function()
    local dir = fixture()
    local file = dir .. "/model.safetensors"
    local raw = read_file(file)
    write_file(file, string.pack("<I8", #raw - 7) .. raw:sub(9))
    refuses(dir, ("safetensors file '%s': header length %d exceeds the bytes after it (%d)")
      :format(file, #raw - 7, #raw - 8))
    -- a sparse file longer than the length, which is past the limit
    local f = assert(io.open(file, "wb"))
    f:write(string.pack("<I8", 100000001))
    f:seek("set", 100000100)
    f:write("x")
    f:close()
    refuses(dir, ("safetensors file '%s': header length 100000001 exceeds the limit of safetensors (100000000)")
      :format(file))
    write_file(file, "abc")
    refuses(dir, ("safetensors file '%s' has 3 bytes, fewer than the 8"):format(file))
  end)

  it("refuses a header that is not JSON, or not an object", function()
    local dir, st = fixture()
    local file = rewrite(dir, st, nil, nil, '{"a": [1, 2}')
    refuses(dir, ("safetensors file '%s': the header is not JSON: "):format(file), "line 1")
    rewrite(dir, st, nil, nil, "[1, 2]")
    refuses(dir, ("safetensors file '%s': the header is an array, not an object"):format(file))
    rewrite(dir, st, nil, nil, '{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": {}}')
    refuses(dir, file, "duplicate")
    rewrite(dir, st, nil, '{"format": 1}')
    refuses(dir, ("safetensors file '%s': __metadata__ 'format' must be a string"):format(file))
  end)

  it("refuses an unknown dtype and a shape that is not sizes", function()
    local dir, st = fixture()
    local t = entry(st, "model.norm.weight")
    local file = rewrite(dir, st)
    t.dtype = "Q9"
    rewrite(dir, st)
    refuses(dir, ("safetensors file '%s': tensor 'model.norm.weight': unknown dtype 'Q9'"):format(file))
    t.dtype, t.shape = "F32", { -40 }
    rewrite(dir, st)
    refuses(dir, ("safetensors file '%s': tensor 'model.norm.weight': shape[0] is not a size"):format(file))
    t.shape = nil
    H.write_safetensors(file, {}, st.data, nil, '{"model.norm.weight": {"dtype": "F32", "data_offsets": [0, 160]}}')
    refuses(dir, "tensor 'model.norm.weight': shape must be an array")
    H.write_safetensors(file, {}, st.data, nil,
      '{"model.norm.weight": {"dtype": "F32", "shape": [40], "data_offsets": [0]}}')
    refuses(dir, "tensor 'model.norm.weight': data_offsets must be [begin, end]")
    H.write_safetensors(file, {}, st.data, nil,
      '{"model.norm.weight": {"dtype": "F32", "shape": [40], "data_offsets": [160, 0]}}')
    refuses(dir, ("safetensors file '%s': tensor 'model.norm.weight': data_offsets must be [begin, end] with "
      .. "0 <= begin <= end")
      :format(file))
  end)

  it("refuses a tensor whose size is not its dtype's size times its shape", function()
    local dir, st = fixture()
    entry(st, "model.layers.1.self_attn.sinks").shape = { 5 }
    local file = rewrite(dir, st)
    refuses(dir, ("safetensors file '%s': tensor 'model.layers.1.self_attn.sinks' has 16 bytes"):format(file),
      "dtype F32 and its shape need 20")
  end)

  it("refuses overlapping ranges, holes, and data beyond or after the tensors", function()
    local dir, st = fixture()
    local a, b = st.tensors[5], st.tensors[6]
    local saved_b = b.offsets[1]
    b.offsets = { saved_b - 4, b.offsets[2] - 4 }
    local file = rewrite(dir, st)
    refuses(dir, ("safetensors file '%s': tensor '%s'"):format(file, b.name), ("overlaps tensor '%s'"):format(a.name))
    b.offsets = { saved_b + 4, b.offsets[2] + 8 }
    for i = 7, #st.tensors do
      st.tensors[i].offsets = { st.tensors[i].offsets[1] + 4, st.tensors[i].offsets[2] + 4 }
    end
    rewrite(dir, st, st.data .. "\0\0\0\0")
    refuses(dir, ("safetensors file '%s': no tensor holds data bytes %d..%d (a hole after tensor '%s' before "
      .. "tensor '%s')")
      :format(file, saved_b, saved_b + 3, a.name, b.name))
    dir, st = fixture()
    file = rewrite(dir, st, st.data:sub(1, -2))
    local last = st.tensors[#st.tensors]
    refuses(dir, ("safetensors file '%s': tensor '%s' ends at data byte %d, beyond the file's %d data bytes")
      :format(file, last.name, last.offsets[2], #st.data - 1))
    rewrite(dir, st, st.data .. "zz")
    refuses(dir, ("safetensors file '%s': 2 data bytes follow the last tensor '%s'"):format(file, last.name))
  end)

  it("refuses a dtype or a shape the model does not take", function()
    local dir, st = fixture()
    local file = dir .. "/model.safetensors"
    local q = entry(st, "model.layers.2.self_attn.q_proj.weight")
    q.dtype = "I32"
    rewrite(dir, st)
    refuses(dir, ("checkpoint file '%s': tensor 'model.layers.2.self_attn.q_proj.weight' has dtype I32; gpt-oss "
      .. "needs BF16 or F32")
      :format(file))
    q.dtype, q.shape = "F32", { C.hidden_dim, C.n_attn_heads * C.head_dim }
    rewrite(dir, st)
    refuses(dir, ("checkpoint file '%s': tensor 'model.layers.2.self_attn.q_proj.weight' has shape [40, 32]; the "
      .. "config makes it [32, 40]")
      :format(file))
    dir, st = fixture()
    local s = entry(st, "model.layers.0.mlp.experts.down_proj_scales")
    s.dtype, s.shape = "I8", s.shape
    rewrite(dir, st)
    refuses(dir, "tensor 'model.layers.0.mlp.experts.down_proj_scales' has dtype I8; gpt-oss needs U8")
  end)

  it("refuses a missing or an unexpected tensor", function()
    local dir, st = fixture()
    entry(st, "model.layers.1.mlp.router.bias").name = "model.layers.1.mlp.router.biases"
    rewrite(dir, st)
    refuses(dir, ("checkpoint '%s': tensor 'model.layers.1.mlp.router.bias' is missing from '%s/model.safetensors'")
      :format(dir, dir))
    dir, st = fixture()
    local n = #st.data
    st.tensors[#st.tensors + 1] = { name = "model.layers.3.input_layernorm.weight", dtype = "F32", shape = { 40 },
      offsets = { n, n + 160 } }
    local file = rewrite(dir, st, st.data .. ("\0"):rep(160))
    refuses(dir, ("checkpoint file '%s': unexpected tensor 'model.layers.3.input_layernorm.weight' (not one of a "
      .. "3-layer gpt-oss's)")
      :format(file))
  end)

  it("refuses a shard the index names that is missing, and an index that disagrees with its shards", function()
    local dir = saved(tiny(), { format = "hf", shard_bytes = 30000 })
    local index = dir .. "/model.safetensors.index.json"
    local map = read_json(index)
    local holder = map.weight_map["model.norm.weight"]
    local other = map.weight_map["model.embed_tokens.weight"]
    assert.are_not.equal(holder, other)
    os.remove(dir .. "/" .. other)
    refuses(dir, ("checkpoint index '%s' names shard '%s': cannot open safetensors file '%s/%s': No such file")
      :format(index, other, dir, other))
    dir = saved(tiny(), { format = "hf", shard_bytes = 30000 })
    index = dir .. "/model.safetensors.index.json"
    map.weight_map["model.norm.weight"] = other
    write_json(index, map)
    refuses(dir, ("checkpoint shard '%s/%s' holds tensor 'model.norm.weight', which the index '%s' puts in '%s'")
      :format(dir, holder, index, other))
    map.weight_map["model.norm.weight"] = nil
    write_json(index, map)
    refuses(dir, "holds tensor 'model.norm.weight', which the index '" .. index .. "' does not list")
    map.weight_map["model.norm.weight"] = holder
    map.weight_map["model.other"] = holder
    write_json(index, map)
    refuses(dir, ("checkpoint index '%s' puts tensor 'model.other' in '%s', which does not hold it")
      :format(index, holder))
    map.weight_map["model.other"] = "../x.safetensors"
    write_json(index, map)
    refuses(dir, ("checkpoint index '%s': weight_map['model.other'] must be the name of a file"):format(index))
    write_file(index, "{")
    refuses(dir, ("checkpoint index '%s' is not JSON"):format(index))
    os.remove(index)
    refuses(dir, ("checkpoint '%s' has neither model.safetensors nor model.safetensors.index.json"):format(dir))
  end)
end)

describe("checkpoint files that are not regular files", function()
  after_each(cleanup)

  -- dir's file `name` replaced by a named pipe; loading dir must refuse it within a second
  local function refuses_fifo(dir, name, what)
    assert(os.remove(dir .. "/" .. name))
    local fifo = H.fifo(dir, name)
    H.expect_error_soon(("require('gptoss').load(%q)"):format(dir), nil,
      ("%s '%s' is a named pipe, not a regular file"):format(what, fifo))
  end

  it("refuses a named pipe as config.json, the index or a shard, before opening it", function()
    refuses_fifo(saved(tiny(), { format = "hf" }), "config.json", "checkpoint config")
    refuses_fifo(saved(tiny(), { format = "original" }), "model.safetensors", "safetensors file")
    local dir = saved(tiny(), { format = "hf", shard_bytes = 30000 })
    local shard = read_json(dir .. "/model.safetensors.index.json").weight_map["model.norm.weight"]
    refuses_fifo(dir, shard, "safetensors file")
    refuses_fifo(saved(tiny(), { format = "hf", shard_bytes = 30000 }), "model.safetensors.index.json",
      "checkpoint index")
  end)

  it("refuses a directory as config.json", function()
    local dir = saved(tiny(), { format = "hf" })
    local path = dir .. "/config.json"
    assert(os.remove(path))
    assert(os.execute("mkdir " .. path))
    expect_error(function() gptoss.load(dir) end,
      ("checkpoint config '%s' is a directory, not a regular file"):format(path))
  end)
end)

describe("checkpoint configs", function()
  after_each(cleanup)

  -- a good checkpoint of `layout` whose config.json `change` edits (a decoded table); the
  -- refusal must name the config file and every string given
  local function refuses(layout, change, ...)
    local dir = saved(tiny(), { format = layout })
    local path = dir .. "/config.json"
    local c = read_json(path)
    change(c)
    write_json(path, c)
    expect_error(function() gptoss.load(dir) end, ("load: checkpoint config '%s'"):format(path), ...)
    assert.are.equal(40, gptoss.load(saved(tiny(), { format = layout })).config.hidden_dim)
  end

  it("refuses RoPE settings the forward pass does not implement", function()
    refuses("hf", function(c) c.rope_scaling.rope_type = "linear" end,
      'rope_scaling.rope_type must be "yarn"', '(got "linear")')
    refuses("hf", function(c) c.rope_scaling = nil end, "rope_scaling must be an object (got nothing)")
    refuses("hf", function(c) c.rope_scaling.beta_fast = 16 end,
      "rope_scaling.beta_fast = 16 is not implemented (the forward pass uses 32)")
    refuses("hf", function(c) c.rope_scaling.beta_slow = 2 end, "rope_scaling.beta_slow = 2 is not implemented")
    refuses("hf", function(c) c.rope_scaling.truncate = true end, "rope_scaling.truncate must be false")
    refuses("hf", function(c) c.rope_scaling.factor = 0.5 end, "rope_scaling.factor = 0.5 is not implemented")
    refuses("original", function(c) c.rope_ntk_beta = 16 end,
      "rope_ntk_beta = 16 is not implemented (the forward pass uses 32)")
    refuses("original", function(c) c.rope_ntk_alpha = 2 end, "rope_ntk_alpha = 2 is not implemented")
    refuses("hf", function(c) c.rope_scaling.original_max_position_embeddings = 64 end,
      "rope: YaRN bounds", "rope_scaling.original_max_position_embeddings=64")
  end)

  it("refuses layer types other than sliding on even layers, and another rms_norm_eps", function()
    refuses("hf", function(c) c.layer_types[2] = "sliding_attention" end,
      'layer_types[1] is "sliding_attention"; the forward pass has full_attention there')
    refuses("hf", function(c) c.layer_types = { "full_attention", "sliding_attention", "full_attention" } end,
      'layer_types[0] is "full_attention"')
    refuses("hf", function(c) c.layer_types[4] = "full_attention" end,
      "layer_types must be an array of num_hidden_layers = 3 names")
    refuses("hf", function(c) c.rms_norm_eps = 1e-6 end,
      "rms_norm_eps = 1e-06 is not implemented (the forward pass uses 1e-05)")
  end)

  it("refuses missing fields and wrong JSON types", function()
    refuses("hf", function(c) c.hidden_size = nil end, "hidden_size is missing")
    refuses("hf", function(c) c.num_experts_per_tok = nil end, "num_experts_per_tok is missing")
    refuses("original", function(c) c.experts_per_token = nil end, "experts_per_token is missing")
    refuses("hf", function(c) c.hidden_size = "40" end, "hidden_size must be an integer (got a string)")
    refuses("hf", function(c) c.num_hidden_layers = 3.5 end,
      "num_hidden_layers must be an integer (got a real number)")
    refuses("hf", function(c) c.rope_theta = true end, "rope_theta must be a number (got a boolean)")
    refuses("original", function(c) c.swiglu_limit = {} end, "swiglu_limit must be a number")
    refuses("hf", function(c) c.rope_scaling.beta_fast = "32" end,
      "rope_scaling.beta_fast must be a number (got a string)")
  end)

  it("refuses values out of range, by their config.json names", function()
    refuses("hf", function(c) c.num_hidden_layers = 0 end, "config: num_hidden_layers = 0 must be positive")
    refuses("hf", function(c) c.num_attention_heads = 3 end,
      "config: num_attention_heads = 3 is not a multiple of num_key_value_heads = 2")
    refuses("original", function(c) c.experts_per_token = 9 end,
      "config: experts_per_token = 9 exceeds num_experts = 4")
    refuses("hf", function(c) c.hidden_size = 1 << 40 end, "hidden_size = 1099511627776 does not fit in 32 bits")
    refuses("hf", function(c) c.sliding_window = -1 end, "config: sliding_window = -1 must be >= 0")
    refuses("hf", function(c) c.max_position_embeddings = nil; c.rope_scaling.factor = 1e6 end,
      "rope_scaling.original_max_position_embeddings x rope_scaling.factor = 4096000000 exceeds 2^31-1")
    refuses("original", function(c) c.head_dim = 7 end, "config: head_dim = 7 must be even")
  end)

  it("refuses a layer count the checkpoint's tensors cannot hold before allocating for it, within a second", function()
    for _, layout in ipairs({ "hf", "original" }) do
      local dir = saved(tiny(), { format = layout })
      local path = dir .. "/config.json"
      local c = read_json(path)
      c.num_hidden_layers, c.layer_types = 100000000, nil
      write_json(path, c)
      local file = dir .. "/model.safetensors"
      H.expect_error_soon(("require('gptoss').load(%q)"):format(dir), H.LIMIT_MEMORY,
        ("checkpoint config '%s': num_hidden_layers = 100000000 makes %d tensors, more than the %d the checkpoint "
          .. "holds ('%s')"):format(path, layout == "hf" and 1900000003 or 1500000003, layout == "hf" and 60 or 48,
          file))
    end
  end)

  it("refuses a config that is not JSON or of neither layout", function()
    local dir = saved(tiny(), { format = "hf" })
    local path = dir .. "/config.json"
    write_file(path, "{")
    expect_error(function() gptoss.load(dir) end, ("checkpoint config '%s' is not JSON"):format(path))
    write_file(path, "[]")
    expect_error(function() gptoss.load(dir) end, ("checkpoint config '%s' is an array, not an object"):format(path))
    write_file(path, '{"hidden_size": 40}')
    expect_error(function() gptoss.load(dir) end,
      ("checkpoint config '%s' is neither a Hugging Face one (num_local_experts) nor an OpenAI original one "
        .. "(num_experts)"):format(path))
  end)

  it("reads experts_per_token for num_experts_per_tok", function()
    local dir = saved(tiny(), { format = "hf" })
    local c = read_json(dir .. "/config.json")
    c.num_experts_per_tok, c.experts_per_token = nil, 2
    write_json(dir .. "/config.json", c)
    assert.are.equal(2, gptoss.load(dir).config.experts_per_token)
  end)
end)

describe("the command line on a checkpoint", function()
  after_each(cleanup)

  it("runs examples/run.lua's getp and generate on a checkpoint directory as on the course file", function()
    local run = H.runner("examples/run.lua", pending)
    local tokenizer = H.need_tokenizer(pending)
    local m = gptoss.synthetic("7m", { seed = 1 })
    local dir = saved(m, { format = "hf" })
    local bin = course_file(m)
    local input = tmp()
    write_file(input, "2\nHello world\nThe ocean\n")
    local outputs = {}
    for _, model in ipairs { dir, bin } do
      local out = tmp()
      local code, stdout, err = run { model, "-m", "getp", "-i", input, "-o", out, "-n", "12", "-z", tokenizer,
        "--device", "cpu", "--quiet" }
      assert.are.equal(0, code, err)
      assert.truthy(stdout:find("max_seq_len: 2048\n", 1, true), stdout)
      outputs[#outputs + 1] = read_file(out)
      local gcode, text, gerr = run { model, "-i", "Hello", "-n", "8", "-z", tokenizer, "--device", "cpu",
        "--quiet" }
      assert.are.equal(0, gcode, gerr)
      outputs[#outputs + 1] = text
    end
    assert.truthy(outputs[1]:match("^[%d ]+\n[%d ]+\n$"), outputs[1])
    assert.are.equal(outputs[3], outputs[1])
    assert.are.equal(outputs[4], outputs[2])
    -- saved with its tokenizer, the directory is all a run needs, as a downloaded one is
    local whole = saved(m, { format = "hf", tokenizer = gptoss.tokenizer(tokenizer) })
    local out = tmp()
    local code, _, err = run { whole, "-m", "getp", "-i", input, "-o", out, "-n", "12", "-z", whole .. "/",
      "--device", "cpu", "--quiet" }
    assert.are.equal(0, code, err)
    assert.are.equal(outputs[1], read_file(out))
  end)
end)
