-- Host tensors (gptoss.tensor): construction, shape and dtype, 1-based indexing, row views that
-- share storage, argmax / max_abs_diff / allclose (the checks parity tests rely on), totable,
-- raw save/load, and the error cases. Files are written under os.tmpname() paths and removed.

local gptoss = require "gptoss"
local H = require "helpers"
local read_file, write_file, expect_error, tmp, cleanup = H.read_file, H.write_file, H.expect_error, H.tmp, H.cleanup
local T = gptoss.tensor

local NAN, INF = 0 / 0, math.huge

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end

describe("host tensors", function()
   after_each(cleanup)

   describe("construction", function()
      it("builds from nested tables with the inferred shape", function()
         local t = T.from({ { 1, 2, 3 }, { 4, 5, 6 } })
         assert.are.equal("f32", t.dtype)
         assert.are.same({ 2, 3 }, t.shape)
         assert.are.equal(2, t.ndim)
         assert.are.equal(6, t.numel)
         assert.are.equal(2, #t)
         assert.are.equal(6, t[2][3])
         assert.are.equal("gptoss.tensor(f32, {2, 3})", tostring(t))

         local c = T.from({ { { 1, 2 }, { 3, 4 }, { 5, 6 } }, { { 7, 8 }, { 9, 10 }, { 11, 12 } } }, "i32")
         assert.are.equal("i32", c.dtype)
         assert.are.same({ 2, 3, 2 }, c.shape)
         assert.are.equal(3, c.ndim)
         assert.are.equal(12, c.numel)
         assert.are.equal(11, c[2][3][1])
         assert.are.equal("gptoss.tensor(i32, {2, 3, 2})", tostring(c))

         local v = T.from({ 7 })
         assert.are.same({ 1 }, v.shape)
         assert.are.equal(1, #v)
      end)

      it("stores f32 values rounded to float32 and i32 values as integers", function()
         local t = T.from({ 0.1, 1 / 3, 1e-45, 3.4e38 })
         assert.are.equal(f32(0.1), t[1])
         assert.are.equal(f32(1 / 3), t[2])
         assert.are_not.equal(0.1, t[1])
         assert.are.equal(f32(1e-45), t[3]) -- the smallest subnormal
         assert.are.equal("float", math.type(t[1]))
         local i = T.from({ -2147483648, 2147483647, 0, 7.0 }, "i32")
         assert.are.equal(-2147483648, i[1])
         assert.are.equal(2147483647, i[2])
         assert.are.equal("integer", math.type(i[4]))
         assert.are.equal(7, i[4])
      end)

      it("makes zero tensors of a shape and dtype", function()
         local z = T.zeros({ 2, 3 })
         assert.are.equal("f32", z.dtype)
         assert.are.same({ 2, 3 }, z.shape)
         assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, z:totable())
         local zi = T.zeros({ 4 }, "i32")
         assert.are.equal("i32", zi.dtype)
         assert.are.same({ 0, 0, 0, 0 }, zi:totable())
         assert.are.equal("integer", math.type(zi[1]))
         local big = T.zeros({ 2, 2, 2, 2, 2, 2, 2, 2 })
         assert.are.equal(8, big.ndim)
         assert.are.equal(256, big.numel)
      end)

      it("rejects bad shapes, dtypes and values", function()
         expect_error(function() T.zeros({ 2, 0 }) end, "shape[2] must be a positive integer (got 0)")
         -- 2^64 elements: the count once wrapped to 0 and indexing wrote out of bounds
         expect_error(function() T.zeros({ 65536, 65536, 65536, 65536 }, "f32") end,
            "a shape of 4 dimensions this large holds more than 2^64 bytes")
         expect_error(function() T.load("/dev/null", "f32", { 65536, 65536, 65536, 65536 }) end,
            "tensor.load: a shape of 4 dimensions")
         expect_error(function() T.zeros({ -1 }) end, "shape[1] must be a positive integer")
         expect_error(function() T.zeros({ 1.5 }) end, "shape[1] must be a positive integer")
         expect_error(function() T.zeros({}) end, "shape must have 1..8 dimensions (got 0)")
         expect_error(function() T.zeros({ 1, 1, 1, 1, 1, 1, 1, 1, 1 }) end,
            "shape must have 1..8 dimensions (got 9)")
         expect_error(function() T.zeros({ 2 }, "f64") end, "invalid option 'f64'")
         expect_error(function() T.from({ 1, 2 }, "f16") end, "invalid option 'f16'")
         expect_error(function() T.from({}) end, "shape[1] must be a positive integer (got 0)")
         expect_error(function() T.from({ { 1, 2 }, { 3 } }) end, "ragged nested table")
         expect_error(function() T.from({ 1, { 2 } }) end, "value 2 must be a number")
         expect_error(function() T.from({ { 1 }, 2 }) end, "expected a table at depth 2")
         expect_error(function() T.from({ 1, "x" }) end, "value 2 must be a number")
         expect_error(function() T.from(5) end, "tensor.from: expected a table (got number)")
         expect_error(function() T.from({ 1.5 }, "i32") end, "32-bit integer")
         expect_error(function() T.from({ 2147483648 }, "i32") end, "32-bit integer")
      end)
   end)

   describe("indexing", function()
      it("is 1-based and bounds-checked", function()
         local t = T.from({ 10, 20, 30 })
         assert.are.equal(10, t[1])
         assert.are.equal(30, t[3])
         assert.are.equal(30, t[#t])
         expect_error(function() return t[0] end, "tensor index 0 is out of range 1..3")
         expect_error(function() return t[4] end, "tensor index 4 is out of range 1..3")
         expect_error(function() return t[-1] end, "tensor index -1 is out of range 1..3")
         expect_error(function() return t[1 << 32] end, "tensor index 4294967296 is out of range 1..3")
         local m = T.from({ { 1, 2 }, { 3, 4 } })
         expect_error(function() return m[3] end, "tensor index 3 is out of range 1..2")
         expect_error(function() return m[1][3] end, "tensor index 3 is out of range 1..2")
      end)

      it("assigns elements of 1-D tensors", function()
         local t = T.from({ 1, 2, 3 })
         t[2] = 2.5
         assert.are.equal(2.5, t[2])
         t[3] = "4" -- a numeric string converts, as in Lua arithmetic
         assert.are.equal(4, t[3])
         local i = T.from({ 1, 2 }, "i32")
         i[1] = -7
         assert.are.equal(-7, i[1])
         expect_error(function() t[4] = 1 end, "tensor index 4 is out of range 1..3")
         expect_error(function() t[0] = 1 end, "tensor index 0 is out of range 1..3")
         expect_error(function() t[1] = "x" end, "tensor element must be a number (got string)")
         expect_error(function() t[1] = {} end, "tensor element must be a number (got table)")
         expect_error(function() t[1] = nil end, "tensor element must be a number (got nil)")
         expect_error(function() i[1] = 1.5 end, "tensor element must be a 32-bit integer")
         expect_error(function() i[1] = 1 << 40 end, "tensor element must be a 32-bit integer")
         expect_error(function() t.foo = 1 end, "only integer indices can be assigned")
         expect_error(function() T.from({ { 1 } })[1] = 1 end, "assign elements of a 1-D tensor")
         assert.are.same({ 1, 2.5, 4 }, t:totable())
      end)

      it("gives row views that share storage with the parent", function()
         local m = T.from({ { 1, 2, 3 }, { 4, 5, 6 } })
         local r = m[2]
         assert.are.same({ 3 }, r.shape)
         assert.are.equal(1, r.ndim)
         assert.are.equal(3, r.numel)
         r[1] = 40
         assert.are.equal(40, m[2][1])
         assert.are.same({ { 1, 2, 3 }, { 40, 5, 6 } }, m:totable())
         m[1][3] = 30 -- through a temporary view
         assert.are.equal(30, m[1][3])
         -- views of views, 3-D
         local c = T.from({ { { 1, 2 }, { 3, 4 } }, { { 5, 6 }, { 7, 8 } } }, "i32")
         local plane = c[2]
         assert.are.same({ 2, 2 }, plane.shape)
         plane[2][1] = 70
         assert.are.equal(70, c[2][2][1])
         assert.are.same({ 1, 2, 3, 4, 5, 6, 70, 8 },
            { c[1][1][1], c[1][1][2], c[1][2][1], c[1][2][2], c[2][1][1], c[2][1][2], c[2][2][1], c[2][2][2] })
         assert.are.equal("i32", plane.dtype)
      end)

      it("keeps the storage alive while a view exists", function()
         local r = T.from({ { 1, 2 }, { 3, 4 } })[2]
         collectgarbage()
         collectgarbage()
         assert.are.equal(3, r[1])
         r[2] = 9
         assert.are.same({ 3, 9 }, r:totable())
      end)

      it("returns nil for unknown string keys", function()
         local t = T.from({ 1 })
         assert.is_nil(t.nonexistent)
      end)
   end)

   describe("argmax", function()
      it("returns the 1-based index of the first maximum", function()
         assert.are.equal(1, T.from({ 5 }):argmax())
         assert.are.equal(3, T.from({ 1, 2, 9, 4 }):argmax())
         assert.are.equal(2, T.from({ 1, 7, 3, 7, 7 }):argmax())
         assert.are.equal(1, T.from({ 2, 2, 2 }):argmax())
         assert.are.equal(4, T.from({ -5, -3, -4, -1 }):argmax())
         assert.are.equal(2, T.from({ -INF, INF, INF }):argmax())
         assert.are.equal(3, T.from({ 4, 1, 8, 8 }, "i32"):argmax())
      end)

      it("works over the flattened elements of N-D tensors and views", function()
         local m = T.from({ { 1, 9, 3 }, { 9, 5, 6 } })
         assert.are.equal(2, m:argmax())
         assert.are.equal(1, m[2]:argmax())
         assert.are.equal(3, T.from({ { 1, 2 }, { 8, 3 } }):argmax())
      end)

      it("never picks a NaN", function()
         assert.are.equal(2, T.from({ NAN, 1, NAN }):argmax())
         assert.are.equal(3, T.from({ 1, NAN, 2 }):argmax())
         assert.are.equal(1, T.from({ NAN, NAN }):argmax())
      end)
   end)

   describe("max_abs_diff", function()
      it("is the largest absolute difference", function()
         local a = T.from({ 1, 2, 3 })
         assert.are.equal(0, a:max_abs_diff(T.from({ 1, 2, 3 })))
         assert.are.equal(0.5, a:max_abs_diff(T.from({ 1, 2.5, 3 })))
         assert.are.equal(4, a:max_abs_diff(T.from({ 1, 2.5, -1 })))
         assert.are.equal(f32(0.1), T.from({ 0 }):max_abs_diff(T.from({ -0.1 })))
         assert.are.equal(3, T.from({ { 1, 2 }, { 3, 4 } }):max_abs_diff(T.from({ { 1, 2 }, { 3, 7 } })))
         assert.are.equal(2, T.from({ 1, 2 }, "i32"):max_abs_diff(T.from({ 3, 2 }, "i32")))
         -- mixed dtypes compare values
         assert.are.equal(0.5, T.from({ 1, 2 }, "i32"):max_abs_diff(T.from({ 1, 2.5 })))
      end)

      it("is NaN when either side has a NaN", function()
         local d = T.from({ 1, NAN, 3 }):max_abs_diff(T.from({ 1, 2, 30 }))
         assert.is_true(d ~= d)
         d = T.from({ 1, 2 }):max_abs_diff(T.from({ 1, NAN }))
         assert.is_true(d ~= d)
      end)

      it("treats equal infinities as equal and unequal ones as infinitely apart", function()
         assert.are.equal(0, T.from({ INF, -INF }):max_abs_diff(T.from({ INF, -INF })))
         assert.are.equal(INF, T.from({ INF }):max_abs_diff(T.from({ 1 })))
         assert.are.equal(INF, T.from({ INF }):max_abs_diff(T.from({ -INF })))
      end)

      it("rejects shape mismatches and non-tensors", function()
         expect_error(function() T.from({ 1, 2 }):max_abs_diff(T.from({ 1, 2, 3 })) end,
            "max_abs_diff: shapes differ: {2} vs {3}")
         expect_error(function() T.from({ { 1, 2 } }):max_abs_diff(T.from({ 1, 2 })) end,
            "shapes differ: {1, 2} vs {2}")
         expect_error(function() T.from({ 1 }):max_abs_diff({ 1 }) end, "gptoss.tensor expected")
      end)
   end)

   describe("allclose", function()
      it("passes within tolerance and returns just true", function()
         local a = T.from({ 1, 2, 3 })
         local r = table.pack(a:allclose(T.from({ 1, 2, 3 })))
         assert.are.equal(1, r.n)
         assert.is_true(r[1])
         assert.is_true(a:allclose(T.from({ 1, 2.001, 3 }), 0.01, 0))
         assert.is_true(T.from({ INF, -INF }):allclose(T.from({ INF, -INF })))
      end)

      it("fails with the first failing 1-based index", function()
         local ok, i = T.from({ 1, 2, 3, 4 }):allclose(T.from({ 1, 2.1, 3.5, 4 }), 0.01, 0)
         assert.is_false(ok)
         assert.are.equal(2, i)
         ok, i = T.from({ { 1, 2 }, { 3, 4 } }):allclose(T.from({ { 1, 2 }, { 3, 4.5 } }), 0.1, 0)
         assert.is_false(ok)
         assert.are.equal(4, i)
      end)

      it("uses numpy's rule |a - b| <= atol + rtol * |b| (asymmetric in b)", function()
         -- |1 - 2| = 1 <= 0 + 0.5 * |2|
         assert.is_true(T.from({ 1 }):allclose(T.from({ 2 }), 0, 0.5))
         -- |2 - 1| = 1 > 0 + 0.5 * |1|
         local ok, i = T.from({ 2 }):allclose(T.from({ 1 }), 0, 0.5)
         assert.is_false(ok)
         assert.are.equal(1, i)
         -- atol and rtol add up: 1 <= 0.5 + 0.25 * 2
         assert.is_true(T.from({ 1 }):allclose(T.from({ 2 }), 0.5, 0.25))
         assert.is_false(T.from({ 1 }):allclose(T.from({ 2 }), 0.5, 0.24))
         -- the boundary itself passes
         assert.is_true(T.from({ 0 }):allclose(T.from({ 0.5 }), 0.5, 0))
      end)

      it("defaults to atol = rtol = 1e-5", function()
         assert.is_true(T.from({ 1000 }):allclose(T.from({ 1000.0078125 }))) -- 0.0078 <= 1e-5 + 0.01
         assert.is_false(T.from({ 1000 }):allclose(T.from({ 1000.0625 })))
         assert.is_true(T.from({ 0 }):allclose(T.from({ 2 ^ -17 })))     -- 7.6e-6 <= 1e-5
         assert.is_false(T.from({ 0 }):allclose(T.from({ 2 ^ -16 })))    -- 1.5e-5 > 1e-5
      end)

      it("fails on NaN", function()
         local ok, i = T.from({ 1, NAN }):allclose(T.from({ 1, NAN }), 1, 1)
         assert.is_false(ok)
         assert.are.equal(2, i)
         ok, i = T.from({ 1, 2 }):allclose(T.from({ NAN, 2 }), 1, 1)
         assert.is_false(ok)
         assert.are.equal(1, i)
      end)

      it("rejects negative tolerances and shape mismatches", function()
         expect_error(function() T.from({ 1 }):allclose(T.from({ 1 }), -1) end, "atol must be >= 0")
         expect_error(function() T.from({ 1 }):allclose(T.from({ 1 }), 0, -1) end, "rtol must be >= 0")
         expect_error(function() T.from({ 1 }):allclose(T.from({ 1, 2 })) end,
            "allclose: shapes differ: {1} vs {2}")
      end)
   end)

   describe("totable", function()
      it("returns nested Lua tables of the shape", function()
         local values = { { { 1, 2 }, { 3, 4 }, { 5, 6 } }, { { 7, 8 }, { 9, 10 }, { 11, 12 } } }
         assert.are.same(values, T.from(values):totable())
         assert.are.same(values, T.from(values, "i32"):totable())
         assert.are.same({ 9, 10 }, T.from(values)[2][2]:totable())
         assert.are.same({ 0.5, -2 }, T.from({ 0.5, -2 }):totable())
         for _, v in ipairs(T.from({ 1, 2 }, "i32"):totable()) do
            assert.are.equal("integer", math.type(v))
         end
      end)
   end)

   describe("save and load", function()
      it("round-trips f32 as raw little-endian float32", function()
         local t = T.from({ { 1.5, -2, 0.1 }, { 3e10, -0.0, 7 } })
         local p = tmp()
         t:save(p)
         assert.are.equal(string.pack("<ffffff", 1.5, -2, 0.1, 3e10, -0.0, 7), read_file(p))
         local u = T.load(p, "f32", { 2, 3 })
         assert.are.same({ 2, 3 }, u.shape)
         assert.are.equal("f32", u.dtype)
         assert.are.equal(0, t:max_abs_diff(u))
         local flat = T.load(p) -- defaults: f32, 1-D
         assert.are.same({ 6 }, flat.shape)
         assert.are.equal("f32", flat.dtype)
         assert.are.equal(f32(0.1), flat[3])
      end)

      it("round-trips i32 as raw little-endian int32", function()
         local t = T.from({ 1, -1, 2147483647, -2147483648 }, "i32")
         local p = tmp()
         t:save(p)
         assert.are.equal(string.pack("<i4i4i4i4", 1, -1, 2147483647, -2147483648), read_file(p))
         local u = T.load(p, "i32")
         assert.are.same(t:totable(), u:totable())
         assert.are.equal("i32", u.dtype)
         local m = T.load(p, "i32", { 2, 2 })
         assert.are.same({ { 1, -1 }, { 2147483647, -2147483648 } }, m:totable())
      end)

      it("loads files written by other tools", function()
         local p = tmp()
         write_file(p, string.pack("<fff", 0.25, -8, 1e-3))
         assert.are.same({ 0.25, -8, f32(1e-3) }, T.load(p, "f32"):totable())
      end)

      it("saves only the elements of a view", function()
         local m = T.from({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
         local p = tmp()
         m[2]:save(p)
         assert.are.equal(string.pack("<ff", 3, 4), read_file(p))
      end)

      it("rejects a size that does not match the shape", function()
         local p = tmp()
         T.from({ 1, 2, 3, 4, 5, 6 }):save(p)
         expect_error(function() T.load(p, "f32", { 4 }) end,
            "tensor.load:", p, "has 24 bytes, expected 16")
         expect_error(function() T.load(p, "f32", { 2, 4 }) end, "has 24 bytes, expected 32")
         write_file(p, "abcdef") -- not a multiple of 4
         expect_error(function() T.load(p, "f32") end, "tensor.load:", "has 6 bytes, not a multiple of 4 (the bytes "
            .. "of one f32 value)")
         write_file(p, "abc")
         expect_error(function() T.load(p, "i32") end, "tensor.load:", "has 3 bytes, not a multiple of 4 (the bytes "
            .. "of one i32 value)")
         expect_error(function() T.load(p, "f32", { 1 }) end, "has 3 bytes, expected 4 (1 values of 4 bytes)")
         write_file(p, "")
         expect_error(function() T.load(p, "f32") end, "tensor.load:", "has 0 bytes: no values to load")
      end)

      it("refuses a file of more than 2^31-1 values without a shape, before reading it", function()
         -- sparse: 8 GiB + 4 bytes that take no disk; once read whole into a dimension past int
         local p = tmp()
         local f = assert(io.open(p, "wb"))
         assert(f:seek("set", 1 << 33))
         f:write("\0\0\0\0")
         f:close()
         expect_error(function() T.load(p, "f32") end,
            "tensor.load:", "has 8589934596 bytes, more than 2^31-1 values of 4 bytes: give a shape")
      end)

      it("refuses a named pipe and a directory before opening them, within a second", function()
         local fifo = H.fifo()
         H.expect_error_soon(("require('gptoss').tensor.load(%q, 'f32')"):format(fifo), nil,
            ("tensor.load: '%s' is a named pipe, not a regular file"):format(fifo))
         local dir = H.tmpdir()
         expect_error(function() T.load(dir, "f32") end,
            ("tensor.load: '%s' is a directory, not a regular file"):format(dir))
      end)

      it("names what a failing allocation was for", function()
         -- sparse: 2 TiB of values that take no disk, more than the child may allocate
         local p = tmp()
         local f = assert(io.open(p, "wb"))
         assert(f:seek("set", (1 << 41) - 4))
         f:write("\0\0\0\0")
         f:close()
         -- AddressSanitizer warns of the allocation it refuses: in a log of the child's own, not the suite's
         local log = H.SANITIZED and H.tmpdir()
         H.expect_error_soon(("require('gptoss').tensor.load(%q, 'f32', { 1 << 30, 1 << 9 })"):format(p),
            H.LIMIT_MEMORY .. (log and (":log_path=" .. log .. "/asan") or ""),
            ("tensor.load: out of host memory for the 549755813888 values of '%s'"):format(p))
         for _, name in ipairs(log and H.list_dir(log) or {}) do
            for line in read_file(log .. "/" .. name):gmatch("[^\n]+") do
               assert(line:find("WARNING: AddressSanitizer failed to allocate 0x20000000000 bytes", 1, true), line)
            end
         end
      end)

      it("reports missing files, bad dtypes and bad shapes", function()
         local p = tmp()
         os.remove(p)
         expect_error(function() T.load(p, "f32") end, ("tensor.load: cannot open '%s'"):format(p))
         T.from({ 1 }):save(p)
         expect_error(function() T.load(p, "f64") end, "invalid option 'f64'")
         expect_error(function() T.load(p, "f32", 4) end, "tensor.load: shape must be a table")
         expect_error(function() T.load(p, "f32", { 0 }) end,
            "tensor.load: shape[1] must be a positive integer")
         expect_error(function() T.from({ 1 }):save("/nonexistent-gptoss-dir/t.bin") end,
            "tensor:save: cannot write '/nonexistent-gptoss-dir/t.bin'")
      end)

      it("closes the file when the shape is rejected", function()
         local stat = io.open("/proc/self/stat")
         if not stat then pending("needs /proc/self/stat (Linux) to count open files") end
         local pid = stat:read("n")
         stat:close()
         local function open_fds()
            local h = io.popen("ls /proc/" .. pid .. "/fd | wc -l")
            local n = h:read("n")
            h:close()
            return n
         end
         local p = tmp()
         T.from({ 1 }):save(p)
         collectgarbage()
         local before = open_fds()
         for _ = 1, 20 do pcall(T.load, p, "f32", { 0 }) end
         collectgarbage()
         -- a leak in the loads keeps 20 open; one either way is the process opening or collecting
         -- something of its own between the counts (seen both ways)
         local after = open_fds()
         assert.is_true(math.abs(after - before) <= 1,
            ("file descriptors leaked by tensor.load: %d, then %d"):format(before, after))
      end)
   end)
end)
