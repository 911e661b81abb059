-- Programmatic dependent launch (kernels/launch.h). Two parts:
-- - the step's kernels as NVIDIA compiles them: `make test` writes their sm_90a PTX, and one
--   file's sm_80 PTX, to build/nv-ptx/ where nvcc is installed (GPTOSS_NV_PTX names the files; no
--   GPU needed). Every kernel a step's graph launches programmatically waits (griddepcontrol.wait);
--   sm_80's code, which has no such instruction, none. Pending without nvcc.
-- - (tag gpu) a step's graph whose kernels start before the kernel before them ends gives the bits
--   of the same graph launched plainly. The switch, GPTOSS_NO_PDL=1, is read when a replica is
--   created, so each side runs in a process of its own, which prints every step's drawn ids and a
--   digest of the bits of its logits. Runs where the first GPU is sm_90 or later; pending elsewhere.
local gptoss = require "gptoss"
local helpers = require "helpers"

-- Four slots prefilled in one step (3 to 129 positions: past the 7m's window of 128 and the
-- attention's splits of 128 keys), then decode steps of the four rows, each fed the previous draw.
-- Arguments: model, weights, steps.
local DECODE = [==[
local gptoss = require "gptoss"
local name, weights, steps = ...
local model = gptoss.synthetic(name, { seed = 3 })
local r <close> = model:replica { device = 0, slots = 4, ctx = 256, weights = weights }
local vocab = model.config.vocab_size
local slots, positions, tokens, last, length = {}, {}, {}, {}, {}
for s, n in ipairs { 3, 17, 40, 120 } do
  for p = 0, n - 1 do
    slots[#slots + 1], positions[#positions + 1] = s, p
    tokens[#tokens + 1] = (s * 7919 + p * 104729) % vocab
  end
  last[s], length[s] = #tokens, n
end
-- the logits' bits folded into one integer (wrapping), rows in order
local function digest(logits, rows)
  local h = 0
  for i = 1, rows do
    for _, v in ipairs(logits[i]:totable()) do
      h = h * 1099511628211 + string.unpack("<I4", string.pack("<f", v))
    end
  end
  return h
end
local h = r:step { slots = slots, positions = positions, tokens = tokens, logits = last }
print("prefill", digest(h:logits(), 4))
local ids = h:tokens()
local fed = { ids[last[1]], ids[last[2]], ids[last[3]], ids[last[4]] }
for step = 1, tonumber(steps) do
  local pos = {}
  for s = 1, 4 do pos[s] = length[s] + step - 1 end
  h = r:step { slots = { 1, 2, 3, 4 }, positions = pos, tokens = fed, logits = true }
  fed = h:tokens()
  print(step, table.concat(fed, ","), digest(h:logits(), 4))
end
]==]

-- {name = body} of the kernels (.entry) of a PTX file
local function entries(path)
  local text = helpers.read_file(path)
  local found, starts = {}, {}
  for at, name in text:gmatch("()%.entry%s+([%w_]+)") do starts[#starts + 1] = { at = at, name = name } end
  for i, e in ipairs(starts) do
    found[e.name] = text:sub(e.at, starts[i + 1] and starts[i + 1].at - 1 or #text)
  end
  return found
end

-- the kernels a step's graph launches with programmatic serialization (all but the Hopper GEMM's)
local WAITING = {
  "embedding_kernel", "rmsnorm_kernel", "rope_kv_kernel", "router_kernel", "moe_dispatch_kernel",
  "moe_combine_kernel", "gemm_exact_kernel", "gemm_stream_kernel", "gemm_staged_kernel", "gemm_tiled_kernel",
  "attention_exact_kernel", "attention_partial_kernel", "attention_mma_kernel", "attention_combine_kernel",
}

describe("the step's kernels in NVIDIA's PTX", function()
  local files = os.getenv("GPTOSS_NV_PTX")
  if not files then
    pending("nvcc is not installed here (make test writes the kernels' PTX where it is)")
    return
  end
  local sm90, sm80 = {}, {}
  for path in files:gmatch("%S+") do
    for name, body in pairs(entries(path)) do (path:find("sm_80", 1, true) and sm80 or sm90)[name] = body end
  end

  it("waits for the kernel before in every kernel a step launches programmatically (sm_90a)", function()
    for _, kernel in ipairs(WAITING) do
      local seen = 0
      for name, body in pairs(sm90) do
        if name:find(kernel, 1, true) then
          seen = seen + 1
          assert.truthy(body:find("griddepcontrol.wait;", 1, true), name .. " does not wait")
          assert.truthy(body:find("griddepcontrol.launch_dependents;", 1, true), name .. " never lets the next start")
        end
      end
      assert.is_true(seen > 0, kernel .. ": no such kernel in the PTX")
    end
  end)

  it("has no griddepcontrol in sm_80's code", function()
    assert.is_true(next(sm80) ~= nil, "no sm_80 PTX among " .. files)
    for name, body in pairs(sm80) do
      assert.falsy(body:find("griddepcontrol", 1, true), name)
    end
  end)
end)

describe("programmatic dependent launch #gpu", function()
  if helpers.no_gpu(pending) then return end
  local arch = gptoss.devices()[1].arch
  local major = tonumber(arch:match("^sm_(%d+)%d$"))
  if not major or major < 9 then
    pending(("the first GPU is %s: programmatic launches need sm_90 or later"):format(arch))
    return
  end

  local function decode(model, weights, steps, env)
    local script = helpers.tmp()
    helpers.write_file(script, DECODE)
    local code, out, err = helpers.gptoss(pending, ".", { "lua", script, model, weights, tostring(steps) }, env)
    assert.are.equal(0, code, err)
    return out
  end

  for _, case in ipairs {
    { "7m", "fp32", 24 }, { "7m", "bf16", 24 }, { "7m", "mxfp4", 24 }, { "20b-2l", "mxfp4", 8 },
  } do
    local model, weights, steps = case[1], case[2], case[3]
    it(("gives the bits of plain launches: %s, %s weights, a prefill and %d decode steps of 4 rows")
      :format(model, weights, steps), function()
        local programmatic = decode(model, weights, steps, {})
        local plain = decode(model, weights, steps, { GPTOSS_NO_PDL = "1" })
        assert.are.equal(steps + 1, select(2, programmatic:gsub("\n", "")))
        assert.are.equal(plain, programmatic)
        helpers.cleanup()
      end)
  end
end)
