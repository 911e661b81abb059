-- Long contexts: the KV memory a slot of 131072 positions is planned to take (no device
-- needed), YaRN RoPE at positions past the 4096 it stretches, on the CPU golden against a
-- computation of its own in Lua from docs/course.md's formulas, and the GPU against the
-- golden at those positions (tag: gpu; pending without a GPU).
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local parity = require "gptoss.parity"
local H = require "helpers"

local LONG_CTX = 131072

describe("the KV cache of a slot of 131072 positions, planned without a device", function()
  local function rounded(bytes) return (bytes + 255) // 256 * 256 end

  -- K and V of every layer, each a buffer of positions x kv heads x head_dim values
  -- (rounded up to 256 bytes, as every buffer of the plan); positions(l): layer l's
  local function kv_formula(m, bytes, positions)
    local c, total = m.config, 0
    for l = 1, c.n_layers do
      total = total + 2 * rounded(positions(l) * c.n_kv_heads * c.head_dim * bytes)
    end
    return total
  end

  for _, name in ipairs { "20b", "120b" } do
    it(name .. ": a GPU keeps every position of a full layer, a ring of window + chunk - 1 of a windowed one", function()
      local m = gptoss.synthetic(name)
      local c = m.config
      -- the replica's defaults: mxfp4 experts, a bf16 KV cache, rows 256 and chunk 128
      -- { options, bytes a value, chunk }
      for _, case in ipairs { { {}, 2, 128 }, { { weights = "fp32" }, 4, 128 },
        { { rows = 1024, chunk = 1024 }, 2, 1024 } } do
        local opts = { device = 0, slots = 1, ctx = LONG_CTX }
        for k, v in pairs(case[1]) do opts[k] = v end
        local bytes, chunk = case[2], case[3]
        local plan = m:replica_bytes(opts)
        assert.are.equal(kv_formula(m, bytes, function(l)
          return m.windowed[l] and c.sliding_window + chunk - 1 or LONG_CTX
        end), plan.kv)
        -- two slots take twice the bytes
        opts.slots = 2
        assert.are.equal(2 * plan.kv, m:replica_bytes(opts).kv)
      end
    end)

    it(name .. ": the CPU keeps every position of every layer, in fp32", function()
      local m = gptoss.synthetic(name)
      for _, weights in ipairs { "fp32", "bf16" } do
        assert.are.equal(kv_formula(m, 4, function() return LONG_CTX end),
          m:replica_bytes({ slots = 1, ctx = LONG_CTX, weights = weights }).kv)
      end
    end)
  end
end)

-- A small shape with the 20b's RoPE (head_dim, rope_theta, YaRN's factor over its initial
-- context) and one layer, windowed, its window short: a windowed layer's attention costs
-- the window, not the position, so the golden prefills 131072 positions in seconds.
local TWENTY_B = gptoss.config("20b")
local LONG = {
  vocab_size = 64, n_layers = 1, n_attn_heads = 2, n_kv_heads = 1, n_experts = 4, experts_per_token = 2,
  sliding_window = 16, seq_len = LONG_CTX, head_dim = TWENTY_B.head_dim, rope_theta = TWENTY_B.rope_theta,
  rope_scaling_factor = TWENTY_B.rope_scaling_factor, initial_context_length = TWENTY_B.initial_context_length,
}
-- positions traced: around the initial context (4096) and twice it, 65536, and the last of 131072
local GROUPS = { { 4095, 4096, 4097 }, { 8191, 8192, 8193 }, { 65535, 65536, 65537 }, { 131069, 131070, 131071 } }
local CHUNK = 1024 -- prompt rows a step

