-- gptoss.partition's built-ins and its check of an assignment, and gptoss.scheduler's
-- hooks as gptoss.getp calls them on a CPU replica of the synthetic 7m model: what the
-- state and the sequences hold at each call, the order of admissions and prefill chunks,
-- and the exact step counts of static and continuous batching.
local gptoss = require "gptoss"
local getp = require "gptoss.getp"
local partition = require "gptoss.partition"
local scheduler = require "gptoss.scheduler"
local util = require "gptoss.util"
local H = require "helpers"
local expect_error = H.expect_error

-- requests as a partition sees them, with the given limits
local function requests_of(limits)
  local list = {}
  for i, limit in ipairs(limits) do list[i] = { index = i, text = "", tokens = { 1 }, limit = limit } end
  return list
end
local function replicas_of(n)
  local list = {}
  for k = 1, n do list[k] = { slots = 1 } end
  return list
end

describe("partition", function()
  it("round_robin deals the requests in turn", function()
    assert.are.same({ { 1, 4, 7 }, { 2, 5 }, { 3, 6 } },
      partition.round_robin(requests_of { 1, 1, 1, 1, 1, 1, 1 }, replicas_of(3)))
    assert.are.same({ {}, {} }, partition.round_robin({}, replicas_of(2)))
  end)

  it("blocks cuts contiguous runs whose sizes differ by one at most, the longer first", function()
    assert.are.same({ { 1, 2, 3 }, { 4, 5 }, { 6, 7 } }, partition.blocks(requests_of { 1, 1, 1, 1, 1, 1, 1 }, replicas_of(3)))
    assert.are.same({ { 1 }, { 2 }, {} }, partition.blocks(requests_of { 1, 1 }, replicas_of(3)))
    assert.are.same({ { 1, 2, 3, 4 } }, partition.blocks(requests_of { 1, 1, 1, 1 }, replicas_of(1)))
  end)

  it("balanced gives the heaviest requests first to the least loaded replica, each in index order", function()
    -- by work: 2 (20), 4 (20), 5 (10), 1 (5), 3 (3), 6 (1); loads 20/20 tie on counts too: replica 1
    assert.are.same({ { 2, 5 }, { 1, 3, 4, 6 } }, partition.balanced(requests_of { 5, 20, 3, 20, 10, 1 }, replicas_of(2)))
    -- no work anywhere: the request counts decide
    assert.are.same({ { 1, 3 }, { 2, 4 } }, partition.balanced(requests_of { 0, 0, 0, 0 }, replicas_of(2)))
  end)

  it("accepts every request once, idle replicas included", function()
    partition.check({ { 2 }, {}, { 1 } }, 2, 3)
    partition.check({ nil, { 1 } }, 1, 2)
    partition.check({}, 0, 2)
  end)

  it("names its built-ins in partition.names, in the order documented", function()
    assert.are.same({ "round_robin", "blocks", "balanced" }, partition.names)
    local functions = 0
    for key, v in pairs(partition) do
      if type(v) == "function" and key ~= "check" then
        functions = functions + 1
        assert.is_true(util.listed(partition.names, key), key)
      end
    end
    assert.are.equal(#partition.names, functions)
  end)

  it("rejects misuse of the built-ins", function()
    expect_error(function() partition.round_robin("x", replicas_of(1)) end,
      "partition.round_robin: requests must be a list (got string)")
    expect_error(function() partition.blocks(requests_of { 1 }, {}) end, "partition.blocks: no replicas to assign requests to")
    expect_error(function() partition.balanced(requests_of { 1 }) end, "partition.balanced: no replicas")
  end)
end)

describe("scheduler", function()
  local model = gptoss.synthetic("7m", { seed = 1 })
  local tok = gptoss.tokenizer(H.TOKENIZER)
  local STEPS = 16
  -- 1, 2, 9 and 9 tokens
  local PROMPTS = { "Hello", "Hello world", "Write a short haiku about the ocean.", "Once upon a time, in a land" }

  local expected
  local function continuous()
    expected = expected or getp.run { model = model, tokenizer = tok, devices = { "cpu" }, steps = STEPS,
      requests = PROMPTS }.outputs
    return expected
  end

  local function indices(seqs)
    local list = {}
    for i, seq in ipairs(seqs) do list[i] = seq.index end
    return list
  end

  -- One run of the prompts with a scheduler of our own on 2 slots, made by the first test
  -- that asks: admit takes one request a step, prefill_chunk at most 4 tokens; each
  -- checks the arguments it gets as documented, and records them. Returns {result,
  -- admits, chunks, finished}.
  local custom
  local function custom_run()
    if custom then return custom end
    local r <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    local admits, chunks, finished = {}, {}, {}
    local sched
    sched = {
      admit = function(self, st)
        assert.are.equal(sched, self)
        assert.are.equal(r, st.replica)
        assert.are.same({ 1, 2, 64, 64 }, { st.index, st.slots, st.rows, st.chunk })
        assert.are.equal(st.slots - #st.running, st.free)
        assert.is_true(st.free > 0 and #st.waiting > 0)
        admits[#admits + 1] = { step = st.step, free = st.free, waiting = indices(st.waiting), running = indices(st.running) }
        return 1
      end,
      prefill_chunk = function(_, seq, st)
        assert.are.equal(r, seq.replica)
        assert.are.equal(PROMPTS[seq.index], seq.text)
        assert.are.same(tok:encode(seq.text), seq.prompt)
        assert.are.equal(STEPS - #seq.prompt, seq.limit)
        assert.are.same({}, seq.output)
        assert.is_nil(seq.finish)
        assert.is_nil(seq.sampling)
        assert.is_true(seq.position < #seq.prompt and st.rows_left >= 1)
        chunks[#chunks + 1] = { seq.index, seq.slot, seq.position, st.step }
        return math.min(4, #seq.prompt - seq.position)
      end,
      on_finish = function(_, seq, st)
        assert.are.equal("length", seq.finish) -- the 7m model emits no stop id greedily here
        assert.are.equal(seq.limit, #seq.output)
        for _, other in ipairs(st.running) do assert.are_not.equal(seq, other) end
        assert.is_true(st.free >= 1)
        finished[#finished + 1] = seq
      end,
    }
    local result = getp.run { tokenizer = tok, replicas = { r }, steps = STEPS, scheduler = sched, requests = PROMPTS }
    custom = { result = result, admits = admits, chunks = chunks, finished = finished }
    return custom
  end

  it("calls admit, prefill_chunk and on_finish with what is documented; the outputs stay the same", function()
    assert.are.same(continuous(), custom_run().result.outputs)
  end)

  it("admits as admit says, while slots are free", function()
    -- one admission a step while slots are free: 1 and 2 into steps 0 and 1; both end at
    -- step 14 (15 and 14 ids, one a step from the step that fed their last prompt token),
    -- and 3 and 4 follow into the freed slots at steps 15 and 16. A step is built before
    -- the ids of the one running are read, so state.step (steps read) is 0 while step 1 is
    -- built, and 15 while step 16 is; no step ran ahead of the ends at 14 (nothing to feed)
    assert.are.same({
      { step = 0, free = 2, waiting = { 1, 2, 3, 4 }, running = {} },
      { step = 0, free = 1, waiting = { 2, 3, 4 }, running = { 1 } },
      { step = 15, free = 2, waiting = { 3, 4 }, running = {} },
      { step = 15, free = 1, waiting = { 4 }, running = { 3 } },
    }, custom_run().admits)
  end)

  it("prefills in the chunks prefill_chunk asks for, in the slot admitted to", function()
    local chunks = custom_run().chunks
    assert.are.same({ 1, 1, 0, 0 }, chunks[1])
    assert.are.same({ 2, 2, 0, 0 }, chunks[2])
    -- request 3 (9 tokens) in chunks of 4, 4 and 1, in request 1's old slot
    local three = {}
    for _, c in ipairs(chunks) do
      if c[1] == 3 then three[#three + 1] = { c[2], c[3] } end
    end
    assert.are.same({ { 1, 0 }, { 1, 4 }, { 1, 8 } }, three)
  end)

  it("calls on_finish once a request, with its output", function()
    local run = custom_run()
    local result, finished = run.result, run.finished
    assert.are.same({ 1, 2, 3, 4 }, indices(finished))
    for _, seq in ipairs(finished) do assert.are.equal(result.outputs[seq.index], seq.output) end
    assert.are.equal(result.tokens, #result.outputs[1] + #result.outputs[2] + #result.outputs[3] + #result.outputs[4])
  end)

  it("names its built-in policies in scheduler.names, each a maker of a policy so named", function()
    assert.are.same({ "continuous", "static" }, scheduler.names)
    local functions = 0
    for key, v in pairs(scheduler) do
      if type(v) == "function" then
        functions = functions + 1
        assert.is_true(util.listed(scheduler.names, key), key)
      end
    end
    assert.are.equal(#scheduler.names, functions)
    for _, name in ipairs(scheduler.names) do
      local policy = scheduler[name]()
      assert.are.equal(name, policy.name)
      assert.are.equal("function", type(policy.admit))
      assert.are_not.equal(policy, scheduler[name]()) -- a fresh object each time
    end
  end)

  it("batches statically: a new batch when every slot is free", function()
    local r <close> = model:replica { device = "cpu", slots = 2, ctx = STEPS }
    local static, admitted = scheduler.static(), {}
    local spy = {
      name = "spy",
      admit = function(self, st)
        local n = static:admit(st)
        if n > 0 then admitted[#admitted + 1] = { st.free, st.slots, n } end
        return n
      end,
    }
    local g <close> = getp.new { tokenizer = tok, replicas = { r }, steps = STEPS, scheduler = spy }
    assert.truthy(g:describe():find("scheduler spy", 1, true))
    local result = g:run(PROMPTS)
    local out = result.outputs
    assert.are.same(continuous(), out)
    assert.are.same({ { 2, 2, 2 }, { 2, 2, 2 } }, admitted)
    -- each batch prefills in one step, then decodes until its longest output is complete
    assert.are.equal(math.max(#out[1], #out[2]) + math.max(#out[3], #out[4]), result.steps)
  end)

  it("batches continuously: every request at once when the slots suffice", function()
    local r <close> = model:replica { device = "cpu", slots = 4, ctx = STEPS }
    local result = getp.run { tokenizer = tok, replicas = { r }, steps = STEPS, scheduler = scheduler.continuous(),
      requests = PROMPTS }
    local longest = 0
    for _, o in ipairs(result.outputs) do longest = math.max(longest, #o) end
    assert.are.equal(longest, result.steps)
    assert.are.same(continuous(), result.outputs)
  end)

  it("gives a CPU step room for one row per slot at least", function()
    local r <close> = model:replica { device = "cpu", slots = 70, ctx = 4 }
    local rows
    getp.run { tokenizer = tok, replicas = { r }, steps = 4, requests = { "Hello" },
      scheduler = { admit = function(_, st) rows = st.rows return 1 end } }
    assert.are.equal(70, rows)
  end)
end)
