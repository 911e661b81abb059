-- Prefill: a prompt stepped in chunks leaves a slot exactly as one whole prefill does (the
-- last prompt row's logits and the next decode step's, bit for bit on one engine), on the
-- CPU golden and on a GPU (tag: gpu; pending without a GPU); and examples/bench_prefill.lua,
-- the prefill benchmark, on the CPU.
local json = require "dkjson"
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local H = require "helpers"

-- longer than the 7m's window of 128, so chunks fall on both sides of it
local PROMPT = H.token_ids(47, 160, gptoss.config("7m").vocab_size)

-- Prefills PROMPT into `slot` of r in chunks of `chunk` rows, then decodes one token: the
-- raw bytes of the last prompt row's logits and of the decode row's.
local function prefill_and_decode(r, slot, chunk)
  r:reset(slot)
  local h = generate.feed(r, slot, PROMPT, 0, { chunk = chunk, logits = true })
  local last = h:logits()
  local next_id = h:tokens()[h.rows]
  local decoded = r:step { slots = { slot }, positions = { #PROMPT }, tokens = { next_id }, logits = true }
  return H.tensor_bytes(last), H.tensor_bytes(decoded:logits())
end

-- Whole prefill on replica `whole` (slot 1) against each {replica, slot, chunk} of chunked.
local function expect_chunked_equal(whole, chunked)
  local last, decoded = prefill_and_decode(whole, 1, #PROMPT)
  for _, case in ipairs(chunked) do
    local r, slot, chunk = table.unpack(case)
    local c_last, c_decoded = prefill_and_decode(r, slot, chunk)
    assert.are.equal(last, c_last, ("chunks of %d: the last prompt row's logits differ"):format(chunk))
    assert.are.equal(decoded, c_decoded, ("chunks of %d: the decode step's logits differ"):format(chunk))
  end
end

describe("a prompt prefilled in chunks equals one whole prefill, bit for bit", function()
  after_each(H.cleanup)
  local m = gptoss.synthetic("7m", { seed = 9 })

  for _, weights in ipairs { "fp32", "bf16" } do
    it("on the CPU golden, " .. weights, function()
      local r <close> = m:replica { slots = 2, ctx = #PROMPT + 1, weights = weights }
      expect_chunked_equal(r, { { r, 2, 7 }, { r, 2, 64 } })
    end)
  end
end)

describe("a prompt prefilled in chunks on a GPU #gpu", function()
  if H.no_gpu(pending) then return end
  after_each(H.cleanup)
  local m = gptoss.synthetic("7m", { seed = 9 })

  for _, weights in ipairs { "fp32", "bf16", "mxfp4" } do
    it("equals one whole prefill, bit for bit, " .. weights, function()
      -- one replica takes the whole prompt in a step, and chunks of it in another slot; the
      -- others' chunks are short enough that the windowed layers' ring wraps
      local opts = { device = 0, slots = 2, ctx = #PROMPT + 1, weights = weights, rows = #PROMPT, chunk = #PROMPT }
      local whole <close> = m:replica(opts)
      local chunked = { { whole, 2, 16 } }
      for i, chunk in ipairs { 16, 128 } do
        opts.rows, opts.chunk = chunk, chunk
        local r = m:replica(opts)
        chunked[#chunked + 1] = { r, i, chunk }
      end
      expect_chunked_equal(whole, chunked)
      for i = 2, #chunked do chunked[i][1]:close() end
    end)
  end
end)

describe("examples/bench_prefill.lua", function()
  after_each(H.cleanup)

  it("reports each length's time to first token and tokens/s, and the KV plan of 131072 positions", function()
    local run = H.runner("examples/bench_prefill.lua", pending)
    local code, out, err = run { "7m", "--device", "cpu", "--lengths", "5,40", "--chunk", "16", "--repeat", "2" }
    assert.are.same({ 0, "" }, { code, err })
    local m = gptoss.synthetic("7m")
    local plan = m:replica_bytes { slots = 1, ctx = 131072 }
    assert.truthy(out:find(("KV cache of one slot of 131072 positions, planned: %.3f GiB (%d bytes)")
      :format(plan.kv / 2 ^ 30, plan.kv), 1, true), out)
    local results = {}
    for line in out:gmatch("[^\n]+") do
      if line:sub(1, 1) == "{" then results[#results + 1] = json.decode(line) end
    end
    assert.are.equal(2, #results, out)
    for i, length in ipairs { 5, 40 } do
      local res = results[i]
      assert.are.same({ "prefill", length, 16, math.ceil(length / 16), 41, 2, "cpu", "fp32" },
        { res.bench, res.length, res.chunk, res.steps, res.ctx, res.runs, res.device, res.weights })
      assert.are.same({ 131072, plan.kv }, { res.long_ctx, res.long_ctx_kv_bytes })
      assert.are.equal(2, #res.ttft_ms_runs)
      local sum = 0
      for _, ms in ipairs(res.ttft_ms_runs) do
        assert.is_true(ms > 0)
        sum = sum + length / (ms / 1000)
      end
      assert.is_true(math.abs(res.tok_per_s - sum / 2) <= 1e-9 * res.tok_per_s)
      assert.is_nil(res.weights_floor_ms) -- no copy bandwidth on the CPU
      assert.truthy(out:find(("\n%8d %6d "):format(length, res.steps), 1, true), out)
    end
  end)

  it("defaults its chunk to what getp and serve step on the device", function()
    local run = H.runner("examples/bench_prefill.lua", pending)
    local code, out = run { "7m", "--device", "cpu", "--lengths", "3", "--repeat", "1" }
    assert.are.equal(0, code)
    local res = json.decode(out:match("\n({[^\n]*})\n$"))
    assert.are.equal(generate.chunk(gptoss.synthetic("7m"):replica { ctx = 4 }), res.chunk)
  end)
end)