-- Prefills slot 1 of every replica of rs with the same ids up to the first position of each
-- group of groups, then calls visit(group): the slots hold exactly the positions before it.
local function walk(rs, groups, vocab, visit)
  local held = 0
  for _, group in ipairs(groups) do
    local ids = H.token_ids(group[1], group[1] - held, vocab)
    for _, r in ipairs(rs) do generate.feed(r, 1, ids, held, { chunk = CHUNK }) end
    visit(group)
    held = group[#group] + 1
  end
end

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local function exact(x) return x end

-- YaRN RoPE at position pos for config c, as docs/course.md#per-token (step 2.4) writes it,
-- every operation's result rounded by `round`: f32 takes run.cpp's float and double steps,
-- exact computes in double. cos and sin (0-based, head_dim / 2 each, times the
-- concentration), the concentration and the inverse frequencies.
local function yarn(c, pos, round)
  local D, half = c.head_dim, c.head_dim // 2
  local theta, s, C = round(c.rope_theta), round(c.rope_scaling_factor), round(c.initial_context_length)
  local concentration, low, high = 1, 0, 0
  if s > 1 then
    concentration = round(round(round(0.1) * round(math.log(s))) + 1)
    local log_theta = round(math.log(theta))
    -- ntk_beta 32 and ntk_alpha 1; each quotient of C is a double, taken back to float
    low = round(round(half * round(math.log(round(C / (32 * 2 * math.pi))))) / log_theta)
    high = round(round(half * round(math.log(round(C / (1 * 2 * math.pi))))) / log_theta)
  end
  local cos, sin, inv = {}, {}, {}
  for i = 0, half - 1 do
    local freq = round(theta ^ round(2 * i / D))
    inv[i] = round(1 / freq)
    if s > 1 then
      local ramp = math.min(1, math.max(0, round(round(i - low) / round(high - low))))
      local keep = round(1 - ramp)
      inv[i] = round(round(round(1 / round(s * freq)) * round(1 - keep)) + round(inv[i] * keep))
    end
    local angle = round(pos * inv[i])
    cos[i], sin[i] = round(round(math.cos(angle)) * concentration), round(round(math.sin(angle)) * concentration)
  end
  return cos, sin, concentration, inv
end

-- The largest error of the traced rotated heads (a host tensor, heads x head_dim) against
-- the rotation by cos, sin of the unrotated ones, which lie in the traced qkv (a flat list)
-- from offset on: |got - want| / (concentration (|a| + |b|)) over every rotated pair (a, b).
local function rotation_error(rotated, qkv, offset, c, cos, sin, concentration)
  local got, half, worst = rotated:totable(), c.head_dim // 2, 0
  for e = 0, #got - 1, c.head_dim do
    for i = 0, half - 1 do
      local a, b = qkv[offset + e + i + 1], qkv[offset + e + i + half + 1]
      local want = { f32(f32(a * cos[i]) - f32(b * sin[i])), f32(f32(b * cos[i]) + f32(a * sin[i])) }
      local scale = concentration * (math.abs(a) + math.abs(b))
      for k, at in ipairs { e + i + 1, e + i + half + 1 } do
        worst = math.max(worst, math.abs(got[at] - want[k]) / scale)
      end
    end
  end
  return worst
end

-- The larger of q_rope's and k_rope's rotation errors in layer l of trace tr at position pos
-- against yarn(c', pos, f32), c' being c with `changes`.
local function trace_error(tr, l, c, pos, changes)
  local layer, HqD = tr.layers[l], c.n_attn_heads * c.head_dim
  local qkv = layer.qkv:totable()
  local cos, sin, concentration = yarn(H.with(c, changes or {}), pos, f32)
  return math.max(rotation_error(layer.q_rope, qkv, 0, c, cos, sin, concentration),
    rotation_error(layer.k_rope, qkv, HqD, c, cos, sin, concentration))
end

-- cosf and sinf within an ulp of the exact value rounded, two products and a sum: the
-- golden's rotation against the float steps', as a fraction of concentration (|a| + |b|)
local FLOAT_STEPS = 2 ^ -22

describe("YaRN RoPE at positions past the initial context", function()
  it("the float steps of the Lua computation are the formula: inverse frequencies within 2^-19 of exact ones", function()
    -- float rounding of YaRN's bounds moves the ramp's last step by about 14 ulp of the result
    local _, _, c_f32, inv_f32 = yarn(LONG, 0, f32)
    local _, _, c_exact, inv_exact = yarn(LONG, 0, exact)
    assert.is_true(math.abs(c_f32 - c_exact) <= 2 ^ -23 * c_exact)
    for i = 0, LONG.head_dim // 2 - 1 do
      assert.is_true(math.abs(inv_f32[i] - inv_exact[i]) <= 2 ^ -19 * inv_exact[i], i)
    end
  end)

  it("the golden rotates q and k at positions up to 131071 as the float steps do, to an ulp of cos and sin", function()
    local m = gptoss.synthetic(LONG, { seed = 4 })
    local c = m.config
    local r <close> = m:replica { slots = 1, ctx = LONG_CTX }
    walk({ r }, GROUPS, c.vocab_size, function(group)
      for _, pos in ipairs(group) do
        local tr = r:trace(1, pos % c.vocab_size, pos)
        local err = trace_error(tr, 1, c, pos)
        assert.is_true(err <= FLOAT_STEPS, ("position %d: error %.3g of concentration (|a| + |b|)"):format(pos, err))
        -- the bound tells positions and scalings apart: the next position's angles, and
        -- RoPE without YaRN, are far outside it
        for _, wrong in ipairs { { pos + 1 }, { pos, { rope_scaling_factor = 1.0 } } } do
          local off = trace_error(tr, 1, c, wrong[1], wrong[2])
          assert.is_true(off > 1000 * FLOAT_STEPS, ("position %d: a wrong rotation's error %.3g"):format(pos, off))
        end
      end
    end)
    assert.are.equal(LONG_CTX, r:length(1))
  end)
end)

describe("the GPU at positions past the initial context #gpu", function()
  if H.no_gpu(pending) then return end

  -- { what, shape, groups }: a full layer's attention on the golden costs the position, so
  -- the shape with one is walked to 8193 only
  for _, case in ipairs { { "one windowed layer, to 131071", LONG, GROUPS },
    { "a windowed and a full layer, to 8193", H.with(LONG, { n_layers = 2 }), { GROUPS[1], GROUPS[2] } } } do
    it("fp32 equals the golden stage by stage: " .. case[1], function()
      local m = gptoss.synthetic(case[2], { seed = 4 })
      local ctx = case[3][#case[3]][3] + 1
      local gpu <close> = m:replica { device = 0, slots = 1, ctx = ctx, weights = "fp32", rows = CHUNK, chunk = CHUNK }
      local cpu <close> = m:replica { slots = 1, ctx = ctx }
      walk({ gpu, cpu }, case[3], m.config.vocab_size, function(group)
        local tokens = {}
        for i, pos in ipairs(group) do tokens[i] = pos % m.config.vocab_size end
        local report = parity.compare(gpu, cpu, { tokens = tokens, positions = group, print = false })
        assert(report.ok, table.concat(parity.format(report), "\n"))
      end)
    end)
  end
end)
