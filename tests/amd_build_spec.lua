-- The gfx90a build, which no AMD GPU runs here, read from its device assembly: `make test`
-- writes build/amd-asm/*.s where hipcc is installed (GPTOSS_AMD_ASM names the files). The
-- matrix-core kernels must multiply on MFMA (matrix_core.h), not on the plain fallback, and
-- the kernels whose launch bounds ask for several blocks a compute unit must get the
-- registers that means (device.h's GPTOSS_LAUNCH_BOUNDS): read as waves per SIMD, the
-- bounds capped them and they spilled. Each kernel's figures go to stderr as
-- "[amd-build] ...". Pending without hipcc.
local files = os.getenv("GPTOSS_AMD_ASM")

-- {name = {mfma = instructions, vgprs =, scratch = bytes, occupancy = waves a SIMD}} of the
-- kernels in one assembly file
local function kernels_of(path)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  local found = {}
  -- a kernel's code, then its statistics, each under a ".section .text.<name>" line
  local pieces = {}
  for start, name, stop in text:gmatch("()\n\t%.section\t%.text%.([%w_]+),#alloc,#execinstr\n()") do
    pieces[#pieces + 1] = { name = name, from = stop, before = start }
  end
  for i, p in ipairs(pieces) do
    local body = text:sub(p.from, pieces[i + 1] and pieces[i + 1].before or #text)
    local k = found[p.name] or { mfma = 0 }
    found[p.name] = k
    for _ in body:gmatch("\n%s*v_mfma_f32_16x16x16bf16_1k ") do k.mfma = k.mfma + 1 end
    k.vgprs = k.vgprs or tonumber(body:match("; NumVgprs: (%d+)"))
    k.scratch = k.scratch or tonumber(body:match("; ScratchSize: (%d+)"))
    k.occupancy = k.occupancy or tonumber(body:match("; Occupancy: (%d+)"))
  end
  return found
end

describe("the gfx90a build", function()
  if not files then
    pending("hipcc is not installed here (make test writes the gfx90a assembly where it is)")
    return
  end
  local all = {}
  for path in files:gmatch("%S+") do
    for name, k in pairs(kernels_of(path)) do all[name] = k end
  end
  local names = {}
  for name in pairs(all) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local k = all[name]
    io.stderr:write(("[amd-build] %-90s mfma %3d, vgprs %3s, scratch %4s B, %s waves a SIMD\n")
      :format(name:sub(1, 90), k.mfma, k.vgprs, k.scratch, k.occupancy))
  end
  local function family(pattern)
    local list = {}
    for _, name in ipairs(names) do
      if name:find(pattern) then list[#list + 1] = name end
    end
    return list
  end

  it("multiplies on MFMA in every matrix-core kernel: the GEMMs' streaming, staged and tiled, attention's", function()
    local families = { "gemm_stream_kernel", "gemm_staged_kernel", "gemm_tiled_kernel", "attention_mma_kernel" }
    for _, pattern in ipairs(families) do
      local list = family(pattern)
      assert.is_true(#list > 0, pattern .. ": no such kernel in the assembly")
      for _, name in ipairs(list) do
        assert.is_true(all[name].mfma > 0, name .. " has no v_mfma_f32_16x16x16bf16_1k")
      end
    end
  end)

  it("gives kernels of several blocks a compute unit their registers: the streaming GEMMs and attention's "
    .. "partial sums spill nothing", function()
    for _, pattern in ipairs { "gemm_stream_kernel", "attention_partial_kernel" } do
      local list = family(pattern)
      assert.is_true(#list > 0, pattern .. ": no such kernel in the assembly")
      for _, name in ipairs(list) do
        assert.are.equal(0, all[name].scratch, name .. " spills")
      end
    end
  end)
end)
