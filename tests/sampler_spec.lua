-- The sampler (gptoss.sampler): greedy in both modes (ties, tensor rows, a 201088-wide row); the
-- course mode reproduced op by op in Lua (xorshift64*, float32 softmax, multinomial and top-p) and
-- checked against hand-computed cases; the default mode reproduced in Lua (weights, filters,
-- (seed, position) draws) and checked statistically against exact distributions (temperature,
-- top_k, top_p with its >= boundary, min_p, their order, ties, -inf); seeds and positions;
-- logprobs; and every bad input. Float32 arithmetic is emulated with string.pack("<f"): +, -, *, /
-- done in double and rounded once to float give the float result.

local gptoss = require "gptoss"
local H = require "helpers"
local expect_error = H.expect_error
local T = gptoss.tensor

local NAN, INF = 0 / 0, math.huge
local V = 201088

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local function expf(x) return f32(math.exp(x)) end

local mix64 = H.mix64 -- SplitMix64's finaliser (synth.h gptoss_mix64)
local uniform = H.sample_uniform -- gptoss_sample_uniform: the default mode's u from (seed, position) only

-- Inverses of those bijections, to build seeds that give a chosen draw (exact boundary cases).
local function inv_mul(a) -- a odd: a * inv_mul(a) == 1 mod 2^64 (Newton: 3, 6, 12, ... bits)
   local x = a
   for _ = 1, 6 do x = x * (2 - a * x) end
   return x
end
local function inv_xorshr(y, k) -- y = x ~ (x >> k)
   local x = y
   for _ = 1, 64 // k + 1 do x = y ~ (x >> k) end
   return x
end
local function inv_xorshl(y, k) -- y = x ~ (x << k)
   local x = y
   for _ = 1, 64 // k + 1 do x = y ~ (x << k) end
   return x
end
local function inv_mix64(z)
   z = inv_xorshr(z, 31) * inv_mul(0x94D049BB133111EB)
   z = inv_xorshr(z, 27) * inv_mul(0xBF58476D1CE4E5B9)
   return inv_xorshr(z, 30)
end

-- A default-mode seed whose draw at position 0 is u = k * 2^-53.
local function seed_for_u(k)
   local key = inv_mix64(k << 11) - 0x9E3779B97F4A7C15
   return inv_mix64(key) ~ 0x243F6A8885A308D3
end

