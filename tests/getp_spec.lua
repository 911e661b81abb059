-- gptoss.getp end to end on CPU replicas of the synthetic 7m model with the exported
-- tokenizer: outputs equal the course's generate loop
-- (docs/course.md#generation-rule-and-token-count) written plainly
-- here and run token by token on a one-slot replica, whatever the partition, scheduler,
-- slot count or replica count; the steps cap, the stop ids (reached through sampling at a
-- temperature so high that every id is equally likely, so that the draw is computable),
-- the count, sampling seeds, request files, progress reports, GPU slot sizing (with a
-- stand-in device) and every bad-input error.
local gptoss = require "gptoss"
local getp = require "gptoss.getp"
local requests = require "gptoss.requests"
local H = require "helpers"
local expect_error, tmp, cleanup, write_file = H.expect_error, H.tmp, H.cleanup, H.write_file

local STEPS = 24
local model = gptoss.synthetic("7m", { seed = 1 })
local tok = gptoss.tokenizer(H.TOKENIZER)
-- 1, 2, 9, 9 and 13 tokens; runs of digits are cut in threes, so the last three are
-- steps - 1 tokens (one generated id), steps tokens and more (none)
local PROMPTS = {
  "Hello", "Hello world", "Write a short haiku about the ocean.", "ฉันรักทะเล 🌊 naïve",
  "Once upon a time, in a land far away, there lived",
  ("123"):rep(STEPS - 1), ("123"):rep(STEPS), ("987"):rep(STEPS + 6),
}

-- docs/course.md#generation-rule-and-token-count, the course's loop as written there, one forward
-- step per position
local function course_generate(r, prompt, steps)
  local out = {}
  local token, pos = prompt[1], 0
  while pos + 1 < steps do
    local next_id = r:step({ slots = { 1 }, positions = { pos }, tokens = { token } }):tokens()[1]
    pos = pos + 1
    if pos < #prompt then
      next_id = prompt[pos + 1]
    else
      out[#out + 1] = next_id
    end
    if next_id == 199999 or next_id == 200002 then break end
    token = next_id
  end
  return out
end

-- every prompt through course_generate on one 1-slot replica; sampling(i) gives
-- request i's sampling parameters (nil: greedy)
local function reference(prompts, steps, sampling, m)
  m = m or model
  local r <close> = m:replica { device = "cpu", slots = 1, ctx = steps }
  local outputs = {}
  for i, text in ipairs(prompts) do
    local ids = tok:encode(text, { max_tokens = m.config.initial_context_length })
    if sampling then r:sampling(1, sampling(i)) else r:sampling(1) end
    outputs[i] = #ids < steps and course_generate(r, ids, steps) or {}
  end
  return outputs
end

local greedy_reference
local function greedy()
  greedy_reference = greedy_reference or reference(PROMPTS, STEPS)
  return greedy_reference
end

local function sum_lengths(outputs)
  local n = 0
  for _, o in ipairs(outputs) do n = n + #o end
  return n
end

-- The id a slot sampling at temperature 1e30 draws for the token at `position`: every
-- weight expf((logit - max) / T) is then exactly 1, so docs/api.md#default-mode rule 4 picks id
-- floor(u * vocab), u the draw of (seed, position).
local function flat_draw(seed, position)
  return math.floor(H.sample_uniform(seed, position) * model.config.vocab_size)
end
-- the first seed from 0 whose draws at the given positions are the given ids
-- (false: any id but a stop id)
local function seed_drawing(wanted)
  for seed = 0, 1 << 24 do
    local ok = true
    for position, id in pairs(wanted) do
      local got = flat_draw(seed, position)
      if id then ok = got == id else ok = got ~= 199999 and got ~= 200002 end
      if not ok then break end
    end
    if ok then return seed end
  end
  error("no seed found")
end

describe("getp", function()
  after_each(cleanup)

  it("equals the course's loop run token by token, within the steps cap, counting every id", function()
    local result = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, requests = PROMPTS }
    local expected = greedy()
    assert.are.same(expected, result.outputs)
    for i, text in ipairs(PROMPTS) do
      local n = #tok:encode(text)
      local out = result.outputs[i]
      local stopped = out[#out] == 199999 or out[#out] == 200002
      assert.is_true(#out == 0 or n + #out <= STEPS)
      assert.is_true(stopped or #out == math.max(0, STEPS - n), ("request %d: %d + %d"):format(i, n, #out))
    end
    assert.are.same({}, result.outputs[7])
    assert.are.same({}, result.outputs[8])
    assert.are.equal(1, #result.outputs[6])
    assert.are.equal(sum_lengths(expected), result.tokens)
    local pr = result.per_replica[1]
    -- the CPU computes a step as it is enqueued: the host time holds it, the wait is the ids' read
    assert.is_true(pr.host > 0 and pr.waited >= 0 and pr.host + pr.waited <= result.elapsed)
    pr.host, pr.waited = nil, nil
    -- the step counters: tests/getp_steps_spec.lua
    pr.prefill_steps, pr.prefill_step_rows, pr.prefill_rows = nil, nil, nil
    pr.decode_steps, pr.decode_step_rows = nil, nil
    assert.are.same({ { requests = #PROMPTS, tokens = result.tokens, steps = result.steps, shared_prefix = 0,
      prefill_saved = 0 } }, result.per_replica)
    assert.is_true(result.elapsed >= 0)
  end)

  it("takes one step per generated id with one slot: the prompt in one step, then decode", function()
    local result = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      replica = { slots = 1 }, requests = PROMPTS }
    assert.are.equal(result.tokens, result.steps)
  end)

  it("gives the same outputs for every partition, scheduler, slot count and replica count", function()
    local expected = greedy()
    local function last_reversed(reqs, replicas)
      local assignment, list = {}, {}
      for i = #reqs, 1, -1 do list[#list + 1] = i end
      assignment[#replicas] = list
      return assignment
    end
    for _, n in ipairs { 1, 2 } do
      for _, slots in ipairs { 1, 3, 16 } do
        local replicas = {}
        for k = 1, n do replicas[k] = model:replica { device = "cpu", slots = slots, ctx = STEPS } end
        -- with one replica the built-in partitions all give it every request in order
        local parts = n == 1 and { "round_robin", last_reversed } or { "round_robin", "blocks", "balanced", last_reversed }
        for _, part in ipairs(parts) do
          for _, sched in ipairs { "continuous", "static" } do
            local result = getp.run { tokenizer = tok, replicas = replicas, steps = STEPS, partition = part,
              scheduler = sched, requests = PROMPTS }
            local what = ("%d replicas, %d slots, %s, %s"):format(n, slots, tostring(part), sched)
            assert.are.same(expected, result.outputs, what)
            local tokens, steps = 0, 0
            for _, pr in ipairs(result.per_replica) do tokens, steps = tokens + pr.tokens, steps + pr.steps end
            assert.are.equal(result.tokens, tokens, what)
            assert.are.equal(result.steps, steps, what)
          end
        end
        for _, r in ipairs(replicas) do
          assert.is_false(r.closed) -- replicas given are the caller's
          r:close()
        end
      end
    end
  end)

  it("builds one replica per device, sized by the requests, and closes them", function()
    local g = getp.new { model = model, tokenizer = tok, devices = { "cpu", "cpu" }, steps = STEPS,
      partition = "blocks", requests = PROMPTS }
    assert.are.equal(2, #g.replicas)
    for _, r in ipairs(g.replicas) do
      assert.are.equal("cpu", r.device)
      assert.are.equal(#PROMPTS, r.slots)
      assert.are.equal(STEPS, r.ctx)
    end
    local d = g:describe()
    for _, s in ipairs { "getp: 2 replicas", "cpu (8 slots, ctx 24, weights fp32, kv fp32, 64 rows a step)",
      "steps 24", "greedy", "partition blocks", "scheduler continuous" } do
      assert.truthy(d:find(s, 1, true), d)
    end
    assert.are.equal(d, tostring(g))
    local first = g:run()
    assert.are.same(greedy(), first.outputs)
    assert.are.same({ 4, 4 }, { first.per_replica[1].requests, first.per_replica[2].requests })
    -- the slots' previous sequences are simply overwritten
    assert.are.same(first.outputs, g:run(PROMPTS).outputs)
    local replicas = g.replicas
    g:close()
    g:close()
    assert.is_true(replicas[1].closed and replicas[2].closed)
    expect_error(function() g:run(PROMPTS) end, "getp: used after close")
  end)

  it("chooses min(#requests, 16) CPU slots, 16 without requests, and replica.slots when given", function()
    local function slots(opts)
      local g <close> = getp.new(H.with({ model = model, tokenizer = tok, devices = { "cpu" }, steps = 8 }, opts))
      return g.replicas[1].slots
    end
    assert.are.equal(3, slots { requests = { "a", "b", "c" } })
    local many = {}
    for i = 1, 40 do many[i] = "x" end
    assert.are.equal(16, slots { requests = many })
    assert.are.equal(16, slots {})
    assert.are.equal(1, slots { requests = {} })
    assert.are.equal(5, slots { requests = many, replica = { slots = 5 } })
    -- the GPU count: the most slots whose memory plan (weights, each slot's KV, the rows'
    -- logits and scratch) and headroom fit
    local big = gptoss.synthetic("20b")
    local GiB = 1 << 30
    local bf16 = { weights = "bf16", kv = "bf16" }
    local h100 = getp.gpu_slots(80 * GiB, big, 1024, nil, bf16)
    assert.is_true(h100 > 1000 and h100 < 1400, h100) -- 41 GiB left after the weights, ~31 MB a slot
    assert.are.equal(7, getp.gpu_slots(80 * GiB, big, 1024, 7, bf16))
    assert.is_true(getp.gpu_slots(80 * GiB, big, 2048, nil, bf16) < h100) -- more positions
    assert.are.equal(1, getp.gpu_slots(38 * GiB, big, 1024, nil, bf16))     -- weights (39 GiB) do not fit
    assert.are.equal(1, getp.gpu_slots(0, big, 1024, 7, bf16))             -- no such device
    -- a chunk of its own keeps the rows at least that many at every count it tries (and
    -- widens the windowed layers' rings: fewer slots)
    local chunked = getp.gpu_slots(80 * GiB, big, 1024, nil, H.with(bf16, { chunk = 200 }))
    assert.is_true(chunked > 1000 and chunked < h100, chunked)
    -- options the replica refuses fit nowhere: the replica says why when it is built
    assert.are.equal(1, getp.gpu_slots(80 * GiB, big, 1024, nil, { weights = "fp16" }))
    -- no request count: the search stops at the replica's own limits
    assert.is_true(getp.gpu_slots(1 << 62, gptoss.synthetic("7m"), 64, nil, {}) <= 1 << 20)
  end)

  -- GPU sizing without a GPU: gptoss.devices reports one device and model:replica is a
  -- stand-in that refuses like a short device until the slots fit, then builds a CPU replica
  -- GPU sizing without a GPU: gptoss.devices reports one device with `free` bytes free and
  -- model:replica is a stand-in that records what it is asked for, then builds a CPU replica
  it("sizes the GPU slots it chooses from the replica's memory plan and the free memory, rows following", function()
    local mt, devices, device_memory = getmetatable(model), gptoss.devices, gptoss.device_memory
    local index = mt.__index
    local tries, free = {}, 0
    local function fake_replica(m, o)
      tries[#tries + 1] = { slots = o.slots, rows = o.rows }
      return index(m, "replica")(m, { device = "cpu", slots = o.slots, ctx = o.ctx })
    end
    local function needs(slots, rows) -- what a GPU replica of these counts must find free
      local plan = model:replica_bytes { device = 0, slots = slots, rows = rows, ctx = STEPS }
      return plan.total + plan.headroom
    end
    mt.__index = function(u, k) if k == "replica" then return fake_replica end return index(u, k) end
    gptoss.devices = function() return { { id = 0, memory = 1 << 40 } } end
    gptoss.device_memory = function() return free, 1 << 40 end
    local ok, err = pcall(function()
      -- room for 5 slots but not 6, each count with 2048 rows (slots + 128 is less)
      free = needs(5, 2048)
      assert.is_true(free < needs(6, 2048))
      local g <close> = getp.new { model = model, tokenizer = tok, steps = STEPS, devices = { 0 },
        requests = { "a", "b", "c", "d", "e", "f", "g", "h" } }
      assert.are.equal(5, g.replicas[1].slots)
      assert.are.same({ { slots = 5, rows = 2048 } }, tries)
      -- room for more: the requests bound it
      tries, free = {}, needs(64, 2048)
      local g2 <close> = getp.new { model = model, tokenizer = tok, steps = STEPS, devices = { 0 },
        requests = { "a", "b", "c" } }
      assert.are.same({ { slots = 3, rows = 2048 } }, tries)
      -- slots the caller gave stand
      tries, free = {}, 0
      local g3 <close> = getp.new { model = model, tokenizer = tok, steps = STEPS, devices = { 0 },
        replica = { slots = 8 } }
      assert.are.same({ { slots = 8, rows = 2048 } }, tries)
      -- past 2048 rows: the slots and a quarter more
      tries = {}
      local g5 <close> = getp.new { model = model, tokenizer = tok, steps = STEPS, devices = { 0 },
        replica = { slots = 1800 } }
      assert.are.same({ { slots = 1800, rows = 2250 } }, tries)
      -- rows the caller gave size the plan and stay as given
      tries, free = {}, needs(4, 300)
      local g4 <close> = getp.new { model = model, tokenizer = tok, steps = STEPS, devices = { 0 },
        requests = { "a", "b", "c", "d", "e", "f" }, replica = { rows = 300 } }
      assert.are.same({ { slots = 4, rows = 300 } }, tries)
    end)
    mt.__index, gptoss.devices, gptoss.device_memory = index, devices, device_memory
    assert(ok, err)
  end)

  it("clamps steps as the course does: 0 or more than seq_len mean seq_len", function()
    local r <close> = model:replica { device = "cpu", slots = 1, ctx = model.config.seq_len }
    for _, case in ipairs { { 0, 2048 }, { 5000, 2048 }, { 2048, 2048 }, { 7, 7 } } do
      local g <close> = getp.new { model = model, tokenizer = tok, replicas = { r }, steps = case[1] }
      assert.are.equal(case[2], g.steps)
    end
    local g <close> = getp.new { tokenizer = tok, replicas = { r } }
    assert.are.equal(1024, g.steps)
    assert.are.equal(model, g.model)
  end)

  it("stops after <|endoftext|> or <|return|>, keeping and counting it", function()
    local prompts = { "Hello", "Hello world" }
    -- request 1 (1 token) draws positions 1, 2, ...; request 2 (2 tokens, seed + 1) from 2
    local cases = {
      { seed = seed_drawing { [1] = false, [2] = 199999 }, stop = 199999, length = 2 },
      { seed = seed_drawing { [1] = 200002 }, stop = 200002, length = 1 },
    }
    for _, case in ipairs(cases) do
      local sampling = { temperature = 1e30, seed = case.seed }
      local result = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
        sampling = sampling, requests = prompts }
      local out = result.outputs[1]
      assert.are.equal(case.length, #out)
      assert.are.equal(case.stop, out[#out])
      for k, id in ipairs(out) do assert.are.equal(flat_draw(case.seed, k), id) end
      -- request 2 ran on past request 1's end, to the cap
      assert.are.equal(STEPS - 2, #result.outputs[2])
      for k, id in ipairs(result.outputs[2]) do assert.are.equal(flat_draw(case.seed + 1, k + 1), id) end
      assert.are.equal(case.length + STEPS - 2, result.tokens)
      local expected = reference(prompts, STEPS, function(i)
        return { temperature = 1e30, seed = case.seed + i - 1 }
      end)
      assert.are.same(expected, result.outputs)
      -- in one slot, request 2 follows into the slot request 1 ended in, after the row
      -- request 1 had in the step built before its stop id was read
      local one = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
        sampling = sampling, requests = prompts, replica = { slots = 1 } }
      assert.are.same(expected, one.outputs)
    end
  end)

  it("samples request i with seed + i - 1: the same outputs in any partition, scheduler or batch", function()
    local sampling = { temperature = 0.9, top_p = 0.95, seed = 42 }
    local expected = reference(PROMPTS, STEPS, function(i)
      return { temperature = 0.9, top_p = 0.95, seed = 42 + i - 1 }
    end)
    assert.are_not.same(greedy(), expected)
    for _, case in ipairs { { { "cpu" }, "round_robin", "continuous", 1 }, { { "cpu", "cpu" }, "balanced", "static", 3 },
      { { "cpu", "cpu" }, "blocks", "continuous", 16 } } do
      local g <close> = getp.new { model = model, tokenizer = tok, devices = case[1], partition = case[2],
        scheduler = case[3], replica = { slots = case[4] }, steps = STEPS, sampling = sampling }
      assert.truthy(g:describe():find("temperature 0.9, top_p 0.95, top_k 0, min_p 0, seed 42 + request - 1",
        1, true), g:describe())
      assert.are.same(expected, g:run(PROMPTS).outputs)
    end
    local other = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      sampling = { temperature = 0.9, top_p = 0.95, seed = 43 }, requests = PROMPTS }
    assert.are_not.same(expected, other.outputs)
    -- temperature 0 (or none) is the course's greedy default; a missing seed is chosen and kept
    local g <close> = getp.new { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      sampling = { top_p = 0.9, seed = 3 } }
    assert.is_nil(g.sampling)
    assert.are.same(greedy(), g:run(PROMPTS).outputs)
    local h <close> = getp.new { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      sampling = { temperature = 1 } }
    assert.are.equal("integer", math.type(h.sampling.seed))
  end)

  it("samples a share of a run as the whole run would, given the requests' numbers in it", function()
    local sampling = { temperature = 0.9, top_p = 0.95, seed = 42 }
    local whole = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, sampling = sampling,
      requests = PROMPTS }.outputs
    local numbers = { 5, 2, 3 }
    local share = {}
    for j, i in ipairs(numbers) do share[j] = PROMPTS[i] end
    local outputs = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, sampling = sampling,
      requests = share, request_numbers = numbers }.outputs
    assert.are.same({ whole[5], whole[2], whole[3] }, outputs)
    -- without them the share is a run of its own: request j samples with seed + j - 1
    local alone = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, sampling = sampling,
      requests = share }.outputs
    assert.are_not.same(outputs, alone)
    -- the requests a partition sees, as g:run makes them
    local seen = getp.requests_of({ model = model, tokenizer = tok, steps = STEPS }, share)
    assert.are.same({ 1, share[1], tok:encode(share[1]), STEPS - #tok:encode(share[1]) },
      { seen[1].index, seen[1].text, seen[1].tokens, seen[1].limit })
  end)

  it("cuts prompts at initial_context_length tokens and at a NUL byte, as the course's encode", function()
    -- the smallest context YaRN accepts with the 7m's other values is above 2 pi * 32
    local short = gptoss.synthetic({ initial_context_length = 210 }, { seed = 1 })
    local long, steps = ("123"):rep(230), 214
    local result = getp.run { model = short, tokenizer = tok, devices = { "cpu" }, steps = steps,
      requests = { long, ("123"):rep(210), "Hello\0 world", "Hello" } }
    assert.are.equal(steps - 210, #result.outputs[1])
    assert.are.same(result.outputs[2], result.outputs[1])
    assert.are.same(reference({ long }, steps, nil, short)[1], result.outputs[1])
    assert.are.same(result.outputs[4], result.outputs[3])
  end)

  describe("shared prefixes", function()
    local harmony = require "gptoss.harmony"
    local CHAT_STEPS = 72
    local CHAT_PROMPTS = { PROMPTS[1], PROMPTS[2], PROMPTS[3], PROMPTS[4], PROMPTS[5], "2 + 2 =" } -- all fit

    -- the length of the longest common beginning of the chat renderings, at most the shortest - 1
    local function chat_prefix(prompts)
      local ids = {}
      for i, text in ipairs(prompts) do ids[i] = harmony.render_ids({ harmony.system {}, harmony.user(text) }, tok) end
      local n = #ids[1] - 1
      for i = 2, #ids do
        n = math.min(n, #ids[i] - 1)
        for j = 1, n do
          if ids[i][j] ~= ids[1][j] then n = j - 1 break end
        end
      end
      return n
    end

    it("fork chat's system message into each slot: the same outputs, (requests - 1) * P rows saved", function()
      local P = chat_prefix(CHAT_PROMPTS)
      assert.is_true(P >= 32) -- the system message and <|start|>user<|message|>
      for _, case in ipairs {
        { devices = { "cpu" }, scheduler = "static", replica = { slots = 3 } },
        { devices = { "cpu", "cpu" }, scheduler = "continuous", sampling = { temperature = 0.8, seed = 5 } },
      } do
        local base = { model = model, tokenizer = tok, steps = CHAT_STEPS, chat = true, requests = CHAT_PROMPTS,
          devices = case.devices, scheduler = case.scheduler, replica = case.replica, sampling = case.sampling }
        local unshared <close> = getp.new(H.with(base, { share_prefix = false }))
        assert.truthy(unshared:describe():find("; prompt prefixes not shared", 1, true))
        local plain = unshared:run()
        local g <close> = getp.new(base)
        local shared = g:run()
        assert.are.same(plain.outputs, shared.outputs)
        assert.are.equal(0, plain.prefill_saved)
        local saved = 0
        for k, pr in ipairs(shared.per_replica) do
          assert.are.same({ P, (pr.requests - 1) * P }, { pr.shared_prefix, pr.prefill_saved }, "replica " .. k)
          saved = saved + pr.prefill_saved
          -- without replica.slots getp gave each replica a slot more, for the prefix
          if not case.replica then assert.are.equal(#CHAT_PROMPTS + 1, g.replicas[k].slots) end
        end
        assert.are.equal(saved, shared.prefill_saved)
      end
    end)

    it("shares a short prefix only where a slot is to spare, and never gives requests its slot", function()
      local prompts = { "The sea is", "The sea was", "The sky is" } -- " The" shared: one token
      local seen_slots, used = {}, {}
      local watcher = {
        admit = function(_, state)
          seen_slots[#seen_slots + 1] = state.slots
          return math.min(state.free, #state.waiting)
        end,
        on_finish = function(_, seq) used[seq.slot] = true end,
      }
      local expected = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
        requests = prompts, share_prefix = false }.outputs
      local function run(slots)
        local r <close> = model:replica { slots = slots, ctx = STEPS }
        seen_slots, used = {}, {}
        return getp.run { tokenizer = tok, replicas = { r }, steps = STEPS, requests = prompts, scheduler = watcher }
      end
      local spare = run(4)
      assert.are.same(expected, spare.outputs)
      assert.are.same({ 1, 2 }, { spare.per_replica[1].shared_prefix, spare.prefill_saved })
      assert.are.equal(3, seen_slots[1])
      assert.is_nil(used[4])
      local tight = run(3)
      assert.are.same(expected, tight.outputs)
      assert.are.same({ 0, 0 }, { tight.per_replica[1].shared_prefix, tight.prefill_saved })
      assert.are.equal(3, seen_slots[1])
    end)

    it("refuses a share_prefix that is not a boolean", function()
      expect_error(function() getp.new { model = model, tokenizer = tok, devices = { "cpu" }, share_prefix = 1 } end,
        "getp: share_prefix must be a boolean (got number)")
    end)
  end)

  it("prompts with harmony user turns when asked, the rest of the run unchanged", function()
    local harmony = require "gptoss.harmony"
    local seen = {}
    local function capture(reqs, replicas)
      for i, r in ipairs(reqs) do seen[i] = r.tokens end
      return require("gptoss.partition").round_robin(reqs, replicas)
    end
    local g <close> = getp.new { model = model, tokenizer = tok, devices = { "cpu" }, steps = 96, chat = true,
      partition = capture }
    assert.truthy(g:describe():find("prompts as harmony user turns", 1, true), g:describe())
    local result = g:run(PROMPTS)
    for i, text in ipairs(PROMPTS) do
      local want = harmony.render_ids({ harmony.system {}, harmony.user(text) }, tok)
      assert.are.same(want, seen[i], "request " .. i)
      assert.are.equal(200006, want[#want - 1]) -- ... <|start|>assistant
      assert.is_true(#result.outputs[i] >= 1 and #want + #result.outputs[i] <= 96, "request " .. i)
    end
    expect_error(function() getp.new { model = model, tokenizer = tok, devices = { "cpu" }, chat = "yes" } end,
      "getp: chat must be a boolean (got string)")
    expect_error(function() g:run({ "hi", (" word"):rep(5000) }) end, "getp: request 2 renders to",
      "more than initial_context_length (4096)")
  end)

  it("round-trips the course's request and output files", function()
    local input, output = tmp(), tmp()
    write_file(input, ("%d\n%s\n"):format(#PROMPTS, table.concat(PROMPTS, "\n")))
    local prompts, warnings = requests.read(input, { steps = STEPS })
    assert.are.same({}, warnings)
    local result = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, requests = prompts }
    requests.write(output, result.outputs)
    assert.are.same(greedy(), requests.read_output(output))
  end)

  it("reports progress before the first step and after every round, in tokens of the most possible", function()
    local seen = {}
    local result = getp.run { model = model, tokenizer = tok, devices = { "cpu", "cpu" }, steps = STEPS,
      requests = PROMPTS, on_progress = function(p) seen[#seen + 1] = p end }
    assert.is_true(#seen > 2)
    -- before the first step: the two prompts of steps tokens or more are done, and the
    -- others may generate up to steps - their length each
    local most = 0
    for _, text in ipairs(PROMPTS) do most = most + math.max(0, STEPS - #tok:encode(text)) end
    assert.are.same({ done = 2, total = #PROMPTS, tokens = 0, max_tokens = most, steps = 0 },
      { done = seen[1].done, total = seen[1].total, tokens = seen[1].tokens, max_tokens = seen[1].max_tokens,
        steps = seen[1].steps })
    for i = 2, #seen do
      local p, before = seen[i], seen[i - 1]
      assert.are.equal(#PROMPTS, p.total)
      assert.is_true(p.done >= before.done and p.tokens > before.tokens and p.steps > before.steps)
      -- what is still possible only shrinks (a request ending early gives up its rest)
      assert.is_true(p.max_tokens <= before.max_tokens and p.tokens <= p.max_tokens)
      assert.is_true(p.elapsed >= before.elapsed)
    end
    local last = seen[#seen]
    assert.are.same({ done = #PROMPTS, tokens = result.tokens, max_tokens = result.tokens, steps = result.steps },
      { done = last.done, tokens = last.tokens, max_tokens = last.max_tokens, steps = last.steps })
  end)

  it("counts a request that stops early out of the tokens still possible", function()
    -- request 1 draws a stop id as its first generated token (sampling at a flat temperature)
    local L = #tok:encode(PROMPTS[1])
    local seed = seed_drawing { [L] = 200002 }
    local seen = {}
    local result = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      requests = { PROMPTS[1] }, sampling = { temperature = 1e30, seed = seed },
      on_progress = function(p) seen[#seen + 1] = p end }
    assert.are.same({ { 200002 } }, result.outputs)
    assert.are.same({ STEPS - L, 1, 1 }, { seen[1].max_tokens, seen[#seen].max_tokens, seen[#seen].tokens })
  end)

  it("names the replica whose step fails, at no position inside the library", function()
    local broken = H.nan_row_model(model, 5)
    local err = expect_error(function()
      getp.run { model = broken, tokenizer = tok, devices = { "cpu" }, steps = STEPS, requests = { "Hello" },
        sampling = { temperature = 1, seed = 1 } }
    end, "getp: replica 1 (cpu): step:tokens: row 1: ", "the logit of token 5 is NaN")
    assert.is_nil(err:find("%.lua:%d+:"), err)
  end)

  it("runs an empty request list", function()
    local result = getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS, requests = {} }
    assert.are.same({ outputs = {}, tokens = 0, steps = 0 }, { outputs = result.outputs, tokens = result.tokens,
      steps = result.steps })
  end)
end)

describe("getp errors", function()
  local function new(opts)
    return function()
      local g <close> = getp.new(H.with({ model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS }, opts))
    end
  end

  it("rejects bad options, listing the known ones", function()
    expect_error(function() getp.new("cpu") end, "getp: options must be a table (got string)")
    expect_error(new { slots = 4 }, "getp: unknown option 'slots' (known: model, tokenizer, devices, replicas, "
      .. "replica, steps, sampling, partition, scheduler, on_progress, on_step, requests, chat, share_prefix, "
      .. "request_numbers)")
    expect_error(function() getp.new { model = model } end, "getp: tokenizer is required")
    expect_error(new { tokenizer = "build/tokenizer.bin" }, "getp: tokenizer must be a tokenizer from gptoss.tokenizer (got string)")
    expect_error(new { model = tok }, "getp: model must be a model from gptoss.load or gptoss.synthetic (got gptoss.tokenizer)")
    expect_error(function() getp.new { tokenizer = tok } end, "getp: model must be a model", "(got nil)")
    expect_error(new { model = gptoss.synthetic({ vocab_size = 1000 }, { seed = 1 }) },
      "getp: the tokenizer has 201088 entries but the model's vocabulary has 1000")
    expect_error(new { on_progress = true }, "getp: on_progress must be a function (got boolean)")
    expect_error(new { on_step = {} }, "getp: on_step must be a function (got table)")
  end)

  it("rejects steps that are not a non-negative integer", function()
    for _, steps in ipairs { -1, 2.5, "24" } do
      expect_error(new { steps = steps }, "getp: steps must be a non-negative integer, 0 meaning the model's seq_len 2048",
        "(got " .. tostring(steps) .. ")")
    end
  end)

  it("rejects bad devices and replica options", function()
    expect_error(new { devices = {} }, "getp: no replicas (devices must be a non-empty list")
    expect_error(new { devices = "cpu" }, "getp: no replicas")
    expect_error(new { devices = { "cpu", "gpu" } }, "getp: devices[2] must be \"cpu\" or a GPU number (got gpu)")
    expect_error(new { devices = { "cpu", 99 } }, "getp: building the replica on gpu 99: replica:")
    expect_error(new { replica = { ctx = 8 } },
      "getp: unknown replica option 'ctx' (known: weights, kv, slots, threads, rows, chunk, on_progress)")
    expect_error(new { replica = 4 }, "getp: replica must be a table of replica options (got number)")
    expect_error(new { replica = { slots = 0 } }, "getp: building the replica on cpu: replica: slots = 0 must be in 1..")
    expect_error(new { replica = { weights = "fp8" } }, "getp: building the replica on cpu: replica:", "fp8")
  end)

  it("rejects replicas that cannot run the requests", function()
    local r <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    local small <close> = model:replica { device = "cpu", slots = 2, ctx = 8 }
    local other_model = gptoss.synthetic("7m", { seed = 2 })
    local other <close> = other_model:replica { device = "cpu", slots = 1, ctx = STEPS }
    local closed = model:replica { device = "cpu", slots = 1, ctx = STEPS }
    closed:close()
    expect_error(new { replicas = { r } }, "getp: devices and replica options are for the replicas getp builds; "
      .. "give them or replicas, not both")
    local function given(replicas, steps)
      return function()
        local g <close> = getp.new { model = model, tokenizer = tok, replicas = replicas, steps = steps or STEPS }
      end
    end
    expect_error(given {}, "getp: no replicas (replicas must be a non-empty list of replica objects)")
    expect_error(given { r, "cpu" }, "getp: replicas[2] must be a replica (got string)")
    expect_error(given { r, closed }, "getp: replicas[2] is closed")
    expect_error(given { other }, "getp: replicas[1] holds another model than the one given")
    expect_error(given { small }, "getp: replicas[1] holds 8 positions a slot but steps = 24 feeds positions up to 22 (ctx >= 23)")
    given({ small }, 9)() -- positions up to 7
  end)

  it("rejects one replica given twice", function()
    local r <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    local s <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    for _, replicas in ipairs({ { r, r }, { r, s, r } }) do
      expect_error(function()
        local g <close> = getp.new { model = model, tokenizer = tok, replicas = replicas, steps = STEPS }
      end, ("getp: replicas[%d] is replicas[1] again"):format(#replicas))
    end
  end)

  it("rejects bad sampling", function()
    expect_error(new { sampling = 0.8 }, "getp: sampling must be a table (got number)")
    expect_error(new { sampling = { temp = 1 } },
      "getp: unknown sampling option 'temp' (known: temperature, top_k, top_p, min_p, seed, presence_penalty, "
      .. "frequency_penalty)")
    expect_error(new { sampling = { temperature = -1 } }, "getp: sampling: temperature must be a finite number >= 0")
    expect_error(new { sampling = { temperature = 1, top_p = 2 } }, "getp: sampling: top_p")
    expect_error(new { sampling = { temperature = 1, seed = 1.5 } }, "getp: sampling:", "seed")
  end)

  it("rejects unknown partitions and schedulers", function()
    expect_error(new { partition = "zigzag" },
      "getp: partition must be one of round_robin, blocks, balanced or a function(requests, replicas) (got 'zigzag')")
    expect_error(new { partition = 3 }, "getp: partition must be one of", "(got number)")
    expect_error(new { scheduler = "fifo" },
      "getp: unknown scheduler 'fifo' (known: continuous, static, or an object with an admit method)")
    expect_error(new { scheduler = 3 }, "getp: scheduler must be continuous, static or an object with an admit method (got number)")
    expect_error(new { scheduler = { prefill_chunk = function() return 1 end } },
      "getp: scheduler must be continuous, static or an object with an admit method (got one without admit)")
    expect_error(new { scheduler = { admit = function() return 1 end, on_finish = "log" } },
      "getp: scheduler.on_finish must be a function (got string)")
  end)

  it("rejects a partition function's bad assignment", function()
    local r1 <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    local r2 <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    local prompts = { "a", "b", "c" }
    local function with(assignment)
      return function()
        getp.run { tokenizer = tok, replicas = { r1, r2 }, steps = STEPS, requests = prompts,
          partition = function() return assignment end }
      end
    end
    expect_error(with(nil), "partition: the partition must return a table of request lists, one per replica (got nil)")
    expect_error(with { { 1 }, { 2 }, { 3 } }, "partition: assignment[3] names no replica (there are 2: 1..2)")
    expect_error(with { x = { 1, 2, 3 } }, "partition: assignment[x] names no replica")
    expect_error(with { { 1, 2, 3 }, "none" }, "partition: assignment[2] must be a list of request indices (got string)")
    expect_error(with { { 1, 2.5 }, { 3 } }, "partition: assignment[1][2] = 2.5 is not a request index (1..3)")
    expect_error(with { { 1, 2 }, { 4 } }, "partition: assignment[2][1] = 4 is not a request index (1..3)")
    expect_error(with { { 1, 2 }, { 2, 3 } }, "partition: request 2 is assigned twice (replica 1 and replica 2)")
    expect_error(with { { 2 } }, "partition: request 1 is assigned to no replica (2 requests missing in all)")
    -- a missing list is an idle replica
    with { nil, { 3, 2, 1 } }()
  end)

  it("rejects a scheduler's nonsense answers", function()
    local r <close> = model:replica { device = "cpu", slots = 3, ctx = STEPS }
    local prompts = { "a", "b", "c", "d", "e" }
    local function with(sched)
      return function()
        getp.run { tokenizer = tok, replicas = { r }, steps = STEPS, requests = prompts, scheduler = sched }
      end
    end
    local function admit(v) return { admit = function() return v end } end
    for _, v in ipairs { 4, -1, 1.5, "2", true } do
      expect_error(with(admit(v)), ("scheduler: admit returned %s on replica 1; expected an integer in 0..3 "
        .. "(3 slots free, 5 waiting)"):format(tostring(v)))
    end
    expect_error(with(admit(nil)), "scheduler: admit returned nil on replica 1")
    expect_error(with(admit(0)), "scheduler: admit returned 0 on replica 1 while nothing runs there (5 waiting, "
      .. "3 slots free): it would wait forever")
    local function chunk(v)
      return { admit = function(_, st) return math.min(st.free, #st.waiting) end, prefill_chunk = function() return v end }
    end
    expect_error(with(chunk(2)), "scheduler: prefill_chunk returned 2 for request 1 on replica 1; expected an integer "
      .. "in 0..1 (1 prompt tokens left, 64 rows left in the step, at most 64 rows of one slot per step)")
    expect_error(with(chunk("1")), "scheduler: prefill_chunk returned 1 for request 1")
    expect_error(with(chunk(0)), "scheduler: prefill_chunk returned 0 for every sequence on replica 1 and none "
      .. "decodes: the step would be empty")
    -- the replica still works after a failed run
    assert.are.same(reference(prompts, STEPS), getp.run { tokenizer = tok, replicas = { r }, steps = STEPS,
      requests = prompts }.outputs)
  end)

  it("rejects bad requests, naming the request", function()
    local g <close> = getp.new { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS }
    expect_error(function() g:run("Hello") end, "getp: requests must be a list of prompt strings (got string)")
    expect_error(function() g:run() end, "getp: requests must be a list of prompt strings (got nil)")
    expect_error(function() g:run { "Hello", 5 } end, "getp: request 2 must be a string (got number)")
    expect_error(function() g:run { "Hello", "" } end,
      "getp: request 2 encodes to no tokens (an empty prompt: the course's getp exits there)")
    expect_error(function() g:run { "\0Hello" } end, "getp: request 1 encodes to no tokens")
    expect_error(new { requests = { 1 } }, "getp: request 1 must be a string (got number)")
    expect_error(new { request_numbers = "1" }, "getp: request_numbers must be a list of positive integers (got string)")
    expect_error(new { request_numbers = { 1, 0 } }, "getp: request_numbers[2] must be a positive integer (got 0)")
    expect_error(new { request_numbers = { 1.5 } }, "getp: request_numbers[1] must be a positive integer (got 1.5)")
    local numbered <close> = getp.new { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      request_numbers = { 7, 9 } }
    expect_error(function() numbered:run { "Hello" } end, "getp: request_numbers has 2 entries, one a prompt, but the run has 1 prompt")
    expect_error(function() numbered:run { "Hello", "" } end, "getp: request 9 encodes to no tokens")
    expect_error(function() getp.requests_of({ model = model, tokenizer = tok, steps = STEPS }, { "" }, { 4 }) end,
      "getp: request 4 encodes to no tokens")
    expect_error(function() getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS } end,
      "getp: requests must be a list of prompt strings (got nil)")
  end)
end)
