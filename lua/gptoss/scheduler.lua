--- gptoss.scheduler: which waiting requests a replica takes on, and which rows each of its
-- steps carries. gptoss.getp drives every replica through a runner (below); the policy is
-- a small Lua object whose hooks the runner calls, so another policy needs no rebuild.
--
-- A scheduler is a table (or any indexable value) with these methods. One object serves
-- every replica of a run; state.replica and state.index say which one is asking.
--
--   admit(self, state) -> n                                                  required
--     Called before each step of a replica while requests wait and a slot is free.
--     Returns how many requests to admit now from the front of state.waiting: an integer
--     in 0..min(state.free, #state.waiting). The queue's order is the partition's
--     (gptoss.partition): reorder requests there, not here. Admitted requests take the
--     lowest free slots and start at position 0 (which truncates whatever the slot held),
--     or, when the replica holds the queue's shared prompt prefix in a slot of its own,
--     with that prefix forked into their slot and their position after it.
--     Returning 0 while nothing runs on the replica is an error: it would wait forever.
--   prefill_chunk(self, seq, state) -> n                                     optional
--     Called for each admitted sequence with prompt tokens left to feed, in admission
--     order, once every decoding sequence has its row, while the step has rows left.
--     Returns how many prompt tokens to feed this step: an integer in
--     0..min(#seq.prompt - seq.position, state.rows_left, state.chunk).
--     Default: that maximum, so new prompts prefill inside the decode steps.
--   on_finish(self, seq, state)                                              optional
--     Called when a sequence has ended (seq.finish says why), its slot already free.
--   name                                                                     optional
--     What g:describe() calls it ("custom" when absent).
--
-- state, the runner's own table (hooks read it and must not change it):
--   replica, index   the replica object and its number in the run's list (1-based)
--   waiting          sequences not admitted yet, in queue order
--   running          admitted sequences that have not ended, in admission order
--   free, slots      free slots now, the slots requests may take (the replica's, less the
--                    one holding a shared prefix)
--   rows, chunk      most rows one step carries, most rows of one slot in one step
--   rows_left        rows still open in the step being built (during prefill_chunk only)
--   step             steps this replica has taken so far
--
-- A sequence (seq), one per request:
--   index            the request's number (1-based)     text      its prompt text
--   prompt           its prompt token ids                output    the ids generated so far
--   limit            most ids it may generate            sampling  r:sampling's parameters
--   slot             the slot it runs in (nil until admitted, kept after it ends)
--   position         the next position to feed           replica   the replica object
--   finish           nil while it runs, then "stop" (it generated a stop id) or "length"
--                    (it generated limit ids)
--
-- Rows of a step: first one decode row per running sequence whose prompt is fed (its last
-- generated id at seq.position), then prefill chunks (consecutive prompt tokens of one
-- sequence). The row at the last prompt position and every decode row yield the sequence's
-- next id; the sequence ends after an id of the stop set or its limit-th id.
--
-- A replica's next step is built before the ids of its last one are read (one step ahead):
-- a decode row then takes the id its sequence gets from the step still running (fed on the
-- device), and a sequence that ends there on a stop id has one more row, whose id is
-- dropped. So hooks see the state as of the step before the running one: a slot freed by an
-- ending sequence is offered to admit one step later, and on_finish comes one step later.
local scheduler = {}

--- The built-in policies' names, in definition order (below): what getp and the command
-- line accept as a scheduler's name.
scheduler.names = {}

-- Defines built-in policy `name` from its hooks: scheduler[name]() makes a fresh object
-- with them, named so for g:describe().
local function builtin(name, hooks)
  scheduler[name] = function()
    local policy = { name = name }
    for hook, f in pairs(hooks) do policy[hook] = f end
    return policy
  end
  scheduler.names[#scheduler.names + 1] = name
end

--- Continuous batching: every free slot takes a waiting request at once, and its prompt
-- is prefilled in the same steps as the others' decode rows.
builtin("continuous", {
  admit = function(_, state) return math.min(state.free, #state.waiting) end,
})

--- Static batching: a new batch (as many requests as there are slots) starts only when
-- every sequence of the previous one has ended.
builtin("static", {
  admit = function(_, state)
    if state.free < state.slots then return 0 end
    return math.min(state.slots, #state.waiting)
  end,
})

local Runner = {}
Runner.__index = Runner

--- A runner drives one replica through a queue of sequences with a scheduler object.
-- The queue's sequences have position 0, an empty output and limit >= 1 (getp finishes
-- the others itself). opts: rows and chunk (the state's bounds), stop (a set of ids that
-- end a sequence), prefix (nil, or {slot =, length =}: that slot holds the first length
-- ids of every queued prompt, which admission forks into the sequence's slot; the slot is
-- not offered to requests).
-- runner:busy() says whether requests wait or run. runner:build(pending) admits, asks the
-- hooks and returns the next step's plan {batch = {slots=, positions=, tokens=}, ...}, or
-- nil when every running sequence ends with the pending plan's step (nothing to feed);
-- pending is the plan of the step still running (nil: none), whose decode rows feed the
-- new step's (tokens -j: its row j; the caller sets batch.from to that step).
-- runner:apply(plan, ids) takes a step's sampled ids and returns how many ids were
-- generated and the list of the sequences that ended.
function scheduler.runner(sched, replica, index, queue, opts)
  local free_slots = {}
  for s = 1, replica.slots do
    if not (opts.prefix and opts.prefix.slot == s) then free_slots[#free_slots + 1] = s end
  end
  return setmetatable({
    scheduler = sched,
    stop = opts.stop,
    prefix = opts.prefix,
    free_slots = free_slots, -- ascending: admission takes the lowest
    state = {
      replica = replica, index = index, waiting = queue, running = {},
      free = #free_slots, slots = #free_slots, rows = opts.rows, chunk = opts.chunk, step = 0,
    },
  }, Runner)
end

function Runner:busy()
  return #self.state.waiting > 0 or #self.state.running > 0
end

local function admit(self)
  local st, sched = self.state, self.scheduler
  local most = math.min(st.free, #st.waiting)
  local n = sched.admit(sched, st)
  if math.type(n) ~= "integer" or n < 0 or n > most then
    error(("scheduler: admit returned %s on replica %d; expected an integer in 0..%d "
      .. "(%d %s free, %d waiting)"):format(tostring(n), st.index, most, st.free,
        st.free == 1 and "slot" or "slots", #st.waiting), 0)
  end
  local waiting, r = st.waiting, st.replica
  for i = 1, n do
    local seq = waiting[i]
    seq.slot = table.remove(self.free_slots, 1)
    seq.position = 0
    if self.prefix then
      r:fork(self.prefix.slot, seq.slot, self.prefix.length)
      seq.position = self.prefix.length
    end
    if seq.sampling then r:sampling(seq.slot, seq.sampling) else r:sampling(seq.slot) end
    st.running[#st.running + 1] = seq
  end
  table.move(waiting, n + 1, #waiting + n, 1)
  st.free = st.free - n
end

function Runner:build(pending)
  local st, sched = self.state, self.scheduler
  if #st.waiting > 0 and st.free > 0 then admit(self) end
  if #st.running == 0 then
    if pending then return nil end
    error(("scheduler: admit returned 0 on replica %d while nothing runs there (%d waiting, "
      .. "%d slots free): it would wait forever"):format(st.index, #st.waiting, st.free), 0)
  end

  -- the pending step's row that yields each sequence's next id
  local fed_by = {}
  if pending then
    for i, r in ipairs(pending.rows) do fed_by[pending.seqs[i]] = r end
  end
  local slots, positions, tokens = {}, {}, {}
  local yield_rows, yield_seqs = {}, {}
  local function row(seq, token)
    local n = #slots + 1
    slots[n], positions[n], tokens[n] = seq.slot, seq.position, token
    seq.position = seq.position + 1
  end
  local function yields(seq)
    yield_rows[#yield_rows + 1], yield_seqs[#yield_seqs + 1] = #slots, seq
  end

  for _, seq in ipairs(st.running) do
    if #slots == st.rows then break end
    local from = fed_by[seq]
    if from then
      if #seq.output + 1 < seq.limit then -- else its pending id is its last
        row(seq, -from)
        yields(seq)
      end
    elseif seq.position >= #seq.prompt then
      row(seq, seq.output[#seq.output])
      yields(seq)
    end
  end
  for _, seq in ipairs(st.running) do
    local left, room = #seq.prompt - seq.position, st.rows - #slots
    if room == 0 then break end
    if left > 0 then
      local most = math.min(left, room, st.chunk)
      local n = most
      if sched.prefill_chunk then
        st.rows_left = room
        n = sched.prefill_chunk(sched, seq, st)
        st.rows_left = nil
        if math.type(n) ~= "integer" or n < 0 or n > most then
          error(("scheduler: prefill_chunk returned %s for request %d on replica %d; expected an "
            .. "integer in 0..%d (%d prompt tokens left, %d rows left in the step, at most %d rows "
            .. "of one slot per step)"):format(tostring(n), seq.index, st.index, most, left, room,
              st.chunk), 0)
        end
      end
      for _ = 1, n do row(seq, seq.prompt[seq.position + 1]) end
      if n > 0 and seq.position == #seq.prompt then yields(seq) end
    end
  end
  if #slots == 0 then
    if pending then return nil end
    error(("scheduler: prefill_chunk returned 0 for every sequence on replica %d and none "
      .. "decodes: the step would be empty and the replica would wait forever"):format(st.index), 0)
  end
  return { batch = { slots = slots, positions = positions, tokens = tokens }, rows = yield_rows,
    seqs = yield_seqs }
end

function Runner:apply(plan, ids)
  local st, sched = self.state, self.scheduler
  local ended, generated = {}, 0
  for i, r in ipairs(plan.rows) do
    local seq, id = plan.seqs[i], ids[r]
    if not seq.finish then -- else it ended on a stop id in the step before: a row built ahead
      generated = generated + 1
      seq.output[#seq.output + 1] = id
      if self.stop[id] then
        seq.finish = "stop"
      elseif #seq.output >= seq.limit then
        seq.finish = "length"
      end
      if seq.finish then ended[#ended + 1] = seq end
    end
  end
  st.step = st.step + 1
  if #ended > 0 then
    local running = {}
    for _, seq in ipairs(st.running) do
      if seq.finish then
        table.insert(self.free_slots, seq.slot)
      else
        running[#running + 1] = seq
      end
    end
    table.sort(self.free_slots)
    st.running, st.free = running, #self.free_slots
    if sched.on_finish then
      for _, seq in ipairs(ended) do sched.on_finish(sched, seq, st) end
    end
  end
  return generated, ended
end

return scheduler