-- Test data: a counter-based generator of our own (math.random's state belongs to busted).
local function rng(seed)
   local ctr = mix64(seed)
   return function()
      ctr = ctr + 0x9E3779B97F4A7C15
      return (mix64(ctr) >> 11) * 2 ^ -53
   end
end

local function normal(r)
   return math.sqrt(-2 * math.log(1 - r())) * math.cos(2 * math.pi * r())
end

-- A row of n in [lo, hi] float32 logits with some ties and, when with_neginf, some -inf.
local function random_row(r, lo, hi, scale, with_neginf)
   local n = lo + math.floor(r() * (hi - lo + 1))
   local x = {}
   for i = 1, n do
      local c = r()
      if i > 1 and c < 0.15 then
         x[i] = x[1 + math.floor(r() * (i - 1))]
      elseif with_neginf and c > 0.95 then
         x[i] = -INF
      else
         x[i] = f32(normal(r) * scale)
      end
   end
   if with_neginf then x[1 + math.floor(r() * n)] = f32(normal(r) * scale) end -- never all -inf
   return x
end

-- The first maximum, 0-based.
local function argmax0(x)
   local best = 1
   for i = 2, #x do
      if x[i] > x[best] then best = i end
   end
   return best - 1
end

---------------------------------------------------------------------------------------------------
-- The course sampler, op by op (run.cpp): xorshift64*, the course softmax, multinomial, top-p.

local function xorshift(state)
   state = state ~ (state >> 12)
   state = state ~ (state << 25)
   state = state ~ (state >> 27)
   local u32 = (state * 0x2545F4914F6CDD1D) >> 32
   return state, (u32 >> 8) / 16777216.0
end

-- max in double, each exponential a float, the sum in double, then float quotients
local function course_softmax(p)
   local max = p[1]
   for i = 2, #p do
      if p[i] > max then max = p[i] end
   end
   local sum = 0.0
   for i = 1, #p do
      p[i] = expf(f32(p[i] - max))
      sum = sum + p[i]
   end
   for i = 1, #p do p[i] = f32(p[i] / sum) end
end

local function course_ref(seed, temperature, top_p)
   local temp, tp = f32(temperature), f32(top_p)
   local ref = { state = seed }

   -- what does not depend on the coin: probabilities, and for top-p the sorted kept prefix
   local function prepare(x)
      local n = #x
      local p = {}
      for i = 1, n do p[i] = f32(x[i] / temp) end
      course_softmax(p)
      local prep = { x = x, p = p, multinomial = tp <= 0 or tp >= 1 or n == 1 }
      if prep.multinomial then return prep end
      local cutoff = f32(f32(1 - tp) / (n - 1))
      local kept = {} -- 0-based ids
      for i = 1, n do
         if p[i] >= cutoff then kept[#kept + 1] = i - 1 end
      end
      table.sort(kept, function(a, b)
         local pa, pb = p[a + 1], p[b + 1]
         if pa ~= pb then return pa > pb end
         return a < b
      end)
      local cum, last = 0.0, #kept
      for i = 1, #kept do
         cum = f32(cum + p[kept[i] + 1])
         if cum > tp then
            last = i
            break
         end
      end
      prep.kept, prep.cum, prep.last = kept, cum, last
      return prep
   end

   -- x is reused as it was (the cache is keyed by the table) when sampled again
   function ref.sample(x)
      local n = #x
      if temp == 0 then return argmax0(x) end
      local prep = ref.prep
      if not prep or prep.x ~= x then
         prep = prepare(x)
         ref.prep = prep
      end
      local p, coin = prep.p, nil
      ref.state, coin = xorshift(ref.state)
      if prep.multinomial then
         local cdf = 0.0
         for i = 1, n do
            cdf = f32(cdf + p[i])
            if coin < cdf then return i - 1 end
         end
         return n - 1
      end
      local kept = prep.kept
      local r, cdf = f32(coin * prep.cum), 0.0
      for i = 1, prep.last do
         cdf = f32(cdf + p[kept[i] + 1])
         if r < cdf then return kept[i] end
      end
      return kept[prep.last]
   end
   return ref
end

-- A course seed whose first coin is coin (a multiple of 2^-24): the product's top 24 bits are the
-- coin's, its low bit keeps the state non-zero; then undo the three xorshifts.
local function course_seed_for(coin)
   local state = ((math.floor(coin * 16777216) << 40) | 1) * inv_mul(0x2545F4914F6CDD1D)
   return inv_xorshr(inv_xorshl(inv_xorshr(state, 27), 25), 12)
end

---------------------------------------------------------------------------------------------------
-- The default mode per docs/api.md#default-mode, written from the rules (no candidate shortcut).

-- 0-based ids ordered by (logit desc, id asc)
local function ranks_of(x)
   local r = {}
   for i = 1, #x do r[i] = i - 1 end
   table.sort(r, function(a, b)
      local xa, xb = x[a + 1], x[b + 1]
      if xa ~= xb then return xa > xb end
      return a < b
   end)
   return r
end

-- w_i = expf((x_i - m) / T) in float; total in id order (double)
local function weights(x, temperature)
   local temp = f32(temperature)
   local m = -INF
   for i = 1, #x do
      if x[i] > m then m = x[i] end
   end
   local w, total = {}, 0.0
   for i = 1, #x do
      w[i] = expf(f32(f32(x[i] - m) / temp))
      total = total + w[i]
   end
   return w, total
end

local DOC_ORDER = { "top_k", "top_p", "min_p" }

-- The kept prefix length of the ranks, filters applied in `order` (each one to what the previous
-- kept; top_p's reference mass is that of the current set, in id order while nothing is cut).
local function kept_len(w, total, ranks, o, order)
   local n, len = #ranks, #ranks
   for _, f in ipairs(order or DOC_ORDER) do
      if f == "top_k" and (o.top_k or 0) > 0 then
         len = math.min(len, o.top_k)
      elseif f == "top_p" and (o.top_p or 1) > 0 and (o.top_p or 1) < 1 then
         local z = 0.0
         if len == n then
            z = total
         else
            for r = 1, len do z = z + w[ranks[r] + 1] end
         end
         local goal, cum = o.top_p * z, 0.0
         for r = 1, len do
            cum = cum + w[ranks[r] + 1]
            if cum >= goal then
               len = r
               break
            end
         end
      elseif f == "min_p" and (o.min_p or 0) > 0 then
         local mp = o.min_p
         while len > 1 and w[ranks[len] + 1] < mp do len = len - 1 end
      end
   end
   return len
end

-- the set of kept 0-based ids, as a sorted list
local function kept_ids(x, o, order)
   local w, total = weights(x, o.temperature or 1)
   local ranks = ranks_of(x)
   local len = kept_len(w, total, ranks, o, order)
   local ids = {}
   for r = 1, len do ids[r] = ranks[r] end
   table.sort(ids)
   return ids
end

-- A draw function u -> id for the row x under options o (seed-free: the walk of docs/api.md#default-mode rule 4).
local function default_ref(x, o, ranks)
   local w, total = weights(x, o.temperature or 1)
   ranks = ranks or ranks_of(x)
   local len = kept_len(w, total, ranks, o)
   local kept = {}
   for r = 1, len do kept[ranks[r] + 1] = true end
   local sum = 0.0
   for i = 1, #x do
      if kept[i] then sum = sum + w[i] end
   end
   local ids, runs, run = {}, {}, 0.0
   for i = 1, #x do
      if kept[i] and w[i] > 0 then
         run = run + w[i]
         ids[#ids + 1], runs[#runs + 1] = i - 1, run
      end
   end
   return function(u)
      local target = u * sum
      if not (runs[#runs] > target) then return ids[#ids] end
      local lo, hi = 1, #runs -- the first running sum above the target
      while lo < hi do
         local mid = (lo + hi) // 2
         if runs[mid] > target then hi = mid else lo = mid + 1 end
      end
      return ids[lo]
   end
end

-- Exact (double) probabilities of the kept ids, renormalised: {[id] = p}.
local function expected_dist(x, o, order)
   local temp = o.temperature or 1
   local m = -INF
   for i = 1, #x do
      if x[i] > m then m = x[i] end
   end
   local p, z = {}, 0.0
   for _, id in ipairs(kept_ids(x, o, order)) do
      local q = math.exp((x[id + 1] - m) / temp)
      if q > 0 then
         p[id] = q
         z = z + q
      end
   end
   for id, q in pairs(p) do p[id] = q / z end
   return p
end

-- Draws positions 0..n-1 and returns {[id] = count}.
local function histogram(s, row, n)
   local counts = {}
   for pos = 0, n - 1 do
      local id = s:sample(row, pos)
      counts[id] = (counts[id] or 0) + 1
   end
   return counts
end

-- Empirical frequencies within 5 standard errors of p, and no id outside p's support.
local function assert_freqs(counts, p, n, what)
   for id, c in pairs(counts) do
      assert((p[id] or 0) > 0, ("%s: id %d drawn %d times, outside the kept set"):format(what, id, c))
   end
   for id, q in pairs(p) do
      local f = (counts[id] or 0) / n
      local sigma = math.sqrt(q * (1 - q) / n)
      assert(math.abs(f - q) <= 5 * sigma + 1e-12,
         ("%s: id %d frequency %.5f, expected %.5f (5 sigma = %.5f)"):format(what, id, f, q, 5 * sigma))
   end
end

-- The test could tell p from q: some id differs by more than 10 standard errors.
local function assert_distinct(p, q, n, what)
   for id = 0, 63 do
      local a, b = p[id] or 0, q[id] or 0
      local sigma = math.sqrt(math.max(a * (1 - a), 1 / n) / n)
      if math.abs(a - b) > 10 * sigma then return end
   end
   error(what .. ": the two distributions are too close for the test to separate them")
end

local function logs(probs)
   local x = {}
   for i, q in ipairs(probs) do x[i] = f32(q > 0 and math.log(q) or -INF) end
   return x
end

-- A 201088-wide row: a real logits row of the synthetic 7m model, its values and its ranks,
-- computed once.
local real_row, real_x, real_ranks
local function real_logits()
   if not real_row then
      real_row = gptoss.synthetic("7m", { seed = 1 }):replica({ slots = 1, ctx = 4 })
         :step({ slots = { 1 }, positions = { 0 }, tokens = { 13225 } }):logits()[1]
      real_x = real_row:totable()
      real_ranks = ranks_of(real_x)
   end
   return real_row, real_x, real_ranks
end

describe("sampler", function()
   after_each(function() collectgarbage() end)

   describe("parameters", function()
      it("has the documented defaults in both modes and reports them as fields", function()
         local s = gptoss.sampler({})
         assert.are.equal("default", s.mode)
         assert.are.equal(1, s.temperature)
         assert.are.equal(1, s.top_p)
         assert.are.equal(0, s.top_k)
         assert.are.equal(0, s.min_p)
         assert.are.equal(0, s.position)
         assert.is_nil(s.logprobs)
         assert.is_nil(s.state) -- the xorshift state is the course mode's only
         assert.are.equal("integer", math.type(s.seed))
         assert.are_not.equal(s.seed, gptoss.sampler({}).seed) -- a fresh random seed each time

         local t = gptoss.sampler({ temperature = 0.7, top_p = 0.9, top_k = 5, min_p = 0.05, seed = -3,
            logprobs = 4 })
         assert.are.equal(0.7, t.temperature)
         assert.are.equal(0.9, t.top_p)
         assert.are.equal(5, t.top_k)
         assert.are.equal(0.05, t.min_p)
         assert.are.equal(-3, t.seed) -- 2^64 - 3 as the C side's uint64
         assert.are.equal(4, t.logprobs)
         assert.are.equal("gptoss.sampler(default, temperature=0.7, top_p=0.9, top_k=5, min_p=0.05)",
            tostring(t))

         local before = os.time()
         local c = gptoss.sampler({ mode = "course" })
         local after = os.time()
         assert.are.equal("course", c.mode)
         assert.are.equal(0, c.temperature)
         assert.are.equal(0.9, c.top_p)
         assert.are.equal(0, c.top_k)
         assert.are.equal(0, c.min_p)
         assert.is_true(c.seed >= before and c.seed <= after, "seed absent: (unsigned)time(NULL)")
         assert.are.equal(c.seed, c.state)
         local c0 = gptoss.sampler({ mode = "course", seed = 0, temperature = 1 })
         assert.is_true(c0.seed >= before and c0.seed <= os.time(), "seed 0: (unsigned)time(NULL)")
         local c5 = gptoss.sampler({ mode = "course", seed = 5 })
         assert.are.equal(5, c5.seed)
         assert.are.equal(5, c5.state)
      end)

      it("clamps a top_k beyond any row to the largest int (no filter either way)", function()
         local s = gptoss.sampler({ top_k = 2 ^ 40, temperature = 0 })
         assert.are.equal(2147483647, s.top_k)
         assert.are.equal(2, s:sample({ 0, 1, 5, 2 }))
      end)

      it("refuses use after garbage collection instead of crashing", function()
         local s = gptoss.sampler({ seed = 1 })
         getmetatable(s).__gc(s)
         getmetatable(s).__gc(s) -- twice is harmless
         expect_error(function() s:sample({ 1, 2 }) end, "sampler: used after it was garbage-collected")
         expect_error(function() return s.temperature end, "used after it was garbage-collected")
         expect_error(function() return tostring(s) end, "used after it was garbage-collected")
      end)

      it("gptoss.sampler() without options works like gptoss.sampler{}", function()
         local s = gptoss.sampler()
         assert.are.equal("default", s.mode)
         assert.are.equal(1, s.temperature)
      end)
   end)

   describe("greedy (temperature 0)", function()
      it("takes the first maximum in both modes, drawing nothing", function()
         local rows = {
            { 1, 3, 2, 3, 0 },
            { -INF, -1, -1, -INF },
            { 5 },
            { 0, -0.0, 0 }, -- -0 == 0: the first
            { -INF, 2, 7, 7, 7, 1e30 },
         }
         local expect = { 1, 1, 0, 0, 5 }
         local d = gptoss.sampler({ temperature = 0, top_k = 1, top_p = 0.5, min_p = 0.5, seed = 1 })
         local c = gptoss.sampler({ mode = "course", seed = 99 }) -- course default temperature is 0
         for _ = 1, 3 do
            for i, row in ipairs(rows) do
               assert.are.equal(expect[i], d:sample(row))
               assert.are.equal(expect[i], c:sample(row))
               assert.are.equal(expect[i], c:sample(T.from(row)))
            end
         end
         assert.are.equal(99, c.state) -- no xorshift draw at temperature 0
         assert.are.equal(30, c.position)
      end)

      it("reads tensor rows: a 1-D tensor, a row view at an offset, a {1, V} tensor", function()
         local m = T.from({ { 9, 1, 1, 1 }, { 0, 4, 8, 8 }, { 1, 1, 1, 2 } })
         local d = gptoss.sampler({ temperature = 0 })
         assert.are.equal(0, d:sample(m[1]))
         assert.are.equal(2, d:sample(m[2])) -- the view's own storage offset, not row 1
         assert.are.equal(3, d:sample(m[3]))
         assert.are.equal(1, d:sample(T.from({ { 0, 3, 3 } })))
         assert.are.equal(2, d:sample(T.from({ { { 0, 1, 5, 2 } } })))
      end)

      it("handles a 201088-wide random row with a tie for the maximum", function()
         local r = rng(11)
         local t = T.zeros({ V })
         for i = 1, V do t[i] = normal(r) * 4 end
         t[150001], t[170001], t[3] = 100, 100, 99.99
         local d = gptoss.sampler({ temperature = 0 })
         local c = gptoss.sampler({ mode = "course", temperature = 0, seed = 3 })
         assert.are.equal(150000, d:sample(t))
         assert.are.equal(150000, c:sample(t))
         assert.are.equal(3, c.state)
         local big = T.zeros({ 2, V })
         big[2][V] = 1
         assert.are.equal(V - 1, d:sample(big[2]))
         assert.are.equal(0, d:sample(big[1])) -- all zero: the first
      end)

      it("takes the argmax of a real 201088-wide logits row", function()
         local row, x = real_logits()
         assert.are.equal(V, #x)
         local want = argmax0(x)
         assert.are.equal(row:argmax() - 1, want)
         assert.are.equal(want, gptoss.sampler({ temperature = 0 }):sample(row))
         assert.are.equal(want, gptoss.sampler({ mode = "course", seed = 1 }):sample(row))
         assert.are.equal(want, gptoss.sampler({ temperature = 0 }):sample(x))
      end)
   end)

   describe("course mode", function()
      it("reproduces the Lua xorshift64* + float32 re-implementation draw by draw", function()
         local configs = {
            { seed = 1, temperature = 1, top_p = 0 },
            { seed = 42, temperature = 0.7, top_p = 1 },
            { seed = -1, temperature = 1.3, top_p = 0.5 },
            { seed = 0x9E3779B97F4A7C15, temperature = 1, top_p = 0.9 },
            { seed = 7, temperature = 0.5, top_p = 0.9 },
            { seed = 123456789, temperature = 2, top_p = 0.95 },
            { seed = 31337, temperature = 1, top_p = 0.5 },
            { seed = 2, temperature = 0.8, top_p = 0.3 },
         }
         local paths = { multinomial = 0, top_p = 0 }
         for ci, o in ipairs(configs) do
            local s = gptoss.sampler({ mode = "course", seed = o.seed, temperature = o.temperature,
               top_p = o.top_p })
            local ref = course_ref(o.seed, o.temperature, o.top_p)
            local r = rng(1000 + ci)
            for draw = 1, 500 do
               local x = random_row(r, 5, 40, 1 + 2 * r(), ci % 2 == 0)
               local want = ref.sample(x)
               local got = s:sample(draw % 3 == 0 and T.from(x) or x)
               if got ~= want then
                  error(("config %d (seed %d, T %g, top_p %g), draw %d: C %d, Lua %d"):format(
                     ci, o.seed, o.temperature, o.top_p, draw, got, want))
               end
               assert.are.equal(ref.state, s.state)
            end
            local tp = f32(o.top_p)
            local path = (tp <= 0 or tp >= 1) and "multinomial" or "top_p"
            paths[path] = paths[path] + 1
         end
         assert.is_true(paths.multinomial >= 2 and paths.top_p >= 5)
      end)

      it("matches the Lua re-implementation on rows of one and two tokens and on a real row", function()
         local s = gptoss.sampler({ mode = "course", seed = 77, temperature = 1, top_p = 0.9 })
         local ref = course_ref(77, 1, 0.9)
         local rows = { { 3 }, { 0, 0 }, { 1, 2 }, { -INF, 5 }, { 0.25 } } -- one token: multinomial
         for k = 1, 40 do
            local x = rows[k % #rows + 1]
            assert.are.equal(ref.sample(x), s:sample(x))
         end
         assert.are.equal(ref.state, s.state)
         local row, x = real_logits()
         for _, tp in ipairs({ 0.9, 1 }) do
            local big = gptoss.sampler({ mode = "course", seed = 5, temperature = 1, top_p = tp })
            local bref = course_ref(5, 1, tp)
            for _ = 1, 5 do assert.are.equal(bref.sample(x), big:sample(row)) end
            assert.are.equal(bref.state, big.state)
         end
      end)

      it("follows a hand-computed top-p and multinomial case", function()
         -- Probabilities 0.15, 0.5, 0.05, 0.3 for ids 0..3, given as log-probabilities; at
         -- temperature 1 the course softmax gives them back (to float rounding).
         local x = logs({ 0.15, 0.5, 0.05, 0.3 })
         -- top_p 0.7: cutoff = (1 - 0.7) / (4 - 1) = 0.1, so id 2 (0.05) is dropped; sorted:
         --   id 1 (0.5), id 3 (0.3), id 0 (0.15); cum 0.5 (not > 0.7), 0.8 > 0.7: stop, cum = 0.8.
         --   r = coin * 0.8: id 1 while r < 0.5, i.e. coin < 0.625, else id 3 (r < 0.8 always).
         --   ids 0 and 2 never come.
         -- top_p 0.9: cutoff 0.1 / 3 keeps all four; cum 0.5, 0.8, 0.95 > 0.9: prefix {1, 3, 0}.
         --   r = coin * 0.95: id 1 if coin < 0.5/0.95 = 0.5263, id 3 if coin < 0.8/0.95 = 0.8421,
         --   else id 0; id 2 never.
         -- top_p 1 (and 0): the float CDF in id order 0.15, 0.65, 0.70, 1.0:
         --   id 0 if coin < 0.15, id 1 if < 0.65, id 2 if < 0.70, else id 3.
         local cases = {
            { top_p = 0.7, bounds = { 0.625 }, ids = { 1, 3 } },
            { top_p = 0.9, bounds = { 0.5 / 0.95, 0.8 / 0.95 }, ids = { 1, 3, 0 } },
            { top_p = 1, bounds = { 0.15, 0.65, 0.70 }, ids = { 0, 1, 2, 3 } },
            { top_p = 0, bounds = { 0.15, 0.65, 0.70 }, ids = { 0, 1, 2, 3 } },
         }
         for _, case in ipairs(cases) do
            local seed = 2024
            local s = gptoss.sampler({ mode = "course", seed = seed, temperature = 1, top_p = case.top_p })
            local state, seen, checked = seed, {}, 0
            for _ = 1, 400 do
               local coin
               state, coin = xorshift(state)
               local want = case.ids[#case.ids]
               local near = false
               for k = #case.bounds, 1, -1 do
                  if coin < case.bounds[k] then want = case.ids[k] end
                  near = near or math.abs(coin - case.bounds[k]) < 1e-5
               end
               local got = s:sample(x)
               if not near then -- a coin this close to a boundary depends on float rounding
                  assert.are.equal(want, got, ("top_p %g, coin %.9f"):format(case.top_p, coin))
                  checked = checked + 1
               end
               seen[got] = true
            end
            assert.is_true(checked >= 390)
            for _, id in ipairs(case.ids) do
               assert.is_true(seen[id], ("top_p %g: id %d never came"):format(case.top_p, id))
            end
            local n = 0
            for _ in pairs(seen) do n = n + 1 end
            assert.are.equal(#case.ids, n)
            assert.are.equal(state, s.state)
         end
      end)

      it("keeps the top token when nothing reaches the top-p cutoff (run.cpp reads out of bounds)", function()
         -- top_p 0.1 on 5 tokens: cutoff = 0.9 / 4 = 0.225, above every probability (about 0.2)
         local flat = gptoss.sampler({ mode = "course", seed = 7, temperature = 1, top_p = 0.1 })
         for _ = 1, 20 do assert.are.equal(0, flat:sample({ 0, 0, 0, 0, 0 })) end
         for _ = 1, 20 do assert.are.equal(1, flat:sample({ 0, 0.01, 0, 0, 0 })) end
         for _ = 1, 20 do assert.are.equal(3, flat:sample({ 0, 0, 0, 0.02, 0.01 })) end
         local two = gptoss.sampler({ mode = "course", seed = 9, temperature = 1, top_p = 0.3 })
         for _ = 1, 20 do assert.are.equal(0, two:sample({ 1, 1 })) end
      end)

      it("compares coin < cdf strictly, on exact coins and exact probabilities", function()
         -- two equal logits: p = 1 / 2 = 0.5 exactly; the cdf is 0.5, 1.0
         for _, case in ipairs({
            { coin = 0.5, x = { 0, 0 }, id = 1 },              -- 0.5 < 0.5 fails: the second token
            { coin = 0.5 - 2 ^ -24, x = { 0, 0 }, id = 0 },
            { coin = 0, x = { -INF, 0, 0 }, id = 1 },          -- cdf 0 after the -inf token: not < 0
            { coin = 1 - 2 ^ -24, x = { 0, 0, -INF }, id = 1 }, -- the largest coin
         }) do
            local seed = course_seed_for(case.coin)
            local state, coin = xorshift(seed)
            assert.are.equal(case.coin, coin) -- the seed built by inversion gives that coin
            -- multinomial (top_p 1) and top-p (0.9: both halves kept, cum 1.0, r = coin * 1.0)
            for _, tp in ipairs({ 1, 0.9 }) do
               local s = gptoss.sampler({ mode = "course", seed = seed, temperature = 1, top_p = tp })
               assert.are.equal(case.id, s:sample(case.x), ("coin %.9g, top_p %g"):format(case.coin, tp))
               assert.are.equal(state, s.state)
            end
         end
         -- top-p stops when cum EXCEEDS top_p: logits {0, 0}, top_p 0.5: cutoff (1 - 0.5) / 1 = 0.5
         -- keeps both (p >= cutoff); cum 0.5 is not > 0.5, so the prefix is both tokens, cum 1.0:
         -- id 0 for coin < 0.5, id 1 above (stopping at cum = 0.5 would always give id 0).
         for _, case in ipairs({ { 0.25, 0 }, { 0.5, 1 }, { 0.75, 1 }, { 0.5 - 2 ^ -24, 0 } }) do
            local s = gptoss.sampler({ mode = "course", seed = course_seed_for(case[1]), temperature = 1,
               top_p = 0.5 })
            assert.are.equal(case[2], s:sample({ 0, 0 }), ("coin %.9g"):format(case[1]))
         end
      end)

      it("is reproducible from its seed, and seeds differ", function()
         local r = rng(5)
         local rows = {}
         for i = 1, 200 do rows[i] = random_row(r, 5, 20, 2, false) end
         local function run(seed, top_p)
            local s = gptoss.sampler({ mode = "course", seed = seed, temperature = 1, top_p = top_p })
            local ids = {}
            for i, x in ipairs(rows) do ids[i] = s:sample(x) end
            return table.concat(ids, ","), s.state
         end
         for _, tp in ipairs({ 0.9, 1 }) do
            local a, sa = run(17, tp)
            local b, sb = run(17, tp)
            local c, sc = run(18, tp)
            assert.are.equal(a, b)
            assert.are.equal(sa, sb)
            assert.are_not.equal(a, c)
            assert.are_not.equal(sa, sc)
         end
      end)
   end)

   describe("default mode", function()
      it("reproduces the Lua re-implementation of the rules draw by draw", function()
         local configs = {
            { temperature = 1 },
            { temperature = 0.6, top_k = 3 },
            { temperature = 1.4, top_p = 0.8 },
            { temperature = 1, min_p = 0.2 },
            { temperature = 0.9, top_k = 8, top_p = 0.9, min_p = 0.05 },
            { temperature = 2, top_k = 1 },
            { temperature = 0.3, top_p = 0.5, min_p = 0.01 },
            { temperature = 1, top_k = 50, top_p = 0.95 },
         }
         for ci, o in ipairs(configs) do
            local seed = 7000 + ci
            local s = gptoss.sampler({ seed = seed, temperature = o.temperature, top_k = o.top_k,
               top_p = o.top_p, min_p = o.min_p })
            local r = rng(ci)
            for draw = 0, 299 do
               local x = random_row(r, 3, 40, 1 + 2 * r(), true)
               local pos = draw * 7 + ci
               local want = default_ref(x, o)(uniform(seed, pos))
               local got = s:sample(draw % 2 == 0 and x or T.from(x), pos)
               if got ~= want then
                  error(("config %d, draw %d, position %d: C %d, Lua %d"):format(ci, draw, pos, got, want))
               end
            end
         end
      end)

      it("reproduces the rules on a real 201088-wide row (filters over many candidates)", function()
         local row, x, ranks = real_logits()
         local configs = {
            { temperature = 1, top_p = 0.9 }, -- a prefix of ~137000 ranks
            { temperature = 0.5, top_k = 50 },
            { temperature = 1, top_k = 1000, top_p = 0.5, min_p = 0.2 },
         }
         for ci, o in ipairs(configs) do
            local draw = default_ref(x, o, ranks)
            local s = gptoss.sampler({ seed = ci, temperature = o.temperature, top_k = o.top_k,
               top_p = o.top_p, min_p = o.min_p })
            for pos = 0, 15 do
               assert.are.equal(draw(uniform(ci, pos)), s:sample(row, pos),
                  ("config %d, position %d"):format(ci, pos))
            end
         end
      end)

      it("ranks long rows of ties, -0 and -inf as short ones (the radix-sorted path)", function()
         -- 6000 tokens from six values: every rank list passes 4096 entries and is full of ties
         local values = { -0.0, 0.0, 0.5, -1, 1, -INF }
         local r = rng(4242)
         local x = {}
         for i = 1, 6000 do x[i] = values[1 + math.floor(r() * #values)] end
         for ci, o in ipairs({ { temperature = 1, top_p = 0.5 }, { temperature = 3, top_p = 0.99 },
            { temperature = 1, top_k = 5000, top_p = 0.9 } }) do
            local draw = default_ref(x, o)
            local s = gptoss.sampler({ seed = 50 + ci, temperature = o.temperature, top_k = o.top_k,
               top_p = o.top_p })
            for pos = 0, 39 do
               assert.are.equal(draw(uniform(50 + ci, pos)), s:sample(x, pos), ("config %d, position %d"):format(ci, pos))
            end
         end
         local c = gptoss.sampler({ mode = "course", seed = 61, temperature = 2, top_p = 0.6 })
         local ref = course_ref(61, 2, 0.6)
         for _ = 1, 40 do assert.are.equal(ref.sample(x), c:sample(x)) end
      end)

      it("keys each draw by (seed, position) only", function()
         local x = { 0.5, 1, -0.25, 0.75, 0, 1.25, 0.1, 0.9 }
         local o = { temperature = 1.2, top_p = 0.95 }
         local a = gptoss.sampler({ seed = 99, temperature = o.temperature, top_p = o.top_p })
         local first = {}
         for pos = 0, 199 do first[pos] = a:sample(x) end -- the counter: 0, 1, 2, ...
         assert.are.equal(200, a.position)
         local draw = default_ref(x, o)
         local distinct = {}
         for pos = 0, 199 do
            assert.are.equal(draw(uniform(99, pos)), first[pos])
            distinct[first[pos]] = true
         end
         local nd = 0
         for _ in pairs(distinct) do nd = nd + 1 end
         assert.is_true(nd >= 5)

         -- another object, reverse order, other draws (other rows, other positions) in between
         local b = gptoss.sampler({ seed = 99, temperature = o.temperature, top_p = o.top_p })
         local noise = gptoss.sampler({ seed = 99 })
         for pos = 199, 0, -1 do
            b:sample({ 3, 1, 2 }, pos + 1000)
            noise:sample(x, pos)
            assert.are.equal(first[pos], b:sample(x, pos))
            assert.are.equal(first[pos], b:sample(x, { position = pos }))
            assert.are.equal(pos + 1, b.position)
         end
         -- the counter continues from the last used position, explicit or not
         b:sample(x, 41)
         assert.are.equal(42, b.position)
         assert.are.equal(first[42], b:sample(x))
         assert.are.equal(43, b.position)
         assert.are.equal(first[43], b:sample(x, {}))
         assert.are.equal(first[44], b:sample(x, { logprobs = 1 }))
         assert.are.equal(45, b.position)

         -- another seed gives another sequence
         local c = gptoss.sampler({ seed = 100, temperature = o.temperature, top_p = o.top_p })
         local same = 0
         for pos = 0, 199 do
            if c:sample(x, pos) == first[pos] then same = same + 1 end
         end
         assert.is_true(same < 150, "seeds 99 and 100 gave nearly the same sequence")
         -- seeds beyond 2^63 are seeds like any other
         local big = gptoss.sampler({ seed = math.mininteger + 5 })
         assert.are.equal(default_ref(x, {})(uniform(math.mininteger + 5, 3)), big:sample(x, 3))
      end)

      it("returns the first id whose running sum EXCEEDS u times the kept sum", function()
         -- two equal logits: w = 1, 1, sum 2, target 2u; the running sum 1 exceeds it iff u < 0.5
         for _, case in ipairs({
            { k = 1 << 52, x = { 0, 0 }, id = 1 },          -- u = 0.5: 1 > 1 fails
            { k = (1 << 52) - 1, x = { 0, 0 }, id = 0 },    -- the u just below
            { k = 0, x = { -INF, 0, 0 }, id = 1 },          -- u = 0: the first token with w > 0
            { k = (1 << 53) - 1, x = { 0, 0, -INF }, id = 1 }, -- the largest u
         }) do
            local seed = seed_for_u(case.k)
            assert.are.equal(case.k * 2 ^ -53, uniform(seed, 0)) -- the seed built by inversion
            for _, o in ipairs({ {}, { top_k = 2 }, { top_p = 0.9 } }) do
               local s = gptoss.sampler({ seed = seed, top_k = o.top_k, top_p = o.top_p })
               assert.are.equal(case.id, s:sample(case.x, 0), ("u = %.17g"):format(case.k * 2 ^ -53))
               assert.are.equal(case.id, default_ref(case.x, o)(uniform(seed, 0)))
            end
         end
      end)

      describe("frequencies over 20000 positions (5 sigma)", function()
         local N = 20000
         local x = { 0.3, 1.2, -0.4, 0.9, 0.0, 0.6 }
         local row = T.from(x)
         x = row:totable()

         local function check(o, what, other)
            local p = expected_dist(x, o)
            local s = gptoss.sampler({ seed = 4242, temperature = o.temperature, top_k = o.top_k,
               top_p = o.top_p, min_p = o.min_p })
            assert_freqs(histogram(s, row, N), p, N, what)
            if other then assert_distinct(p, other, N, what) end
            return p
         end

         it("temperature 1 gives the softmax of the logits", function()
            local p = check({ temperature = 1 }, "T=1")
            local z = 0
            for i = 1, #x do z = z + math.exp(x[i]) end
            for i = 1, #x do assert.is_true(math.abs(p[i - 1] - math.exp(x[i]) / z) < 1e-12) end
         end)

         it("temperature 0.5 sharpens and 2 flattens, by the exact amounts", function()
            local p1 = expected_dist(x, { temperature = 1 })
            local sharp = check({ temperature = 0.5 }, "T=0.5", p1)
            local flat = check({ temperature = 2 }, "T=2", p1)
            assert.is_true(sharp[1] > p1[1] and p1[1] > flat[1]) -- the top token (id 1)
            assert.is_true(sharp[2] < p1[2] and p1[2] < flat[2]) -- the bottom one
         end)

         it("top_k keeps the first ranks, renormalised", function()
            local p = check({ top_k = 2 }, "top_k=2", expected_dist(x, {}))
            assert.are.same({ 1, 3 }, kept_ids(x, { top_k = 2 }))
            assert.is_true(math.abs(p[1] + p[3] - 1) < 1e-12)
            check({ top_k = 6 }, "top_k=6 (all)")
            check({ top_k = 100 }, "top_k=100 (more than the row)")
         end)

         it("top_p keeps the shortest rank prefix reaching top_p of the mass", function()
            -- probabilities 0.1, 0.35, 0.05, 0.25, 0.2, 0.05: ranks 1, 3, 4, 0, 2, 5; cum 0.35, 0.6,
            -- 0.8 >= 0.75: {1, 3, 4}, renormalised by 0.8
            local y = logs({ 0.1, 0.35, 0.05, 0.25, 0.2, 0.05 })
            assert.are.same({ 1, 3, 4 }, kept_ids(y, { top_p = 0.75 }))
            local s = gptoss.sampler({ seed = 5, top_p = 0.75 })
            local want = { [1] = 0.35 / 0.8, [3] = 0.25 / 0.8, [4] = 0.2 / 0.8 }
            assert_freqs(histogram(s, y, N), want, N, "top_p=0.75")
            check({ top_p = 0.6 }, "top_p=0.6 on the common row")
         end)

         it("top_p's boundary is 'reaches' (>=), ties ranked by lower id", function()
            -- four equal logits: w = 1 each (exact), total 4. top_p 0.5: goal 2, and the second
            -- rank's cum is exactly 2 >= 2: ids {0, 1}, half each (with > it would be {0, 1, 2}).
            local y = { 2, 2, 2, 2, -INF, -INF }
            local s = gptoss.sampler({ seed = 6, top_p = 0.5 })
            local half = { [0] = 0.5, [1] = 0.5 }
            assert_freqs(histogram(s, y, N), half, N, "top_p=0.5, exact boundary")
            assert_distinct(half, { [0] = 1 / 3, [1] = 1 / 3, [2] = 1 / 3 }, N, "> instead of >=")
            s = gptoss.sampler({ seed = 6, top_p = 0.75 }) -- goal 3: ids {0, 1, 2}
            assert_freqs(histogram(s, y, N), { [0] = 1 / 3, [1] = 1 / 3, [2] = 1 / 3 }, N, "top_p=0.75")
            s = gptoss.sampler({ seed = 6, top_p = 0.25 }) -- goal 1: id 0 alone
            assert_freqs(histogram(s, y, 2000), { [0] = 1 }, 2000, "top_p=0.25")
            -- with top_k first: ids 0, 1, 3, 4 tie (w = 1), top_k 4 keeps them, goal 0.5 * 4 = 2
            s = gptoss.sampler({ seed = 6, top_k = 4, top_p = 0.5 })
            assert_freqs(histogram(s, { 3, 3, 1, 3, 3, 0 }, N), half, N, "top_k=4, top_p=0.5")
         end)

         it("min_p keeps the tokens with p >= min_p * p_max", function()
            -- probabilities as above: p_max 0.35, min_p 0.6 -> p >= 0.21: ids 1 and 3
            local y = logs({ 0.1, 0.35, 0.05, 0.25, 0.2, 0.05 })
            assert.are.same({ 1, 3 }, kept_ids(y, { min_p = 0.6 }))
            local s = gptoss.sampler({ seed = 8, min_p = 0.6 })
            assert_freqs(histogram(s, y, N), { [1] = 0.35 / 0.6, [3] = 0.25 / 0.6 }, N, "min_p=0.6")
            check({ min_p = 0.5 }, "min_p=0.5 on the common row", expected_dist(x, {}))
            check({ min_p = 1 }, "min_p=1: the top alone")
            -- w >= min_p with equality: ties at the top have w = 1 exactly and min_p 1 keeps them
            -- all, without a filter before it and after top_k / top_p
            local z = { 2, 2, 0, 2, -1 }
            local thirds = { [0] = 1 / 3, [1] = 1 / 3, [3] = 1 / 3 }
            for _, o in ipairs({ { min_p = 1 }, { min_p = 1, top_k = 4 }, { min_p = 1, top_p = 0.999 } }) do
               s = gptoss.sampler({ seed = 8, min_p = o.min_p, top_k = o.top_k, top_p = o.top_p })
               assert_freqs(histogram(s, z, N), thirds, N, "min_p=1 ties")
            end
         end)

         it("applies top_k, then top_p, then min_p", function()
            -- probabilities 0.3, 0.25, 0.2, 0.15, 0.1 (ids 0..4 in rank order):
            --   top_k 4 keeps {0..3} (mass 0.9); top_p 0.78 of 0.9 = 0.702: cum 0.3, 0.55, 0.75:
            --   {0, 1, 2}; min_p 0.45 (p >= 0.135) keeps those: {0, 1, 2} renormalised by 0.75.
            -- top_p first would reach 0.78 of 1 only at 0.9: {0, 1, 2, 3}.
            local y = logs({ 0.3, 0.25, 0.2, 0.15, 0.1 })
            local o = { top_k = 4, top_p = 0.78, min_p = 0.45 }
            assert.are.same({ 0, 1, 2 }, kept_ids(y, o))
            assert.are.same({ 0, 1, 2, 3 }, kept_ids(y, o, { "top_p", "top_k", "min_p" }))
            local want = { [0] = 0.3 / 0.75, [1] = 0.25 / 0.75, [2] = 0.2 / 0.75 }
            local s = gptoss.sampler({ seed = 9, top_k = 4, top_p = 0.78, min_p = 0.45 })
            assert_freqs(histogram(s, y, N), want, N, "top_k, top_p, min_p")
            assert_distinct(want, expected_dist(y, o, { "top_p", "top_k", "min_p" }), N, "top_p first")

            -- min_p before top_p would change the mass top_p is relative to: top_p 0.7, min_p
            --   0.6 (p >= 0.18). Documented: goal 0.7 of 1: cum 0.3, 0.55, 0.75: {0, 1, 2}, which
            --   min_p keeps. min_p first: {0, 1, 2} (mass 0.75), goal 0.525: {0, 1}.
            local o2 = { top_p = 0.7, min_p = 0.6 }
            assert.are.same({ 0, 1, 2 }, kept_ids(y, o2))
            assert.are.same({ 0, 1 }, kept_ids(y, o2, { "min_p", "top_k", "top_p" }))
            s = gptoss.sampler({ seed = 10, top_p = 0.7, min_p = 0.6 })
            assert_freqs(histogram(s, y, N), want, N, "top_p, min_p")
            assert_distinct(want, expected_dist(y, o2, { "min_p", "top_p" }), N, "min_p first")
         end)

         it("ties: top_k keeps the lower ids; -inf never comes", function()
            local s = gptoss.sampler({ seed = 12, top_k = 1 })
            assert_freqs(histogram(s, { 1, 3, 3, 0, 3 }, 2000), { [1] = 1 }, 2000, "top_k=1 tie")
            s = gptoss.sampler({ seed = 12, top_k = 2 })
            assert_freqs(histogram(s, { 3, 1, 3, 3 }, N), { [0] = 0.5, [2] = 0.5 }, N, "top_k=2 tie")

            local y = { 0, -INF, 0.5, -INF, 1, -INF }
            for _, o in ipairs({ {}, { temperature = 3 }, { top_k = 5 }, { top_p = 0.999 } }) do
               s = gptoss.sampler({ seed = 13, temperature = o.temperature, top_k = o.top_k,
                  top_p = o.top_p })
               assert_freqs(histogram(s, y, N), expected_dist(y, o), N, "-inf tokens")
            end
            s = gptoss.sampler({ seed = 14, top_k = 4 }) -- top_k reaches into the -inf tokens
            assert_freqs(histogram(s, { -INF, -INF, 2, -INF, -INF }, 2000), { [2] = 1 }, 2000, "one finite")
         end)
      end)
   end)

   describe("logprobs", function()
      local function log_softmax(x)
         local m = -INF
         for i = 1, #x do
            if x[i] > m then m = x[i] end
         end
         local sum = 0.0
         for i = 1, #x do sum = sum + math.exp(x[i] - m) end
         local lse = m + math.log(sum)
         local lp = {}
         for i = 1, #x do lp[i] = x[i] - lse end
         return lp
      end

      local function close(a, b)
         return a == b or math.abs(a - b) <= 1e-12 * math.abs(b)
      end

      local function check(x, id, lp, alts, n, ranks)
         local want = log_softmax(x)
         assert.is_true(close(lp, want[id + 1]), ("logprob %.17g, expected %.17g"):format(lp, want[id + 1]))
         ranks = ranks or ranks_of(x)
         assert.are.equal(math.min(n, #x), #alts)
         for k, a in ipairs(alts) do
            assert.are.equal(ranks[k], a.id)
            assert.is_true(close(a.logprob, want[a.id + 1]))
         end
      end

      it("returns the log-softmax of the raw logits and the n most likely tokens", function()
         local x = T.from({ 0.5, 2, -1, 2, 0.25, -INF, 1 }):totable()
         local s = gptoss.sampler({ seed = 3, temperature = 0.3, top_k = 2, logprobs = 4 })
         local seen = {}
         for pos = 0, 99 do
            local id, lp, alts = s:sample(x, pos)
            check(x, id, lp, alts, 4)
            assert.is_true(id == 1 or id == 3)
            seen[id] = true
            assert.are.equal(1, alts[1].id) -- the tie at 2: lower id first
            assert.are.equal(3, alts[2].id)
            assert.are.equal(6, alts[3].id)
            assert.are.equal(0, alts[4].id)
         end
         assert.is_true(seen[1] and seen[3])
         -- -inf is log probability -inf; n larger than the row lists the whole row
         local id, lp, alts = gptoss.sampler({ temperature = 0, logprobs = 20 }):sample(x)
         assert.are.equal(1, id)
         check(x, id, lp, alts, 20)
         assert.are.equal(7, #alts)
         assert.are.equal(5, alts[7].id)
         assert.are.equal(-INF, alts[7].logprob)
         -- a value of our own: two equal logits and a third lower by log 2 -> 0.4, 0.4, 0.2
         local y = { 0, 0, f32(-math.log(2)) }
         local _, lp0 = gptoss.sampler({ temperature = 0, logprobs = 0 }):sample(y)
         assert.is_true(math.abs(lp0 - math.log(0.4)) < 1e-7)
      end)

      it("works on a 201088-wide row, with the 20 highest logits in rank order", function()
         local row, x, ranks = real_logits()
         for _, mode in ipairs({ "default", "course" }) do
            local s = gptoss.sampler({ mode = mode, temperature = 1, seed = 21, logprobs = 20 })
            local id, lp, alts = s:sample(row)
            check(x, id, lp, alts, 20, ranks)
         end
      end)

      it("is set per sampler or per call; without it sample returns the id alone", function()
         local x = { 1, 2, 3, 0 }
         local plain = gptoss.sampler({ seed = 1 })
         assert.are.equal(1, select("#", plain:sample(x)))
         assert.are.equal(1, select("#", plain:sample(x, 5)))
         assert.are.equal(1, select("#", plain:sample(x, { position = 5 })))
         local n = select("#", plain:sample(x, { logprobs = 2 }))
         local id, lp, alts = plain:sample(x, { logprobs = 2 })
         assert.are.equal(3, n)
         check(x, id, lp, alts, 2)
         assert.are.equal(2, alts[1].id)
         assert.is_nil(plain.logprobs) -- the per-call value does not stick
         assert.are.equal(1, select("#", plain:sample(x)))
         local z = { plain:sample(x, { logprobs = 0 }) }
         assert.are.equal(3, #z)
         assert.are.same({}, z[3])

         local with = gptoss.sampler({ seed = 1, logprobs = 3 })
         assert.are.equal(3, with.logprobs)
         local _, _, a3 = with:sample(x)
         assert.are.equal(3, #a3)
         local _, _, a1 = with:sample(x, { logprobs = 1 })
         assert.are.equal(1, #a1)
         local _, _, a0 = with:sample(x, { logprobs = 0 })
         assert.are.same({}, a0)
         assert.are.equal(3, select("#", with:sample(x, 7)))
         -- course mode returns the same logprobs
         local c = gptoss.sampler({ mode = "course", seed = 4, temperature = 1, logprobs = 2 })
         local cid, clp, calts = c:sample(x)
         check(x, cid, clp, calts, 2)
      end)
   end)

   describe("logit_bias", function()
      local x = { 0.5, 2, -1, 2, 0.25, 1 }

      -- x with the biases added as floats: what every rule then sees
      local function biased(row, bias)
         local y = {}
         for i, v in ipairs(row) do y[i] = f32(v + (bias[i - 1] or 0)) end
         return y
      end

      it("adds each bias to its logit before every rule: greedy, filters, draws, both modes", function()
         local bias = { [1] = -INF, [3] = -INF, [5] = 1.5 } -- bans the two maxima, lifts token 5
         local y = biased(x, bias)
         assert.are.equal(5, gptoss.sampler({ temperature = 0, logit_bias = bias }):sample(x))
         for _, opts in ipairs({ { temperature = 1, seed = 3 }, { temperature = 0.7, top_k = 2, seed = 4 },
            { temperature = 1.3, top_p = 0.8, min_p = 0.1, seed = 5 }, { mode = "course", temperature = 1, seed = 6 } }) do
            local with, plain = gptoss.sampler(H.with(opts, { logit_bias = bias })), gptoss.sampler(opts)
            for pos = 0, 49 do
               local id = with:sample(x, pos)
               assert.are.equal(plain:sample(y, pos), id)
               assert.is_true(id ~= 1 and id ~= 3)
            end
         end
         -- a bias of +20 on a low token makes it the greedy choice; 0 changes nothing
         assert.are.equal(2, gptoss.sampler({ temperature = 0, logit_bias = { [2] = 20 } }):sample(x))
         assert.are.equal(1, gptoss.sampler({ temperature = 0, logit_bias = { [2] = 0 } }):sample(x))
      end)

      it("is given per sampler or per call, the call's replacing the sampler's", function()
         local s = gptoss.sampler({ temperature = 0, logit_bias = { [1] = -INF } })
         assert.are.equal(3, s:sample(x))
         assert.are.equal(1, s:sample(x, { logit_bias = { [3] = -INF } }))
         assert.are.equal(1, s:sample(x, { logit_bias = {} }))
         assert.are.equal(3, s:sample(x)) -- the call's does not stick
         local big = {} -- the most entries a list may hold
         for id = 0, 1023 do big[id] = id == 7 and 5 or -1 end
         local row = {}
         for i = 1, 2000 do row[i] = 0 end
         assert.are.equal(7, gptoss.sampler({ temperature = 0 }):sample(row, { logit_bias = big }))
      end)

      it("gives logprobs of the biased logits: a banned token is -inf and ranks last", function()
         local bias = { [1] = -INF, [0] = 1 }
         local y = biased(x, bias)
         local id, lp, alts = gptoss.sampler({ temperature = 0, logprobs = 6, logit_bias = bias }):sample(x)
         local want_id, want_lp, want_alts = gptoss.sampler({ temperature = 0, logprobs = 6 }):sample(y)
         assert.are.equal(want_id, id)
         assert.are.equal(want_lp, lp)
         assert.are.same(want_alts, alts)
         assert.are.equal(1, alts[6].id)
         assert.are.equal(-INF, alts[6].logprob)
      end)

      it("refuses bad lists, ids outside the row, and a bias that bans every token", function()
         local function bad(bias, ...)
            expect_error(function() gptoss.sampler({ logit_bias = bias }) end, "sampler: ", ...)
            expect_error(function() gptoss.sampler({ seed = 1 }):sample(x, { logit_bias = bias }) end,
               "sampler:sample: ", ...)
         end
         bad(5, "logit_bias must be a table {[token id] = bias} (got number)")
         bad({ a = 1 }, "logit_bias keys must be token ids (got a)")
         bad({ [1.5] = 1 }, "logit_bias keys must be token ids (got 1.5)")
         bad({ [-1] = 1 }, "logit_bias: token -1 is out of range 0..2147483647")
         bad({ [2 ^ 31] = 1 }, "logit_bias: token 2147483648 is out of range")
         bad({ [2] = "x" }, "logit_bias[2] must be a number (got x)")
         bad({ [2] = NAN }, "logit_bias[2] = ", "a bias is a finite float or -math.huge")
         bad({ [2] = INF }, "logit_bias[2] = inf", "a bias is a finite float or -math.huge")
         bad({ [2] = 1e39 }, "logit_bias[2] = ", "a bias is a finite float")
         local many = {}
         for id = 0, 1024 do many[id] = 1 end
         bad(many, "logit_bias has more than 1024 entries")
         local s = gptoss.sampler({ seed = 2, logit_bias = { [6] = 1 } })
         expect_error(function() s:sample(x) end, "sampler: logit_bias names token 6, outside the row of 6 logits")
         local all = { [0] = -INF, [1] = -INF, [2] = -INF }
         for _, mode in ipairs({ "default", "course" }) do
            for _, t in ipairs({ 0, 1 }) do
               expect_error(function()
                  gptoss.sampler({ mode = mode, temperature = t, seed = 1, logit_bias = all }):sample({ 1, 2, -INF })
               end, "sampler: logit_bias bans every token that could be chosen")
            end
         end
         -- the row's own faults come first
         expect_error(function() gptoss.sampler({ logit_bias = { [0] = -INF } }):sample({ 1, NAN }) end,
            "the logit of token 1 is NaN")
         assert.are.equal(0, s.position)
         assert.are.equal(5, s:sample({ 0, 0, 0, 0, 0, 0, -5 }, { logit_bias = { [5] = 30 } }))
      end)
   end)

   describe("bad input", function()
      local function usable()
         local s = gptoss.sampler({ seed = 1, top_k = 1 })
         assert.are.equal(2, s:sample({ 0, 1, 5, 2 }))
      end

      it("rejects bad constructor parameters", function()
         local cases = {
            { { temperature = -1 }, "temperature must be a finite number >= 0", "got -1" },
            { { temperature = NAN }, "temperature must be a finite number >= 0" },
            { { temperature = INF }, "temperature must be a finite number >= 0", "inf" },
            { { temperature = 1e300 }, "temperature must be a finite number >= 0" }, -- inf as a float
            { { temperature = "hot" }, "temperature must be a number", "hot" },
            { { temperature = 1e-50 }, "temperature is too small for float arithmetic (0 means greedy)" },
            { { top_p = 1.00000001 }, "top_p must be within [0, 1]" },
            { { min_p = -1e-50 }, "min_p must be within [0, 1]" },
            { { top_p = -0.1 }, "top_p must be within [0, 1]", "-0.1" },
            { { top_p = 1.5 }, "top_p must be within [0, 1]", "1.5" },
            { { top_p = NAN }, "top_p must be within [0, 1]" },
            { { top_p = {} }, "top_p must be a number" },
            { { min_p = -0.5 }, "min_p must be within [0, 1]" },
            { { min_p = 2 }, "min_p must be within [0, 1]", "got 2" },
            { { min_p = true }, "min_p must be a number" },
            { { top_k = -1 }, "top_k must be >= 0", "got -1" },
            { { top_k = 2.5 }, "top_k must be an integer", "2.5" },
            { { seed = 1.5 }, "seed must be an integer", "1.5" },
            { { seed = {} }, "seed must be an integer" },
            { { mode = "greedy" }, "mode must be one of default, course", "greedy" },
            { { mode = 1 }, "mode must be one of default, course" },
            { { logprobs = 21 }, "logprobs must be within 0..20", "21" },
            { { logprobs = -1 }, "logprobs must be within 0..20", "-1" },
            { { logprobs = 1.5 }, "logprobs must be an integer" },
            { { logprobs = true }, "logprobs must be an integer" },
            { { mode = "course", top_k = 2 }, "the course sampler has no top_k" },
            { { mode = "course", min_p = 0.1 }, "the course sampler has no min_p" },
            { { mode = "course", temperature = -1 }, "temperature must be a finite number >= 0" },
            { { mode = "course", top_p = 2 }, "top_p must be within [0, 1]" },
         }
         for _, case in ipairs(cases) do
            expect_error(function() gptoss.sampler(case[1]) end, "sampler: ", table.unpack(case, 2))
         end
         expect_error(function() gptoss.sampler("x") end, "sampler: options must be a table (got string)")
         expect_error(function() gptoss.sampler(3) end, "options must be a table (got number)")
         expect_error(function() gptoss.sampler({ temprature = 0 }) end,
            "sampler: unknown option 'temprature' (known: mode, temperature, top_k, top_p, min_p, seed, logit_bias, "
            .. "logprobs, presence_penalty, frequency_penalty)")
         -- the limits themselves are fine
         gptoss.sampler({ top_p = 0, min_p = 1, top_k = 0, logprobs = 20, temperature = 0 })
         gptoss.sampler({ top_p = 1, min_p = 0, logprobs = 0 })
         usable()
      end)

      it("lists its options with gptoss.sample_options, in the order its errors name them", function()
         local names = gptoss.sample_options()
         local err = expect_error(function() gptoss.sampler({ bogus = 0 }) end, "sampler: unknown option 'bogus'")
         assert.are.equal(("(known: %s)"):format(table.concat(names, ", ")), err:match("%(known: .*%)$"))
         names[1] = "changed" -- a fresh list each call
         assert.are_not.equal("changed", gptoss.sample_options()[1])
         for _, name in ipairs(gptoss.sample_options()) do
            local r = expect_error(function() gptoss.sampler({ [name] = true }) end, "sampler: ")
            assert.is_nil(r:find("unknown option", 1, true), r)
         end
      end)

      it("rejects bad logits, naming the token, and leaves the sampler as it was", function()
         for _, mode in ipairs({ "default", "course" }) do
            local s = gptoss.sampler({ mode = mode, seed = 5, temperature = 1 })
            local state = s.state
            expect_error(function() s:sample({ 1, NAN, 2 }) end, "sampler: the logit of token 1 is NaN")
            expect_error(function() s:sample({ 1, 2, INF }) end, "the logit of token 2 is +inf")
            expect_error(function() s:sample(T.from({ INF, 2 })) end, "the logit of token 0 is +inf")
            expect_error(function() s:sample({ -INF, -INF }) end, "every logit is -inf")
            expect_error(function() s:sample({}) end, "the logits row is empty")
            expect_error(function() s:sample({ 1, "2" }) end, "logits[2] must be a number (got string)")
            expect_error(function() s:sample({ 1, {} }) end, "logits[2] must be a number (got table)")
            assert.are.equal(0, s.position) -- failed calls use no position ...
            assert.are.equal(state, s.state) -- ... and draw nothing
            local ok = gptoss.sampler({ mode = mode, seed = 5, temperature = 1 })
            assert.are.equal(ok:sample({ 1, 2, 3 }), s:sample({ 1, 2, 3 }))
            assert.are.equal(1, s.position)
         end
         local g = gptoss.sampler({ temperature = 0 }) -- greedy checks the row too
         expect_error(function() g:sample({ 0, NAN }) end, "the logit of token 1 is NaN")
         expect_error(function() g:sample({ -INF }) end, "every logit is -inf")
         usable()
      end)

      it("rejects bad rows, positions and per-call logprobs", function()
         local s = gptoss.sampler({ seed = 1 })
         local x = { 1, 2 }
         expect_error(function() s:sample(T.from({ 1, 2 }, "i32")) end,
            "logits must be an f32 tensor (got i32)")
         expect_error(function() s:sample(T.from({ { 1, 2 }, { 3, 4 } })) end,
            "expected one row of logits (got 2 rows)", "logits[1]")
         expect_error(function() s:sample(T.zeros({ 3, 1, 4 })) end,
            "expected one row of logits (got 3 rows)")
         local want_row = "sampler:sample: expected a host tensor row or a table of logits"
         expect_error(function() s:sample("1 2") end, want_row, "(got string)")
         expect_error(function() s:sample(5) end, want_row, "(got number)")
         expect_error(function() s:sample() end, want_row, "(got no value)")
         expect_error(function() s.sample({}, x) end, "bad argument #1", "gptoss.sampler expected")
         expect_error(function() s.sample(T.from(x), x) end, "gptoss.sampler expected")
         expect_error(function() s:sample(x, -1) end, "position must be within 0..9223372036854775806 (got -1)")
         expect_error(function() s:sample(x, 1.5) end, "position must be an integer (got 1.5)")
         expect_error(function() s:sample(x, true) end, "position must be an integer (got true)")
         expect_error(function() s:sample(x, math.maxinteger) end, "position must be within 0..", "(got 9223372036854775807)")
         expect_error(function() s:sample(x, { position = -3 }) end, "position must be within 0..", "(got -3)")
         expect_error(function() s:sample(x, { pos = 3 }) end,
            "sampler:sample: unknown option 'pos' (known: position, logprobs, logit_bias)")
         expect_error(function() s:sample(x, { position = 0.5 }) end, "position must be an integer (got 0.5)")
         expect_error(function() s:sample(x, { logprobs = 21 }) end,
            "sampler:sample: logprobs must be within 0..20 (got 21)")
         expect_error(function() s:sample(x, { logprobs = -1 }) end, "logprobs must be within 0..20 (got -1)")
         expect_error(function() s:sample(x, { logprobs = "many" }) end, "logprobs must be an integer")
         assert.are.equal(0, s.position)
         assert.are.equal(default_ref(x, {})(uniform(1, 0)), s:sample(x))
         assert.are.equal(1, s.position)
         usable()
      end)
   end)
end)
