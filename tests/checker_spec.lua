-- The logits checker (our own design: the course's is not public,
-- docs/course.md#what-the-course-does-not-publish): both file
-- formats byte for byte and every malformed-file error, numpy-allclose comparison at its
-- boundary, the command line's subcommands and exit statuses (dump: what a step gives;
-- compare: two dumps of one model pass, of two seeds fail), and logits dumped from a CPU
-- replica of the synthetic 7m model compared with themselves and with a perturbed copy.
local gptoss = require "gptoss"
local checker = require "gptoss.checker"
local H = require "helpers"
local read_file, write_file, expect_error, tmp, cleanup = H.read_file, H.write_file, H.expect_error, H.tmp, H.cleanup

local NAN, INF = 0 / 0, math.huge
local f32 = function(x) return (string.unpack("<f", string.pack("<f", x))) end

-- temporary paths with an extension (helpers' cleanup only knows the bare names)
local extra = {}
local function tmp_ext(ext)
  local p = tmp() .. ext
  extra[#extra + 1] = p
  return p
end
local function cleanup_all()
  for _, p in ipairs(extra) do os.remove(p) end
  extra = {}
  cleanup()
end

local function is_nan(x) return x ~= x end

-- the module answers normally after an error
local function still_usable()
  local p = tmp_ext(".txt")
  checker.write(p, { 1.5, -2 })
  assert.are.same({ 1.5, -2.0 }, checker.read(p))
  assert.is_true(checker.compare({ 1 }, { 1 }).ok)
end

describe("checker files", function()
  after_each(cleanup_all)

  it("writes text as %.9g, one value per line, with one spelling for non-finite values", function()
    local p = tmp_ext(".txt")
    assert.are.equal(8, checker.write(p, { 1, -0.5, 0.1, 1 / 3, NAN, INF, -INF, 0x1.fffffep127 }))
    assert.are.equal("1\n-0.5\n0.1\n0.333333333\nnan\ninf\n-inf\n3.40282347e+38\n", read_file(p))
    local back = checker.read(p)
    assert.are.equal(8, #back)
    assert.are.same({ 1.0, -0.5, f32(0.1), f32(1 / 3) }, { table.unpack(back, 1, 4) }) -- read as float32
    assert.is_true(is_nan(back[5]))
    assert.are.same({ INF, -INF, 0x1.fffffep127 }, { table.unpack(back, 6, 8) })
    assert.are.equal("float", math.type(back[1]))
    checker.write(p, {})
    assert.are.equal("", read_file(p))
    assert.are.same({}, checker.read(p))
  end)

  it("gives every float32 back exactly through text", function()
    local values = {}
    for i = 1, 2000 do values[i] = f32(math.sin(i * 1.7) * 10 ^ ((i % 13) - 6)) end
    values[#values + 1] = f32(1e-45) -- smallest subnormal
    values[#values + 1] = -0.0
    local p = tmp_ext(".txt")
    checker.write(p, values)
    assert.are.same(values, checker.read(p))
  end)

  it("reads the text forms other tools write, and nothing else", function()
    local p = tmp_ext(".txt")
    write_file(p, "1\n+2.5\n-.25\n3.\n1e3\n-2E-2\n  7 \t\r\n-nan\nNaN\n+inf\n-Infinity\n5")
    local v = checker.read(p)
    assert.are.same({ 1.0, 2.5, -0.25, 3.0, 1000.0, f32(-0.02), 7.0 }, { table.unpack(v, 1, 7) })
    assert.is_true(is_nan(v[8]) and is_nan(v[9]))
    assert.are.same({ INF, -INF, 5.0 }, { table.unpack(v, 10, 12) })
    for _, case in ipairs {
      { "1\n\n2\n", "line 2 is blank (one value per line, no blank lines)" },
      { "1\n2\n\n", "line 3 is blank" },
      { "1\n \t\n", "line 2 is blank" },
      { "1\n2\nabc\n", "line 3: \"abc\" is not a decimal number" },
      { "0x10\n", "line 1: \"0x10\" is not a decimal number" },
      { "1 2\n", "line 1: \"1 2\" is not a decimal number" },
      { "1,5\n", "line 1: \"1,5\" is not a decimal number" },
      { "e5\n", "line 1: \"e5\" is not a decimal number" },
      { "1\n-3.4028236e38\n", "line 2: -3.4028236e38 is beyond float32's range (+-3.40282347e+38)" },
      { "1e999\n", "line 1: 1e999 is beyond float32's range" },
      { "1\n2\x01\n", "line 2: \"2\\x01\" is not a decimal number" },
    } do
      write_file(p, case[1])
      expect_error(function() checker.read(p) end, "checker.read: " .. p .. ": " .. case[2])
    end
    still_usable()
  end)

  it("writes raw little-endian fp32 and reads it back", function()
    local p = tmp_ext(".f32")
    assert.are.equal(4, checker.write(p, { 1, -2, 0.5, INF }))
    assert.are.equal(string.pack("<ffff", 1, -2, 0.5, INF), read_file(p))
    assert.are.same({ 1.0, -2.0, 0.5, INF }, checker.read(p))
    -- doubles are rounded to float32; NaN survives
    checker.write(p, { 0.1, NAN, 1 / 3 })
    local back = checker.read(p)
    assert.are.equal(f32(0.1), back[1])
    assert.is_true(is_nan(back[2]))
    assert.are.equal(f32(1 / 3), back[3])
    -- more values than one pack/unpack chunk
    local many = {}
    for i = 1, 10000 do many[i] = f32(i / 7) end
    checker.write(p, many)
    assert.are.equal(40000, #read_file(p))
    assert.are.same(many, checker.read(p))
  end)

  it("picks the format from the extension unless told", function()
    local values = { 0.25, -3 }
    for _, case in ipairs {
      { ".f32", string.pack("<ff", 0.25, -3) }, { ".bin", string.pack("<ff", 0.25, -3) },
      { ".BIN", string.pack("<ff", 0.25, -3) }, { ".txt", "0.25\n-3\n" }, { "", "0.25\n-3\n" },
    } do
      local p = tmp_ext(case[1])
      checker.write(p, values)
      assert.are.equal(case[2], read_file(p), "extension " .. case[1])
      assert.are.same({ 0.25, -3.0 }, checker.read(p))
    end
    local txt = tmp_ext(".txt")
    checker.write(txt, values, "f32")
    assert.are.equal(string.pack("<ff", 0.25, -3), read_file(txt))
    assert.are.same({ 0.25, -3.0 }, checker.read(txt, "f32"))
    local bin = tmp_ext(".bin")
    checker.write(bin, values, "text")
    assert.are.equal("0.25\n-3\n", read_file(bin))
    assert.are.same({ 0.25, -3.0 }, checker.read(bin, "text"))
  end)

  it("writes host tensors through their Lua API, row-major", function()
    local p = tmp_ext(".txt")
    assert.are.equal(4, checker.write(p, gptoss.tensor.from({ { 1, 2 }, { 3.5, -4 } })))
    assert.are.equal("1\n2\n3.5\n-4\n", read_file(p))
    local t = gptoss.tensor.from({ 0.1, 0.2, 0.3 })
    local q = tmp_ext(".f32")
    checker.write(q, t)
    assert.are.same(t:totable(), checker.read(q))
    checker.write(q, gptoss.tensor.from({ { 5, 6 }, { 7, 8 } })[2])
    assert.are.same({ 7.0, 8.0 }, checker.read(q))
  end)

  it("reports raw files of a size that is not a multiple of 4, with the offset", function()
    local p = tmp_ext(".f32")
    write_file(p, string.pack("<ff", 1, 2) .. "\1\2\3")
    expect_error(function() checker.read(p) end,
      "checker.read: " .. p .. ": 11 bytes is not a multiple of 4 (raw little-endian fp32): 3 stray bytes at offset 8")
    write_file(p, "\0")
    expect_error(function() checker.read(p) end, "1 bytes is not a multiple of 4", "1 stray bytes at offset 0")
    local txt = tmp_ext(".txt")
    write_file(txt, "abcdef")
    expect_error(function() checker.read(txt, "f32") end, "6 bytes is not a multiple of 4")
    still_usable()
  end)

  it("reports bad arguments, missing files and failed writes", function()
    local p = tmp_ext(".txt")
    os.remove(p)
    expect_error(function() checker.read(p) end, ("checker.read: cannot open '%s': No such file or directory"):format(p))
    expect_error(function() checker.read(p, "raw") end, "checker.read: format must be \"text\" or \"f32\" (got raw)")
    expect_error(function() checker.read(nil) end, "checker.read: path must be a string (got nil)")
    expect_error(function() checker.write(p, { 1, "2" }) end, "checker.write: values[2] must be a number (got string)")
    expect_error(function() checker.write(p, "1 2") end,
      "checker.write: values must be a list of numbers or a gptoss tensor (got string)")
    expect_error(function() checker.write(p, { 1 }, "csv") end, "checker.write: format must be \"text\" or \"f32\" (got csv)")
    expect_error(function() checker.write(tmp_ext(".f32"), { 1, 1e39 }) end,
      "checker.write: values[2] = 1e+39 is beyond float32's range")
    assert.is_nil(io.open(p), "a rejected write created the file")
    expect_error(function() checker.write("/nonexistent-gptoss-dir/l.txt", { 1 }) end,
      "checker.write: cannot open '/nonexistent-gptoss-dir/l.txt' for writing: No such file or directory")
    local full = io.open("/dev/full", "wb")
    if full then -- Linux: every write fails with ENOSPC
      full:close()
      expect_error(function() checker.write("/dev/full", { 1, 2 }, "f32") end,
        "checker.write: writing '/dev/full' failed, the file may be incomplete: No space left on device")
    end
    still_usable()
  end)
end)

describe("checker.compare", function()
  it("passes equal lists, with the counts and a summary", function()
    local r = checker.compare({ 1, 2, 3 }, { 1, 2, 3 })
    assert.is_true(r.ok)
    assert.are.equal(3, r.count)
    assert.are.equal(0, r.mismatches)
    assert.are.equal(0, r.max_abs)
    assert.are.equal(0, r.max_rel)
    assert.is_nil(r.first)
    assert.are.equal(1e-6, r.atol)
    assert.are.equal(1e-5, r.rtol)
    assert.are.equal("OK: all 3 values match (max |diff| 0, max rel 0; atol 1e-06, rtol 1e-05)", r.message)
    assert.are.equal(r.message, r.summary)
    assert.is_true(checker.compare({}, {}).ok)
  end)

  it("passes a value exactly at atol + rtol * |expected| and fails the next double past it", function()
    -- powers of two keep every sum exact: bound = 0.25 + 0.5 * 2 = 1.25
    local opts = { atol = 0.25, rtol = 0.5 }
    assert.is_true(checker.compare({ 3.25 }, { 2 }, opts).ok)
    assert.is_true(checker.compare({ 0.75 }, { 2 }, opts).ok)
    local past = 3.25 + 2 ^ -51 -- one ulp above 3.25
    local r = checker.compare({ 1, past }, { 1, 2 }, opts)
    assert.is_false(r.ok)
    assert.are.same({ index = 2, got = past, expected = 2, diff = 1.25 + 2 ^ -51, bound = 1.25 }, r.first)
    assert.are.equal("first mismatch at element 2: got 3.25, expected 2 (|diff| 1.25 > bound 1.25)", r.message)
    assert.is_false(checker.compare({ 0.75 - 2 ^ -52 }, { 2 }, opts).ok) -- two ulps: 1.25 + 2^-52 is exact
    -- b is the reference: the bound scales with it, not with the value checked
    assert.is_true(checker.compare({ 2 }, { past }, opts).ok)
  end)

  it("uses atol 1e-6 and rtol 1e-5 by default", function()
    assert.is_true(checker.compare({ 100 + 0.5e-3 }, { 100 }).ok) -- bound 1.001e-3
    assert.is_false(checker.compare({ 100 + 1.5e-3 }, { 100 }).ok)
    assert.is_true(checker.compare({ 0.9e-6 }, { 0 }).ok)
    local r = checker.compare({ 2e-6 }, { 0 })
    assert.is_false(r.ok)
    assert.are.equal("first mismatch at element 1: got 2e-06, expected 0 (|diff| 2e-06 > bound 1e-06)", r.message)
    assert.is_true(checker.compare({ 1e-3 }, { 0 }, { atol = 1e-3, rtol = 0 }).ok)
    assert.is_false(checker.compare({ 1 + 2 ^ -52 }, { 1 }, { atol = 0, rtol = 0 }).ok)
  end)

  it("counts mismatches and reports the largest differences", function()
    local r = checker.compare({ 1, 5, 2, 10 }, { 1, 4, 2, 8 })
    assert.is_false(r.ok)
    assert.are.equal(4, r.count)
    assert.are.equal(2, r.mismatches)
    assert.are.equal(2, r.max_abs)
    assert.are.equal(0.25, r.max_rel)
    assert.are.equal(2, r.first.index)
    assert.are.equal("FAIL: 2 of 4 values differ (max |diff| 2, max rel 0.25; atol 1e-06, rtol 1e-05)", r.summary)
    assert.are.equal(INF, checker.compare({ 1 }, { 0 }).max_rel)
  end)

  it("never matches NaN, and matches an infinity only with the same one", function()
    for _, case in ipairs { { NAN, 1 }, { 1, NAN }, { NAN, NAN } } do
      local r = checker.compare({ 0, case[1] }, { 0, case[2] })
      assert.is_false(r.ok)
      assert.are.equal(2, r.first.index)
      assert.are.equal(0, r.max_abs) -- NaN pairs are left out of the maxima
      assert.truthy(r.message:find("^first mismatch at element 2: got %S+, expected %S+ %(NaN never matches%)$"),
        r.message)
    end
    assert.are.equal("first mismatch at element 1: got nan, expected 1 (NaN never matches)",
      checker.compare({ NAN }, { 1 }).message)
    assert.is_true(checker.compare({ INF, -INF }, { INF, -INF }).ok)
    for _, case in ipairs { { INF, -INF }, { 1, INF }, { INF, 1 }, { -INF, 1e300 } } do
      local r = checker.compare({ case[1] }, { case[2] }, { atol = 1, rtol = 1 })
      assert.is_false(r.ok, ("%s vs %s"):format(case[1], case[2]))
      assert.truthy(r.message:find("(an infinity matches only the same infinity)", 1, true), r.message)
    end
  end)

  it("fails lists of different lengths, naming both", function()
    local r = checker.compare({ 1, 2 }, { 1, 2, 3 })
    assert.is_false(r.ok)
    assert.is_nil(r.first)
    assert.are.equal(2, r.got_length)
    assert.are.equal(3, r.expected_length)
    assert.are.equal("length mismatch: got 2 values, expected 3", r.message)
    assert.are.equal("FAIL: length mismatch: got 2 values, expected 3 (atol 1e-06, rtol 1e-05)", r.summary)
  end)

  it("takes host tensors on either side", function()
    local t = gptoss.tensor.from({ 1, 2, 3 })
    assert.is_true(checker.compare(t, { 1, 2, 3 }).ok)
    assert.is_true(checker.compare({ 1, 2, 3 }, t).ok)
    assert.are.equal(3, checker.compare(gptoss.tensor.from({ 1, 2, 4 }), t).first.index)
  end)

  it("rejects bad tolerances and values, and stays usable", function()
    expect_error(function() checker.compare({ 1 }, { 1 }, { atol = -1 }) end,
      "checker.compare: atol must be a non-negative number (got -1)")
    expect_error(function() checker.compare({ 1 }, { 1 }, { rtol = NAN }) end,
      "checker.compare: rtol must be a non-negative number")
    expect_error(function() checker.compare({ 1 }, { 1 }, { rtol = "1" }) end,
      "checker.compare: rtol must be a non-negative number (got 1)")
    expect_error(function() checker.compare({ 1 }, { 1 }, { tol = 1 }) end,
      "checker.compare: unknown option 'tol' (known: atol, rtol)")
    expect_error(function() checker.compare({ 1 }, { 1 }, 1e-3) end, "checker.compare: options must be a table (got number)")
    expect_error(function() checker.compare({ 1, true }, { 1, 2 }) end, "checker.compare: got[2] must be a number (got boolean)")
    expect_error(function() checker.compare({ 1 }, nil) end,
      "checker.compare: expected must be a list of numbers or a gptoss tensor (got nil)")
    still_usable()
    cleanup_all()
  end)
end)

describe("examples/checker.lua", function()
  after_each(cleanup_all)

  local function runner() return H.runner("examples/checker.lua", pending) end
  -- a reference file, an equal one and one off at element 3
  local function files()
    local ref, same, off = tmp_ext(".txt"), tmp_ext(".txt"), tmp_ext(".f32")
    checker.write(ref, { 1, 2, 3, 4 })
    checker.write(same, { 1, 2, 3, 4 })
    checker.write(off, { 1, 2, 3.5, 4 })
    return ref, same, off
  end

  it("exits 0 on a match", function()
    local run = runner()
    local ref, same = files()
    local code, out, err = run { same, ref }
    assert.are.equal(0, code)
    assert.are.equal("OK: all 4 values match (max |diff| 0, max rel 0; atol 1e-06, rtol 1e-05)\n", out)
    assert.are.equal("", err)
  end)

  it("exits 1 on a mismatch, naming the first one, unless --atol/--rtol admit it", function()
    local run = runner()
    local ref, _, off = files()
    local code, out = run { off, ref }
    assert.are.equal(1, code)
    assert.are.equal("FAIL: 1 of 4 values differ (max |diff| 0.5, max rel 0.166666667; atol 1e-06, rtol 1e-05)\n"
      .. "first mismatch at element 3: got 3.5, expected 3 (|diff| 0.5 > bound 3.1e-05)\n", out)

    code, out = run { off, ref, "--atol", "0.5", "--rtol", "0" }
    assert.are.equal(0, code)
    assert.truthy(out:find("atol 0.5, rtol 0", 1, true), out)
  end)

  it("exits 1 on a length mismatch", function()
    local run = runner()
    local ref = files()
    local short = tmp_ext(".txt")
    checker.write(short, { 1, 2 })
    local code, out = run { short, ref }
    assert.are.equal(1, code)
    assert.are.equal("FAIL: length mismatch: got 2 values, expected 4 (atol 1e-06, rtol 1e-05)\n", out)
  end)

  it("reads both files in --format, whatever their extensions", function()
    local run = runner()
    local a, b = tmp_ext(".txt"), tmp_ext(".dat")
    checker.write(a, { 7, 8 }, "f32")
    checker.write(b, { 7, 8 }, "f32")
    assert.are.equal(0, (run { a, b, "--format", "f32" }))
    assert.are.equal(2, (run { a, b }))
  end)

  it("exits 2 on a file it cannot read", function()
    local run = runner()
    local ref, same = files()
    local missing = tmp_ext(".txt")
    local code, out, err = run { same, missing }
    assert.are.equal(2, code)
    assert.are.equal("", out)
    assert.are.equal(("checker.lua compare: checker.read: cannot open '%s': No such file or directory\n"):format(missing),
      err)

    local odd = tmp_ext(".f32")
    write_file(odd, "abcde")
    code, _, err = run { odd, ref }
    assert.are.equal(2, code)
    assert.truthy(err:find("5 bytes is not a multiple of 4", 1, true), err)
  end)

  it("exits 2 on bad arguments: the error first, then where the usage is", function()
    local run = runner()
    local ref, same = files()
    local cases = {
      { {}, "missing argument 'got'" },
      { { same }, "missing argument 'expected'" },
      { { same, ref, "--atol", "abc" }, "'abc' is not a non-negative number" },
      { { same, ref, "--rtol=-1" }, "'-1' is not a non-negative number" },
      { { same, ref, "--format", "csv" }, "argument for option '--format' must be one of 'text', 'f32'" },
      { { same, ref, "extra" }, "too many arguments" },
    }
    for _, case in ipairs(cases) do
      local code, out, err = run(case[1])
      assert.are.same({ 2, "", ("checker.lua compare: %s\nTry 'checker.lua compare --help' for usage.\n"):format(case[2]) },
        { code, out, err })
      -- the same with the subcommand named
      code, _, err = run { "compare", table.unpack(case[1]) }
      assert.are.equal(2, code)
      assert.truthy(err:find("checker.lua compare: " .. case[2], 1, true), err)
    end
  end)

  it("compares with the compare subcommand as without one", function()
    local run = runner()
    local ref, same, off = files()
    assert.are.equal(0, (run { "compare", same, ref }))
    local code, out = run { "compare", "--atol", "0.1", off, ref }
    assert.are.equal(1, code)
    assert.truthy(out:find("first mismatch at element 3: got 3.5, expected 3", 1, true), out)
    local help
    code, help = run { "--help" }
    assert.are.equal(0, code)
    assert.truthy(help:find("dump", 1, true) and help:find("compare", 1, true), help)
  end)
end)

describe("examples/checker.lua dump", function()
  after_each(cleanup_all)
  local function runner() return H.runner("examples/checker.lua", pending) end
  local TOKENS = { 5, 17, 9 }

  -- the logits of the last of TOKENS fed at positions 0.. on a CPU replica of the 7m
  local function direct(seed)
    local r = gptoss.synthetic("7m", { seed = seed }):replica { slots = 1, ctx = #TOKENS }
    return r:step { slots = { 1, 1, 1 }, positions = { 0, 1, 2 }, tokens = TOKENS }:logits()[3]
  end

  it("writes on the CPU the logits a step gives, in the format of the extension", function()
    local run = runner()
    local raw, text = tmp_ext(".f32"), tmp_ext(".txt")
    local code, out, err = run { "dump", "7m", "--seed-weights", "3", "--tokens", "5,17,9", "-o", raw, "--device", "cpu" }
    assert.are.same({ 0, "" }, { code, err })
    assert.truthy(out:find(("^wrote 201088 logits of token 9 at position 2 to %s, from gptoss%%.replica%%(cpu, ")
      :format(raw:gsub("%p", "%%%0"))), out)
    assert.are.equal(4 * 201088, #read_file(raw))
    local exact = { atol = 0, rtol = 0 }
    local r = checker.compare(checker.read(raw), direct(3), exact)
    assert.is_true(r.ok, r.message)
    code = run { "dump", "7m", "--seed-weights", "3", "--tokens", "5, 17, 9", "--output", text, "--device", "cpu" }
    assert.are.equal(0, code)
    r = checker.compare(checker.read(text), direct(3), exact)
    assert.is_true(r.ok, r.message)
    -- one token: position 0
    code = run { "dump", "7m", "--tokens", "9", "-o", raw, "--format", "text", "--device", "cpu" }
    assert.are.equal(0, code)
    local single = gptoss.synthetic("7m"):replica { slots = 1, ctx = 1 }
    r = checker.compare(checker.read(raw, "text"),
      single:step { slots = { 1 }, positions = { 0 }, tokens = { 9 } }:logits()[1], exact)
    assert.is_true(r.ok, r.message) -- seed: gptoss.DEFAULT_SEED
  end)

  it("dumps that compare passes for one model and fails for another seed", function()
    local run = runner()
    local a, b, c = tmp_ext(".f32"), tmp_ext(".txt"), tmp_ext(".f32")
    for _, case in ipairs { { a, "3" }, { b, "3" }, { c, "4" } } do
      assert.are.equal(0, (run { "dump", "7m", "--seed-weights", case[2], "--tokens", "5,17,9", "-o", case[1], "--device", "cpu" }))
    end
    local code, out = run { "compare", b, a }
    assert.are.equal(0, code)
    assert.are.equal("OK: all 201088 values match (max |diff| 0, max rel 0; atol 1e-06, rtol 1e-05)\n", out)
    code, out = run { "compare", c, a }
    assert.are.equal(1, code)
    local first = checker.compare(checker.read(c), checker.read(a)).first
    assert.truthy(out:find("^FAIL: %d+ of 201088 values differ"), out)
    assert.truthy(out:find(("\nfirst mismatch at element %d: got %.9g, expected %.9g ")
      :format(first.index, first.got, first.expected), 1, true), out)
  end)

  it("dumps a model file as the same synthetic model", function()
    local run = runner()
    local model, from_file = tmp_ext(".bin"), tmp_ext(".f32")
    gptoss.synthetic("7m", { seed = 3 }):save(model)
    assert.are.equal(0, (run { "dump", model, "--tokens", "5,17,9", "-o", from_file, "--device", "cpu" }))
    local r = checker.compare(checker.read(from_file), direct(3), { atol = 0, rtol = 0 })
    assert.is_true(r.ok, r.message)
  end)

  it("exits 2 on bad arguments and on what the model or the replica refuses, without a traceback", function()
    local run = runner()
    local out_path, missing = tmp_ext(".f32"), tmp_ext(".bin")
    local usage = "\nTry 'checker.lua dump --help' for usage.\n"
    local cases = {
      { { "dump", "--tokens", "1", "-o", out_path }, "checker.lua dump: missing argument 'model'" .. usage },
      { { "dump", "m.bin", "7m", "--tokens", "1", "-o", out_path }, "checker.lua dump: too many arguments" },
      { { "dump", "--synthetic", "7m", "--tokens", "1", "-o", out_path },
        "checker.lua dump: --synthetic 7m is now written 7m: a synthetic shape is named as the model" .. usage },
      { { "dump", "7m", "--seed", "3", "--tokens", "1", "-o", out_path },
        "checker.lua dump: --seed 3 is now written --seed-weights 3" .. usage },
      { { "dump", "7m", "-o", out_path }, "checker.lua dump: --tokens is required" .. usage },
      { { "dump", "7m", "--tokens", "1" }, "checker.lua dump: -o is required: the logits file to write" },
      { { "dump", "7m", "--tokens", "1,,2", "-o", out_path },
        "checker.lua dump: --tokens: '1,,2' is not a list of token ids (\"1,2,3\")" .. usage },
      { { "dump", "7m", "--tokens=-1", "-o", out_path }, "--tokens: '-1' is not a list of token ids" },
      { { "dump", "7m", "--tokens", "1", "-o", out_path, "--device=-1" },
        "--device: '-1' is not \"cpu\" or a GPU number from 0" },
      { { "dump", "7m", "--tokens", "1", "-o", out_path, "--weights", "fp16" },
        "argument for option '--weights' must be one of" },
      { { "dump", "9m", "--tokens", "1", "-o", out_path },
        "checker.lua dump: '9m' is neither a file, a directory nor a synthetic shape (7m, 20b, 20b-2l, 120b)\n" },
      { { "dump", missing, "--tokens", "1", "-o", out_path },
        ("checker.lua dump: load: cannot open model file '%s': No such file or directory\n"):format(missing) },
      { { "dump", "7m", "--tokens", "1,201088", "-o", out_path },
        "checker.lua dump: checker.dump: step: tokens[1] = 201088 is out of range 0..201087\n" },
      -- checked before the model is opened: a missing shape would say so otherwise
      { { "dump", "9m", "--tokens", "1", "-o", "/nonexistent-gptoss-dir/l.f32" },
        "checker.lua dump: -o: cannot write '/nonexistent-gptoss-dir/l.f32': No such file or directory\n" },
    }
    if #gptoss.devices() == 0 then
      cases[#cases + 1] = { { "dump", "7m", "--tokens", "1", "-o", out_path, "--device", "0" },
        "checker.lua dump: --device 0: this build sees no GPU here (--device cpu runs on the CPU)" }
    end
    for _, case in ipairs(cases) do
      local code, out, err = run(case[1])
      local what = table.concat(case[1], " ")
      assert.are.same({ 2, "" }, { code, out }, what)
      assert.truthy(err:find(case[2], 1, true), what .. "\n" .. err)
      assert.is_nil(err:find("traceback", 1, true), err)
      assert.is_nil(err:find("%.lua:%d+:"), err)
    end
    assert.is_nil(io.open(out_path), "a refused dump wrote a file")
  end)

  it("dumps on a GPU in fp32 what the CPU gives, within the course checker's tolerance #gpu", function()
    if #gptoss.devices() == 0 then pending("no GPU visible to this build (gptoss.devices() is empty)") end
    local run = runner()
    local gpu, cpu = tmp_ext(".f32"), tmp_ext(".f32")
    local code, out, err = run { "dump", "7m", "--tokens", "5,17,9", "-o", gpu, "--device", "0",
      "--weights", "fp32" }
    assert.are.equal(0, code, err)
    assert.truthy(out:find("weights fp32, kv fp32", 1, true), out)
    assert.are.equal(0, (run { "dump", "7m", "--tokens", "5,17,9", "-o", cpu, "--device", "cpu" }))
    code, out = run { "compare", gpu, cpu }
    assert.are.equal(0, code, out)
  end)
end)

describe("checker.dump", function()
  local m = gptoss.synthetic("7m", { seed = 7 })
  local V = m.config.vocab_size
  after_each(cleanup_all)

  it("writes the logits of (token, pos) that a step gives, in either format", function()
    local r = m:replica { slots = 2, ctx = 8 }
    local txt, raw = tmp_ext(".txt"), tmp_ext(".f32")
    local values = checker.dump(r, txt, { token = 13225, pos = 0, slot = 2 })
    assert.are.equal(V, #values)
    assert.are.equal(1, r:length(2))
    assert.are.equal(0, r:length(1))
    -- the same row again (position 0 rewritten), raw this time
    local again = checker.dump(r, raw, { token = 13225, pos = 0, slot = 2 })
    assert.are.same(values, again)
    assert.are.equal(4 * V, #read_file(raw))
    local from_text, from_raw = checker.read(txt), checker.read(raw)
    assert.are.same(values, from_raw)
    local r0 = checker.compare(from_text, from_raw, { atol = 0, rtol = 0 }) -- %.9g keeps float32s
    assert.is_true(r0.ok, r0.message)
    -- what a step on a fresh replica returns
    local direct = m:replica { slots = 1, ctx = 8 }:step { slots = { 1 }, positions = { 0 }, tokens = { 13225 } }:logits()[1]
    assert.is_true(checker.compare(direct, from_raw, { atol = 0, rtol = 0 }).ok)
  end)

  it("continues a slot's sequence, and refuses a position past it", function()
    local r = m:replica { slots = 1, ctx = 8 }
    local p = tmp_ext(".f32")
    checker.dump(r, p, { token = 5, pos = 0 })
    local second = checker.dump(r, p, { token = 6, pos = 1, format = "f32" })
    assert.are.equal(2, r:length(1))
    local ref = m:replica { slots = 1, ctx = 8 }:step { slots = { 1, 1 }, positions = { 0, 1 }, tokens = { 5, 6 } }:logits()[2]
    assert.is_true(checker.compare(second, ref, { atol = 0, rtol = 0 }).ok)
    local q = tmp_ext(".txt")
    expect_error(function() checker.dump(r, q, { token = 7, pos = 5 }) end,
      "checker.dump: step: positions[1] = 5 leaves a gap: slot 1 holds 2 positions, so the next one is 2")
    assert.are.equal(2, r:length(1))
    assert.is_nil(io.open(q), "a refused dump wrote a file")
    expect_error(function() checker.dump(r, q, { token = V, pos = 0 }) end, "checker.dump: step:", "token")
    expect_error(function() checker.dump(m, q, { token = 1, pos = 0 }) end,
      "checker.dump: expected a gptoss replica (got userdata)")
    expect_error(function() checker.dump(r, q, { token = 1 }) end, "checker.dump: pos must be an integer (got nil)")
    expect_error(function() checker.dump(r, q, { token = 1.5, pos = 0 }) end,
      "checker.dump: token must be an integer (got 1.5)")
    expect_error(function() checker.dump(r, q, { token = 1, pos = 0, slot = "1" }) end,
      "checker.dump: slot must be an integer (got 1)")
    expect_error(function() checker.dump(r, q, { token = 1, pos = 0, fmt = "f32" }) end,
      "checker.dump: unknown option 'fmt'")
    expect_error(function() checker.dump(r, q, { token = 1, pos = 0, format = "npy" }) end,
      "checker.dump: format must be \"text\" or \"f32\" (got npy)")
    expect_error(function() checker.dump(r, q) end, "checker.dump: options must be a table")
    -- still usable
    checker.dump(r, q, { token = 7, pos = 2 })
    assert.are.equal(3, r:length(1))
    assert.are.equal(V, #checker.read(q))
  end)

  it("passes a dump against itself and fails a perturbed copy at the perturbed element", function()
    local expected = tmp_ext(".txt")
    checker.dump(m:replica { slots = 1, ctx = 4 }, expected, { token = 200006, pos = 0 })
    local got = tmp_ext(".txt")
    checker.dump(m:replica { slots = 1, ctx = 4 }, got, { token = 200006, pos = 0 })
    local ref = checker.read(expected)
    local same = checker.compare(checker.read(got), ref)
    assert.is_true(same.ok, same.message)
    assert.are.equal(V, same.count)
    assert.are.equal(("OK: all %d values match (max |diff| 0, max rel 0; atol 1e-06, rtol 1e-05)"):format(V),
      same.summary)

    -- perturb two elements: one within the tolerance, one just outside
    local k, small = 123457, 98765
    local perturbed = {}
    for i = 1, V do perturbed[i] = ref[i] end
    perturbed[small] = ref[small] * (1 + 2e-6)
    perturbed[k] = ref[k] + 1e-3
    local bad = tmp_ext(".txt")
    checker.write(bad, perturbed)
    local back = checker.read(bad)
    local r = checker.compare(back, ref)
    assert.is_false(r.ok)
    assert.are.equal(1, r.mismatches)
    assert.are.equal(k, r.first.index)
    local diff, bound = math.abs(back[k] - ref[k]), 1e-6 + 1e-5 * math.abs(ref[k])
    assert.are.equal(("first mismatch at element %d: got %.9g, expected %.9g (|diff| %.9g > bound %.9g)")
      :format(k, back[k], ref[k], diff, bound), r.message)
    -- and the other way round: the reference decides the bound
    assert.are.equal(k, checker.compare(ref, back).first.index)
  end)
end)
