-- gptoss.runner's forks of a prompt's beginning: the choices of one request (seq.prompt_from)
-- and prompts that begin alike (runner.new's share), each sequence drawing the ids it would
-- draw fed alone, a slot whose windowed rings lost the keys giving none.
local gptoss = require "gptoss"
local runner = require "gptoss.runner"
local scheduler = require "gptoss.scheduler"

describe("the runner's choices of one request (seq.prompt_from)", function()
  local r = gptoss.synthetic("7m"):replica { slots = 3, ctx = 64 }
  local PROMPT = { 5, 6, 7, 8, 9, 10, 11, 12 }

  -- Three choices of a prompt, each drawing with its own seed; shared: the second and third
  -- fork the first's prompt.
  local function choices(shared)
    local seqs = {}
    for i = 1, 3 do
      seqs[i] = { prompt = PROMPT, output = {}, limit = 4, position = 0, index = i,
        sampling = { temperature = 1, seed = 40 + i }, prompt_from = shared and seqs[1] or nil }
    end
    return seqs
  end

  -- Runs seqs to their end a step at a time (admit: the scheduler's, default continuous;
  -- after_first(seqs) runs once the first step is built): the prompt rows of each step.
  local function run(seqs, opts)
    opts = opts or {}
    local sched = opts.admit and { admit = opts.admit } or scheduler.continuous()
    local rn = runner.new(sched, opts.replica or r, 1, {}, { rows = 64, chunk = opts.chunk or 64, stop = {} })
    for i, s in ipairs(seqs) do rn:arrive(s, i) end
    local fed = {}
    while rn:busy() do
      local plan = rn:build()
      fed[#fed + 1] = plan.prefill_rows
      if #fed == 1 and opts.after_first then opts.after_first(rn, seqs) end
      rn:apply(plan, r:step(plan.batch):tokens())
    end
    return fed
  end

  local alone = choices(false)
  local alone_fed = run(alone)

  it("forks the first's prompt less its last token into the others once a step has fed it: their own ids", function()
    assert.are.same({ 3 * #PROMPT, 0, 0, 0 }, alone_fed)
    local shared = choices(true)
    assert.are.same({ #PROMPT, 2, 0, 0, 0 }, run(shared))
    for i = 1, 3 do assert.are.same(alone[i].output, shared[i].output, "choice " .. i) end
    assert.are_not.same(alone[1].output, alone[2].output) -- the seeds tell them apart
    assert.is_nil(shared[2].prompt_from)
  end)

  it("forks into a choice admitted once the first decodes while its slot holds the prompt, else feeds it", function()
    local late = choices(true)
    -- one admission a step: the second comes while the first has fed just its prompt, the
    -- third once it decodes (a CPU replica's slot keeps every position: both fork)
    local one_a_step = function(_, st) return math.min(1, st.free, #st.waiting) end
    local fed = run(late, { admit = one_a_step })
    assert.are.same({ #PROMPT, 1, 1, 0, 0, 0 }, fed)
    for i = 1, 3 do assert.are.same(alone[i].output, late[i].output, "choice " .. i) end
    -- a slot whose rings lost the prompt's keys (a GPU's, past them: r:rewind_limit) gives none
    local lost = choices(true)
    local ringed = setmetatable({ rewind_limit = function() return #PROMPT end }, { __index = function(_, k)
      local v = r[k]
      if type(v) ~= "function" then return v end
      return function(_, ...) return v(r, ...) end
    end })
    fed = run(lost, { admit = one_a_step, replica = ringed })
    assert.are.same({ #PROMPT, #PROMPT, #PROMPT, 0, 0, 0 }, fed)
    for i = 1, 3 do assert.are.same(alone[i].output, lost[i].output, "choice " .. i) end
    local orphans = choices(true)
    -- the first goes (its client left) while the others wait for its prompt's second chunk
    fed = run(orphans, { chunk = 5, after_first = function(rn, seqs) rn:cancel(seqs[1], "disconnected") end })
    assert.are.same({ 5, 10, 6, 0, 0, 0 }, fed)
    for i = 2, 3 do assert.are.same(alone[i].output, orphans[i].output, "choice " .. i) end
  end)
end)

describe("the runner's prompts that begin alike (share)", function()
  local r = gptoss.synthetic("7m"):replica { slots = 4, ctx = 128 }

  -- A prompt of the 40 ids every one begins with, then its own: `alike` more of those, then
  -- ids from `own`.
  local function prompt(alike, own)
    local p = {}
    for i = 1, 40 + alike do p[i] = 100 + i end
    for i = 1, 6 do p[#p + 1] = own + i end
    return p
  end

  -- Runs the sequences of prompts to their end (one admitted a step when one_a_step; share
  -- on unless unshared): the prompt rows of each step and each sequence's output.
  local function run(prompts, opts)
    opts = opts or {}
    local sched = opts.one_a_step and { admit = function(_, st) return math.min(1, st.free, #st.waiting) end }
      or scheduler.continuous()
    local rn = runner.new(sched, r, 1, {}, { rows = 64, chunk = 64, stop = {}, share = not opts.unshared })
    local seqs = {}
    for i, p in ipairs(prompts) do
      seqs[i] = { prompt = p, output = {}, limit = opts.limit or 3, position = 0, index = i,
        sampling = { temperature = 1, seed = 70 + i } }
      rn:arrive(seqs[i], i)
    end
    local fed = {}
    while rn:busy() do
      local plan = rn:build()
      fed[#fed + 1] = plan.prefill_rows
      rn:apply(plan, r:step(plan.batch):tokens())
    end
    local outputs = {}
    for i, seq in ipairs(seqs) do outputs[i] = seq.output end
    return fed, outputs, rn
  end

  it("forks the beginning a prompt shares with one admitted before it: the same ids as fed alone", function()
    local prompts = { prompt(0, 1000), prompt(4, 2000), prompt(4, 3000) }
    local _, alone = run(prompts, { unshared = true })
    local fed, shared, rn = run(prompts)
    -- the second forks the 40 ids it shares with the first, the third the 44 it shares with
    -- the second (the latest), each feeding the rest once the one before fed those
    assert.are.same({ 46, 10, 6, 0, 0 }, fed)
    assert.are.same(alone, shared)
    assert.are.same({}, rn.sharers) -- an ended sequence gives no more
  end)

  it("shares no beginning shorter than 33 ids, nor one of a sequence that ended", function()
    local fed = run { prompt(-10, 1000), prompt(-10, 2000) } -- 30 ids alike: each fed whole
    assert.are.equal(72, fed[1] + fed[2])
    -- one sequence at a time: each comes once the one before, of the same prompt, ended
    local one_at_a_time = function(_, st) return #st.running == 0 and math.min(1, #st.waiting) or 0 end
    local rn = runner.new({ admit = one_at_a_time }, r, 1, {}, { rows = 64, chunk = 64, stop = {}, share = true })
    fed = {}
    for i = 1, 2 do rn:arrive({ prompt = prompt(0, 1000), output = {}, limit = 2, position = 0, index = i }, i) end
    while rn:busy() do
      local plan = rn:build()
      fed[#fed + 1] = plan.prefill_rows
      rn:apply(plan, r:step(plan.batch):tokens())
    end
    assert.are.same({ 46, 0, 46, 0 }, fed)
  end)

  it("shares no beginning that goes fewer than 32 ids past the prefix slot's", function()
    local rs = gptoss.synthetic("7m"):replica { slots = 4, ctx = 128 }
    local ids = prompt(0, 1000)
    local prefix = { slot = 4, ids = table.move(ids, 1, 40, 1, {}), length = 40 }
    local slots, positions = {}, {}
    for p = 0, 39 do slots[p + 1], positions[p + 1] = 4, p end
    rs:step { slots = slots, positions = positions, tokens = prefix.ids } -- the prefix slot, filled
    local rn = runner.new(scheduler.continuous(), rs, 1, {}, { rows = 64, chunk = 64, stop = {}, prefix = prefix,
      share = true })
    -- both begin with the prefix and 3 ids more: each forks the prefix and feeds its own rest
    local a, b = prompt(3, 2000), prompt(3, 3000)
    for i, p in ipairs { a, b } do
      rn:arrive({ prompt = p, output = {}, limit = 1, position = 0, index = i }, i)
    end
    assert.are.equal(2 * (#a - 40), rn:build().prefill_rows)
  end)
end)
