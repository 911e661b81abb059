-- The GEMM families give each other's bits (tag: gpu). `make test` on NVIDIA builds
-- tools/hopper_probes/engine_gemm.cu, which runs the engine's own GEMM dispatch for one
-- step's products twice, once as a device with the Hopper GEMM and the streaming kernel's
-- 8-row tiles and once as one with neither, and compares the outputs bit for bit. Here it
-- runs on the experts' routings that uniform routing never makes (empty experts, one-row
-- experts, one expert with every row) and with k that is no multiple of a stage, over bf16
-- and over MXFP4 experts, at the Hopper GEMM's row counts and at the few rows of decode.
-- Pending without the probe, a GPU, or a build and device that have the path a case checks.
local gptoss = require "gptoss"

local probe = os.getenv("GPTOSS_GEMM_PROBE")

local function run(args)
  local p = assert(io.popen(probe .. " " .. args .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

describe("the GEMM families #gpu", function()
  local built = probe and io.open(probe)
  if not built then
    pending("the GEMM probe is not built here (make test builds it on NVIDIA)")
    return
  end
  built:close()
  if #gptoss.devices() == 0 then
    pending("no GPU visible to this build (gptoss.devices() is empty)")
    return
  end
  local _, out = run("--hidden 64 --inter 64 1")
  local no_hopper = out:match("no Hopper GEMM") and out:match("[^\n]*")

  -- took: a line the probe prints where the path under test ran (the comparison means
  -- something only there)
  local cases = {
    { "the Hopper GEMM, the 20b's shapes, skewed routing", "--routing skewed 256 1024", hopper = true },
    { "the Hopper GEMM, hidden 200, intermediate 136 (k no multiple of a stage), skewed routing",
      "--hidden 200 --inter 136 --routing skewed 64 256 1024", hopper = true },
    -- MXFP4 experts: the Hopper GEMM decodes each lane's codes in registers, wgmma's A operand
    { "the Hopper GEMM, MXFP4 experts, skewed routing",
      "--weights mxfp4 --routing skewed --experts-only 17 100 300 1024", hopper = true },
    { "the Hopper GEMM, MXFP4 experts, k of 91 and 89 chunks (an odd number: the last stage's box "
      .. "half past k), partial column blocks",
      "--weights mxfp4 --hidden 2912 --inter 2848 --experts-only 200 1024", hopper = true },
    -- the streaming kernel's 8-row tiles: the weights on the mma's 16-row side, the rows on its 8
    { "8-row streaming tiles, dense GEMMs and bf16 experts, skewed routing", "--routing skewed 1 5 8",
      took = " same %(8%-row tiles%)$" },
    { "8-row streaming tiles, MXFP4 experts, skewed routing, k of 91 and 89 chunks",
      "--weights mxfp4 --routing skewed --hidden 2912 --inter 2848 --experts-only 1 3 8 64",
      took = " same %(tiles of 8 and 16 rows" },
  }
  for _, case in ipairs(cases) do
    it("gives the other families' bits: " .. case[1], function()
      if case.hopper and no_hopper then
        pending(no_hopper)
        return
      end
      local passed, text = run(case[2])
      io.stderr:write(text)
      assert.is_truthy(text:match("\n0 of the GEMMs differ"), text)
      assert.is_true(passed, text)
      local took = 0
      for line in text:gmatch("[^\n]+") do
        if case.took and line:match(case.took)
          or not case.took and (line:match(" same$") or line:match(" same %(tiles of 128 ")) then
          took = took + 1
        end
      end
      assert.is_true(took > 0, text)
    end)
  end
end)
