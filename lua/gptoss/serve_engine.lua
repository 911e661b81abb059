--- gptoss.serve_engine (internal, gptoss.serve's): the engine loop. Requests arrive as
-- sequences (gptoss.scheduler's header describes them) while replicas step; each replica
-- has a runner (gptoss.runner) under the server's scheduler, which admits the waiting into
-- free slots, prefills prompts in chunks beside the decoding rows, forks the shared
-- prefix (the default harmony system message) into each slot whose prompt begins with it,
-- and forks into a request's slot the beginning its prompt shares with one admitted before
-- it (runner.new's share: the same system and developer messages, tools or schema).
--
-- The loop is one cqueues coroutine of the server's one Lua thread. A replica keeps two
-- steps in flight, the next built and enqueued (fed by the running one on the device)
-- before the running one is read, as getp's loop does; a step is read only once h:ready()
-- says it is done, so between steps the loop yields and the HTTP side accepts, parses and
-- streams. Each new id goes to its sequence's on_id(seq, id, logprob) at once (a sequence
-- with seq.turn has its tracker take it there: the runner then sees whether it changed the
-- turn), and an ended sequence to on_end(seq); both are called from the loop and must not
-- yield. engine.read_at is gptoss.clock() when the step whose ids they get was read (one
-- clock a step, not one an id).
--
-- Each step of a replica is timed from the moment the step before it was read (or, from
-- idle, it was enqueued) to the moment it is read: host is the part until the loop first
-- finds it still running after the request coroutines woken by the ids had their turn (the
-- Lua work of a step: ids handed out, chunks encoded and written), waited the rest (the
-- device's time not hidden under that work). on_step(k, host, waited, generated, prefilled)
-- gets them with the ids the step generated and the prompt rows it fed.
local cqueues = require "cqueues"
local condition = require "cqueues.condition"
local generate = require "gptoss.generate"
local gptoss = require "gptoss"
local getp_replicas = require "gptoss.getp_replicas"
local harmony = require "gptoss.harmony"
local runner = require "gptoss.runner"
local serve_openai = require "gptoss.serve_openai"
local util = require "gptoss.util"

local serve_engine = {}

-- seconds without work after which the engine gives freed memory back (gptoss.trim_memory)
local IDLE_TRIM = 1

local STOP = {}
for _, id in ipairs(harmony.stop_ids) do STOP[id] = true end

-- Steps a replica keeps in flight: while one runs the next waits on the device, built
-- (fed by the one running) before the running one is read, so the device never waits for
-- the host between steps, as getp's loop keeps it.
local DEPTH = 2

local Engine = {}
Engine.__index = Engine

-- The shared prefix a replica holds in its last slot: {slot =, ids =, length =}, prefilled
-- here; nil when the replica has no slot to spare for it.
local function prefill_prefix(r, ids)
  if not ids or #ids == 0 or r.slots < 2 then return nil end
  r:sampling(r.slots) -- its rows' ids are never read
  generate.feed(r, r.slots, ids, 0)
  return { slot = r.slots, ids = ids, length = #ids }
end

--- serve_engine.new{replicas =, scheduler =, prefix = ids or nil, max_queue =, on_error =
-- function(message), on_step = function(k, host, waited, generated, prefilled) or nil,
-- on_ids = function() or nil (called once a step's ids and ends are all handed out),
-- depth = steps a replica keeps in flight or nil (DEPTH; 1: each step is built once the one
-- before is read, no row fed on the device: the reference the pipelined ids must equal)}:
-- runners over the replicas, nothing running yet.
function serve_engine.new(opts)
  local self = setmetatable({ replicas = opts.replicas, scheduler = opts.scheduler, max_queue = opts.max_queue,
    depth = opts.depth or DEPTH,
    runners = {}, flights = {}, prefixes = {}, wake = condition.new(), stopping = false,
    on_error = opts.on_error, on_step = opts.on_step, on_ids = opts.on_ids, next_index = 0, turn = 0, timing = {} },
    Engine)
  for k, r in ipairs(self.replicas) do
    self.prefixes[k] = prefill_prefix(r, opts.prefix)
    self.flights[k] = {} -- the steps enqueued and not yet read, oldest first
    self:restart_runner(k)
  end
  return self
end

-- A fresh runner on replica k (at start, and after a failure ended every sequence of the
-- one before).
function Engine:restart_runner(k)
  local rows, chunk = getp_replicas.bounds(self.replicas[k])
  self.runners[k] = runner.new(self.scheduler, self.replicas[k], k, {},
    { rows = rows, chunk = chunk, stop = STOP, prefix = self.prefixes[k], share = true })
end

-- Sequences queued on a runner that its free slots will not take at its next step.
local function beyond_free(rn)
  return math.max(#rn.state.waiting - rn.state.free, 0)
end

--- Sequences waiting for a slot, on every replica: those queued that no free slot awaits
-- (a sequence that arrived with a slot free is only queued until the next step admits it).
function Engine:waiting()
  local n = 0
  for _, rn in ipairs(self.runners) do n = n + beyond_free(rn) end
  return n
end

--- Slots held by running requests, and the slots requests may take, on every replica.
function Engine:slots_in_use()
  local used, total = 0, 0
  for _, rn in ipairs(self.runners) do
    used, total = used + #rn.state.running, total + rn.state.slots
  end
  return used, total
end

--- The most positions a prompt and its output may take (every replica has the same ctx).
function Engine:ctx()
  return self.replicas[1].ctx
end

-- The replica a new sequence joins: the one with the fewest sequences waiting or running.
function Engine:least_loaded()
  local best, load = 1, math.huge
  for k, rn in ipairs(self.runners) do
    local n = #rn.state.waiting + #rn.state.running
    if n < load then best, load = k, n end
  end
  return best
end

-- The sampling option of a table that replica r refuses (r:check_sampling, each option
-- checked alone so that the answer names it; nil when only their mix is refused) and the
-- replica's message; nothing when r takes the table.
local function refused_sampling(r, sampling)
  local ok, err = pcall(r.check_sampling, r, sampling)
  if ok then return end
  for _, name in ipairs(gptoss.sample_options()) do
    if sampling[name] ~= nil then
      local alone, why = pcall(r.check_sampling, r, { [name] = sampling[name] })
      if not alone then return name, why end
    end
  end
  return nil, err
end

--- Queues the sequences of one request (seq: prompt, limit, sampling, on_id, on_end), all
-- on one replica, or none: returns false when they would leave more than max_queue
-- sequences waiting for a slot (none free for them), and raises
-- a 400 error object (serve_openai.fail) naming the option when the replica refuses a
-- sequence's sampling, which would otherwise fail at its admission. The scheduler's
-- on_arrival(self, seq, state), when it has one, says where each joins the queue (an index
-- into state.waiting; default: its end, first come first served).
function Engine:submit(seqs)
  if self.stopping then return false end
  local k = self:least_loaded()
  local rn, sched = self.runners[k], self.scheduler
  local after = self:waiting() - beyond_free(rn) + math.max(#rn.state.waiting + #seqs - rn.state.free, 0)
  if after > self.max_queue then return false end
  for _, seq in ipairs(seqs) do
    local option, why = refused_sampling(self.replicas[k], seq.sampling)
    if why then
      serve_openai.fail(("%s cannot be sampled by this server: %s"):format(option and ("'" .. option .. "'")
        or "the sampling options", util.bare(why):gsub("^replica:check_sampling: ", "")), option)
    end
  end
  for _, seq in ipairs(seqs) do
    self.next_index = self.next_index + 1
    seq.index, seq.replica, seq.position, seq.output = self.next_index, self.replicas[k], 0, {}
    seq.runner = rn
    local waiting, at = rn.state.waiting, #rn.state.waiting + 1
    if sched.on_arrival then
      at = sched.on_arrival(sched, seq, rn.state)
      if math.type(at) ~= "integer" or at < 1 or at > #waiting + 1 then
        error(("scheduler: on_arrival returned %s; expected an integer in 1..%d"):format(tostring(at),
          #waiting + 1), 0)
      end
    end
    rn:arrive(seq, at)
  end
  self.wake:signal()
  return true
end

--- Ends seq early (its client went away, a stop string, ...) with seq.finish = finish.
function Engine:cancel(seq, finish)
  if seq.runner and not seq.finish then
    seq.runner:cancel(seq, finish)
    seq.on_end(seq)
  end
end

-- Enqueues plan's step on replica k, fed by its newest step in flight (none: fed nothing);
-- notes whether any of its sequences asked for logprobs.
function Engine:enqueue(k, plan)
  local flight = self.flights[k]
  plan.batch.from = flight[#flight] and flight[#flight].handle
  local seqs = plan.seqs
  for i = 1, #seqs do
    if seqs[i].sampling.logprobs then plan.logprobs = true end
  end
  plan.handle = self.replicas[k]:step(plan.batch)
  flight[#flight + 1] = plan
end

-- Builds and enqueues steps on replica k until self.depth are in flight or there is
-- nothing to step.
function Engine:fill(k)
  local flight, rn = self.flights[k], self.runners[k]
  while #flight < self.depth and rn:busy() do
    local plan = rn:build(flight[#flight])
    if not plan then return end
    self:enqueue(k, plan)
  end
end

-- Replica k's oldest step, done: its ids handed to their sequences, then the steps after
-- it built. A row no id could be drawn for ends its own sequence with an error (the rows
-- fed by it in the step after fail too, and are dropped as an ended sequence's are).
-- Returns how many ids it generated and how many prompt rows it fed.
function Engine:advance(k)
  local rn, plan = self.runners[k], table.remove(self.flights[k], 1)
  local h = plan.handle
  local ids, failed = h:tokens { partial = true }
  local logprobs = plan.logprobs and h:logprobs { partial = true } or {}
  local seqs, rows = plan.seqs, plan.rows
  local generated, ended, taken = rn:apply(plan, ids, failed)
  for i = 1, #rows do
    if taken[i] then
      local seq, row = seqs[i], rows[i]
      seq.on_id(seq, ids[row], logprobs[row] or nil)
      if seq.turn then rn:observed(seq, plan) end -- its tracker took the id in on_id
    end
  end
  for _, seq in ipairs(ended) do
    if seq.finish == "error" and self.on_error then self.on_error(("request %d: %s"):format(seq.index, seq.error)) end
  end
  for _, seq in ipairs(ended) do seq.on_end(seq) end
  if self.on_ids then self.on_ids() end
  self:fill(k)
  return generated, plan.prefill_rows
end

-- Every sequence of replica k ends with finish "error" and the message; its runner starts
-- again (the replica's slots are taken afresh from position 0 or the prefix).
function Engine:fail_replica(k, message)
  local rn = self.runners[k]
  self.flights[k], self.timing[k] = {}, nil
  local seqs = table.move(rn.state.running, 1, #rn.state.running, 1, {})
  table.move(rn.state.waiting, 1, #rn.state.waiting, #seqs + 1, seqs)
  self:restart_runner(k)
  for _, seq in ipairs(seqs) do
    seq.finish, seq.error = "error", message
    seq.on_end(seq)
  end
  if self.on_error then self.on_error(message) end
end

-- Replica k's step, read now (clock `now`): its host and waited seconds to on_step, and the
-- next one's timing started (none when the replica has gone idle).
function Engine:time_step(k, now, generated, prefilled)
  local t = self.timing[k]
  if t and self.on_step then
    local waiting = t.waiting or now
    self.on_step(k, waiting - t.since, now - waiting, generated, prefilled)
  end
  self.timing[k] = #self.flights[k] > 0 and { since = now, turn = self.turn } or nil
end

-- Replica k in one pass: a step that is done is advanced; an idle replica with work starts.
-- cqueues resumes the loop before the coroutines its step woke, so a step's host work is
-- over only once the loop has come round twice.
function Engine:poll_replica(k)
  local oldest = self.flights[k][1]
  if oldest then
    if oldest.handle:ready() then
      self.read_at = gptoss.clock()
      self:time_step(k, self.read_at, self:advance(k))
    else
      local t = self.timing[k]
      if t and not t.waiting and self.turn > t.turn + 1 then t.waiting = gptoss.clock() end
    end
  elseif self.runners[k]:busy() then
    self:fill(k)
    self.timing[k] = { since = gptoss.clock(), turn = self.turn }
  end
end

-- One pass over the replicas. Returns whether any replica has work.
function Engine:poll()
  local busy = false
  for k, rn in ipairs(self.runners) do
    local ok, err = pcall(self.poll_replica, self, k)
    if not ok then self:fail_replica(k, util.bare(err)) end
    busy = busy or #self.flights[k] > 0 or rn:busy()
  end
  return busy
end

--- The loop (a cqueues coroutine's body): steps while there is work, yielding between
-- polls; sleeps on arrivals when there is none, giving the memory a burst left back to the
-- system once idle for IDLE_TRIM seconds; returns once stop() was called and every
-- sequence has ended.
function Engine:run()
  local trimmed = true
  while true do
    self.turn = self.turn + 1
    if self:poll() then
      trimmed = false
      cqueues.sleep(0)
    elseif self.stopping then
      return
    elseif trimmed then
      self.wake:wait()
    elseif not self.wake:wait(IDLE_TRIM) then
      gptoss.trim_memory()
      trimmed = true
    end
  end
end

--- No more arrivals: the loop returns once what is queued and running has ended.
function Engine:stop()
  self.stopping = true
  self.wake:signal()
end

return serve_engine
