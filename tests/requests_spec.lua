-- The course's getp files (docs/course.md#request-file): request files read as the course's
-- read_inputfile does (getline line ends, empty prompts for missing lines, the per-prompt
-- buffer), output files written byte for byte as its write_outputfile, read back strictly,
-- and every error naming the file and the line.
local requests = require "gptoss.requests"
local H = require "helpers"
local read_file, write_file, expect_error, tmp, cleanup = H.read_file, H.write_file, H.expect_error, H.tmp, H.cleanup

-- docs/course.md#request-buffers with the defaults: max_token_length 128, steps 1024
local LIMIT = 128 * 1025 - 1

local function request_file(s)
  local p = tmp()
  write_file(p, s)
  return p
end

-- the module answers normally after an error
local function still_usable()
  local prompts = requests.read(request_file("1\nok\n"))
  assert.are.same({ "ok" }, prompts)
end

describe("requests.read", function()
  after_each(cleanup)

  it("reads the count and one prompt per line, raw", function()
    local p = request_file("3\nHello\nHello world\n  spaces, tabs\tand \"quotes\" \\n stay  \n")
    local prompts, warnings = requests.read(p)
    assert.are.same({ "Hello", "Hello world", "  spaces, tabs\tand \"quotes\" \\n stay  " }, prompts)
    assert.are.same({}, warnings)
  end)

  it("strips only the \\n: a CRLF file keeps its \\r in every prompt, and says so", function()
    local p = request_file("2\r\nHello\r\nworld\r\n")
    local prompts, warnings = requests.read(p)
    assert.are.same({ "Hello\r", "world\r" }, prompts)
    assert.are.equal(1, #warnings)
    assert.truthy(warnings[1]:find(p .. ": lines 2, 3 end in \"\\r\"", 1, true), warnings[1])
  end)

  it("takes a last line without a newline, as getline does", function()
    local prompts, warnings = requests.read(request_file("2\nfirst\nsecond"))
    assert.are.same({ "first", "second" }, prompts)
    assert.are.same({}, warnings)
  end)

  it("keeps UTF-8 and emoji prompts byte for byte", function()
    local text = "ฉันรักทะเล 🌊 naïve"
    assert.are.same({ text }, (requests.read(request_file("1\n" .. text .. "\n"))))
  end)

  it("reads only the first count lines and reports the rest", function()
    local p = request_file("2\na\nb\nc\nd\n")
    local prompts, warnings = requests.read(p)
    assert.are.same({ "a", "b" }, prompts)
    assert.are.same({ p .. ": 2 lines after the 2 prompts are ignored, as the course reads only the count" },
      warnings)
  end)

  it("accepts a count of 0 and blanks around the count, as atoi does", function()
    assert.are.same({}, (requests.read(request_file("0\n"))))
    assert.are.same({ "x" }, (requests.read(request_file("  1 \nx\n"))))
    assert.are.same({ "x" }, (requests.read(request_file("+1\nx\n"))))
  end)

  it("pads missing prompts with empty strings as the course does, with a warning", function()
    local p = request_file("5\none\ntwo\nthree\n")
    local prompts, warnings = requests.read(p)
    assert.are.same({ "one", "two", "three", "", "" }, prompts)
    assert.are.same({ p .. ": count says 5 but only 3 prompts follow; 2 empty prompts kept as the course does" },
      warnings)
    local _, w1 = requests.read(request_file("2\nonly\n"))
    assert.truthy(w1[1]:find("count says 2 but only 1 prompt follows; 1 empty prompt kept as the course does",
      1, true), w1[1])
  end)

  it("warns about empty prompt lines and NUL bytes, which the course's encode cannot use", function()
    local p = request_file("3\na\n\nb\0c\n")
    local prompts, warnings = requests.read(p)
    assert.are.same({ "a", "", "b\0c" }, prompts)
    assert.are.equal(2, #warnings)
    assert.truthy(warnings[1]:find(p .. ": empty prompt on line 3:", 1, true), warnings[1])
    assert.truthy(warnings[2]:find(p .. ": line 4 holds a NUL byte", 1, true), warnings[2])
  end)

  it("warns when the course's int buffer size would overflow", function()
    -- 16385 requests x 128 x 1025 bytes is past 2^31 - 1 (docs/course.md#request-buffers)
    local p = request_file("16385\n")
    local prompts, warnings = requests.read(p)
    assert.are.equal(16385, #prompts)
    assert.are.equal("", prompts[16385])
    assert.truthy(warnings[2]:find("16385 requests x 131200 bytes per prompt = 2149712000 bytes overflows", 1, true),
      warnings[2])
  end)

  it("holds a prompt to the course's buffer: max_token_length x (steps + 1) - 1 bytes", function()
    local fits = ("a"):rep(LIMIT)
    assert.are.equal(LIMIT, #requests.read(request_file("1\n" .. fits .. "\n"))[1])
    local p = request_file("2\nshort\n" .. fits .. "b\n")
    expect_error(function() requests.read(p) end,
      "requests.read: " .. p .. ": line 3: prompt 2 is 131200 bytes",
      "at most 131199 bytes per prompt", "max_token_length 128 x (steps 1024 + 1) bytes, less 1 for the NUL")
    -- the \r of a CRLF line is one of the bytes copied
    local crlf = request_file("1\r\n" .. fits .. "\r\n")
    expect_error(function() requests.read(crlf) end, "line 2: prompt 1 is 131200 bytes")
    still_usable()
  end)

  it("sizes the buffer from the steps and max_token_length options", function()
    local p = request_file("1\n" .. ("x"):rep(20) .. "\n")
    assert.are.equal(20, #requests.read(p, { max_token_length = 7, steps = 2 })[1]) -- 7 x 3 - 1 = 20
    expect_error(function() requests.read(p, { max_token_length = 4, steps = 4 }) end,
      "prompt 1 is 20 bytes", "at most 19 bytes per prompt", "max_token_length 4 x (steps 4 + 1)")
    expect_error(function() requests.read(p, { steps = 0 }) end, "requests.read: steps must be a positive integer (got 0)")
    expect_error(function() requests.read(p, { max_token_length = 1.5 }) end,
      "requests.read: max_token_length must be a positive integer (got 1.5)")
    -- the course's int buffer size, not a Lua product that wraps (2^62 x 4 was 0: "at most -1 bytes")
    expect_error(function() requests.read(p, { max_token_length = 1 << 62, steps = 3 }) end,
      "requests.read: max_token_length 4611686018427387904 x (steps 3 + 1) bytes exceeds the course's int "
      .. "(at most 2147483647)")
    expect_error(function() requests.read(p, { steps = math.maxinteger }) end,
      "requests.read: max_token_length 128 x (steps 9223372036854775807 + 1) bytes exceeds the course's int")
    expect_error(function() requests.read(p, { step = 3 }) end, "requests.read: unknown option 'step'")
    expect_error(function() requests.read(p, 5) end, "requests.read: options must be a table (got number)")
    still_usable()
  end)

  it("reports a missing file, with the OS message", function()
    local p = tmp()
    os.remove(p)
    expect_error(function() requests.read(p) end,
      ("requests.read: cannot open '%s': No such file or directory"):format(p))
    expect_error(function() requests.read(42) end, "requests.read: path must be a string (got number)")
    still_usable()
  end)

  it("refuses a named pipe (within a second) and a directory before opening them", function()
    local fifo = H.fifo()
    for _, fn in ipairs({ "read", "read_output" }) do
      H.expect_error_soon(("require('gptoss.requests').%s(%q)"):format(fn, fifo), nil,
        ("requests.%s: '%s' is a named pipe, not a regular file"):format(fn, fifo))
    end
    local dir = H.tmpdir()
    expect_error(function() requests.read(dir) end,
      ("requests.read: '%s' is a directory, not a regular file"):format(dir))
    still_usable()
  end)

  it("reports a missing, non-numeric, negative or oversized count on line 1", function()
    for _, case in ipairs {
      { "", "line 1: missing request count" },
      { "\nHello\n", "line 1: missing request count" },
      { "  \r\n", "line 1: missing request count" },
      { "three\na\n", "line 1: request count must be a non-negative integer (got \"three\")" },
      { "3 prompts\na\n", "line 1: request count must be a non-negative integer (got \"3 prompts\")" },
      { "1.5\na\n", "line 1: request count must be a non-negative integer (got \"1.5\")" },
      { "-2\na\n", "line 1: request count is negative (-2)" },
      { "2147483648\n", "line 1: request count 2147483648 does not fit the course's int (at most 2147483647)" },
      { "2000000\na\n", "line 1: count says 2000000 but only 1 prompt follows: refusing to pad 1999999 empty prompts (at most 1048576)" },
      { "99999999999999999999\n", "line 1: request count 99999999999999999999 does not fit the course's int" },
      { "\1\n", "line 1: request count must be a non-negative integer (got \"\\x01\")" },
    } do
      local p = request_file(case[1])
      expect_error(function() requests.read(p) end, "requests.read: " .. p .. ": " .. case[2])
    end
    still_usable()
  end)
end)

describe("requests.write", function()
  after_each(cleanup)

  it("writes the course's bytes: ids joined by single spaces, \\n after every line, no terminator", function()
    local p = tmp()
    assert.are.equal(31, requests.write(p, { { 13225, 2375, 11 }, {}, { 200002 }, { 0, 199999 } }))
    assert.are.equal("13225 2375 11\n\n200002\n0 199999\n", read_file(p))
  end)

  it("takes a final -1 terminator and leaves it out, as the course's writer does", function()
    local p = tmp()
    requests.write(p, { { 5, 6, -1 }, { -1 } })
    assert.are.equal("5 6\n\n", read_file(p))
  end)

  it("writes an empty file for no requests", function()
    local p = tmp()
    write_file(p, "old contents")
    assert.are.equal(0, requests.write(p, {}))
    assert.are.equal("", read_file(p))
  end)

  it("round-trips through read_output", function()
    local outputs = { { 1, 2, 3 }, {}, { 2147483647 }, { 0 } }
    local ids = {}
    for i = 1, 1024 do ids[i] = (i * 7919) % 201088 end
    outputs[#outputs + 1] = ids
    local p = tmp()
    requests.write(p, outputs)
    assert.are.same(outputs, requests.read_output(p))
  end)

  it("checks its arguments before touching the file", function()
    local p = tmp()
    write_file(p, "keep me")
    for _, case in ipairs {
      { 5, "requests.write: outputs must be a list of lists of token ids (got number)" },
      { { { 1 }, "1 2" }, "requests.write: outputs[2] must be a list of token ids (got string)" },
      { { { 1, 2.0 } }, "requests.write: outputs[1][2] must be an integer token id (got float 2.0)" },
      { { { "7" } }, "requests.write: outputs[1][1] must be an integer token id (got string 7)" },
      { { { 1, -1, 2 } }, "requests.write: outputs[1][2] = -1: token ids are non-negative" },
      { { {}, { -5 } }, "requests.write: outputs[2][1] = -5: token ids are non-negative" },
      { { { 2147483648 } }, "requests.write: outputs[1][1] = 2147483648 does not fit the course's int32" },
    } do
      expect_error(function() requests.write(p, case[1]) end, case[2])
    end
    expect_error(function() requests.write(nil, {}) end, "requests.write: path must be a string (got nil)")
    assert.are.equal("keep me", read_file(p))
    requests.write(p, { { 3 } })
    assert.are.equal("3\n", read_file(p))
  end)

  it("raises with the path and the OS message when the file cannot be written", function()
    expect_error(function() requests.write("/nonexistent-gptoss-dir/out.txt", { { 1 } }) end,
      "requests.write: cannot open '/nonexistent-gptoss-dir/out.txt' for writing: No such file or directory")
    local full = io.open("/dev/full", "wb")
    if full then -- Linux: every write fails with ENOSPC
      full:close()
      expect_error(function() requests.write("/dev/full", { { 1, 2, 3 } }) end,
        "requests.write: writing '/dev/full' failed, the file may be incomplete: No space left on device")
    end
    local p = tmp()
    requests.write(p, { { 9 } })
    assert.are.equal("9\n", read_file(p))
  end)

  it("replaces a regular file by renaming a finished one over it, never writing it in place", function()
    local dir = H.tmpdir()
    local p, link = dir .. "/out.txt", dir .. "/old.txt"
    write_file(p, "old output\n")
    assert(os.execute(("ln %s %s"):format(H.shell_quote(p), H.shell_quote(link))))
    requests.write(p, { { 4, 5 } })
    assert.are.equal("4 5\n", read_file(p))
    assert.are.equal("old output\n", read_file(link)) -- the old file, untouched: the new one took its name
    assert.are.same({ "old.txt", "out.txt" }, H.list_dir(dir)) -- no out.txt.tmp left
  end)
end)

describe("requests.write_requests", function()
  after_each(cleanup)

  it("writes a request file that requests.read reads back", function()
    local p = tmp()
    local prompts = { "Hello", "", "ฉันรักทะเล 🌊 naïve\r", "a\0b" }
    requests.write_requests(p, prompts)
    assert.are.equal("4\nHello\n\nฉันรักทะเล 🌊 naïve\r\na\0b\n", read_file(p))
    assert.are.same(prompts, (requests.read(p)))
    requests.write_requests(p, {})
    assert.are.equal("0\n", read_file(p))
    assert.are.same({}, (requests.read(p)))
  end)

  it("refuses what is no list of one-line prompts, leaving the file untouched", function()
    local p = tmp()
    write_file(p, "keep me")
    expect_error(function() requests.write_requests(p, "Hello") end,
      "requests.write_requests: prompts must be a list of strings (got string)")
    expect_error(function() requests.write_requests(p, { "a", 5 }) end,
      "requests.write_requests: prompts[2] must be a string (got number)")
    expect_error(function() requests.write_requests(p, { "a\nb" }) end,
      "requests.write_requests: prompts[1] holds a newline, which would end its line")
    expect_error(function() requests.write_requests(nil, {}) end, "requests.write_requests: path must be a string (got nil)")
    assert.are.equal("keep me", read_file(p))
  end)
end)

describe("requests.read_output", function()
  after_each(cleanup)

  it("reads empty lines as empty generations and an empty file as no requests", function()
    local p = tmp()
    write_file(p, "\n1 2\n\n")
    assert.are.same({ {}, { 1, 2 }, {} }, requests.read_output(p))
    write_file(p, "")
    assert.are.same({}, requests.read_output(p))
  end)

  it("rejects anything the course's writer does not produce, naming the line", function()
    for _, case in ipairs {
      { "1 2\n3", "line 2: no newline at the end of the file" },
      { "1 2 \n", "line 1: trailing space (the course writes none; the T0 code did)" },
      { "1\n 2\n", "line 2: leading space" },
      { "1  2\n", "line 1: two spaces in a row" },
      { "1 2\r\n", "line 1: carriage return in the line" },
      { "5\n1 2 -1\n", "line 2: negative value -1 at column 5 (the course never writes its -1 terminator)" },
      { "1 x2 3\n", "line 1: \"x2\" at column 3 is not a token id" },
      { "1\t2\n", "line 1: \"1\\t2\" at column 1 is not a token id" },
      { "2147483648\n", "line 1: 2147483648 at column 1 does not fit the course's int32 token ids" },
    } do
      local p = tmp()
      write_file(p, case[1])
      expect_error(function() requests.read_output(p) end, "requests.read_output: " .. p .. ": " .. case[2])
    end
    local p = tmp()
    os.remove(p)
    expect_error(function() requests.read_output(p) end,
      ("requests.read_output: cannot open '%s': No such file or directory"):format(p))
    write_file(p, "4 5\n")
    assert.are.same({ { 4, 5 } }, requests.read_output(p))
  end)
end)
