--- gptoss.runner (internal, gptoss.getp's): drives one replica through a queue of
-- sequences with a scheduler object, whose hooks it calls as gptoss.scheduler's header
-- (their contract) says: it admits requests, builds each step's rows and takes the ids
-- sampled for them.
--
-- runner.new(sched, replica, index, queue, opts): index is the replica's number in the run.
-- The queue's sequences have position 0, an empty output and limit >= 1 (getp finishes the
-- others itself). opts: rows and chunk (the state's bounds), stop (a set of ids that end a
-- sequence), prefix (nil, or {slot =, ids =, length =}: that slot holds the first length
-- ids, which admission forks into the slot of a sequence whose prompt begins with them and
-- goes on past them; the slot is not offered to requests), share (true: a sequence admitted
-- without a prompt_from takes as its donor the latest one admitted whose prompt begins as
-- its own, at least SHARE_MIN ids alike, and forks what they share as prompt_from says).
--
-- A sequence may name another of the same prompt in seq.prompt_from (gptoss serve's choices
-- of one request): admitted while that one runs and its slot can still give that prompt but
-- its last token (a GPU slot's windowed rings lose the oldest keys: r:rewind_limit), it
-- feeds nothing until the steps built so far feed those positions, then forks them from the
-- other's slot and feeds only the last token itself (its first id is its own draw). When the
-- other can no longer give them, or ends first, it feeds its own prompt. Its prefill_chunk
-- is not asked while it waits. seq.prompt_from is nil once it no longer waits; seq.shared
-- is the length it waits for (a donor's: the ids both prompts begin with).
--
-- A sequence may carry seq.turn (gptoss serve's structured outputs: a gptoss.constraint
-- tracker): its rows draw under seq.turn:matcher() and feed every id of seq.output not fed
-- yet (the ids the turn forced after its last). While its turn is free (no matcher) and its
-- sampling counts no penalties, a pending step's row feeds it on the device as any other's;
-- else its next row waits until its last id is read. Once its tracker has taken an id read
-- for it, r:observed(seq, plan) says whether that id changed the turn (see there).
--
-- Sequences may arrive later (r:arrive(seq, at): into state.waiting at index at) and end
-- early (r:cancel(seq, finish): a waiting one leaves the queue, a running one frees its
-- slot at once; rows of it in a step already built are dropped as an ended sequence's are).
--
-- r:busy() says whether requests wait or run. r:build(pending) admits, asks the hooks and
-- returns the next step's plan {batch = {slots=, positions=, tokens=, draw=}, ...}, or nil
-- when every running sequence ends with the pending plan's step (nothing to feed); pending
-- is the plan of the step still running (nil: none), whose decode rows feed the new step's
-- (tokens -j: its row j; the caller sets batch.from to that step); batch.draw lists the
-- rows whose ids are read (r:step draws no other, and a CPU replica computes no other's
-- logits); the plan's prefill_rows counts its prompt rows. r:apply(plan, ids [, failed])
-- takes a step's sampled ids and returns how many ids were generated, the list of the
-- sequences that ended and which rows' ids went to their sequence's output (taken[i] for
-- plan.rows[i]); failed ({[row] = why}, h:tokens{partial = true}'s) names rows no id could
-- be drawn for, whose sequences end with finish "error" and error = why.
local runner = {}

local Runner = {}
Runner.__index = Runner

--- A runner of replica number `index` over queue (see the header).
function runner.new(sched, replica, index, queue, opts)
  local free_slots = {}
  for s = replica.slots, 1, -1 do
    if not (opts.prefix and opts.prefix.slot == s) then free_slots[#free_slots + 1] = s end
  end
  return setmetatable({
    scheduler = sched,
    stop = opts.stop,
    prefix = opts.prefix,
    free_slots = free_slots, -- descending: admission takes the lowest, from the end
    forking = {}, -- admitted sequences waiting to fork their seq.prompt_from's prompt
    sharers = opts.share and {} or nil, -- share_key => the latest sequence admitted with it
    prefilling = {}, -- admitted sequences with prompt left to feed, in admission order
    state = {
      replica = replica, index = index, waiting = queue, running = {},
      free = #free_slots, slots = #free_slots, rows = opts.rows, chunk = opts.chunk, step = 0,
    },
  }, Runner)
end

function Runner:busy()
  return #self.state.waiting > 0 or #self.state.running > 0
end

-- Whether prompt begins with the prefix's ids and goes on past them (its last prompt row
-- must be fed, to yield the first id).
local function begins_with(prompt, prefix)
  if #prompt <= prefix.length then return false end
  for i = 1, prefix.length do
    if prompt[i] ~= prefix.ids[i] then return false end
  end
  return true
end

-- Prompts that begin with this many ids alike share them (runner.new's share): fewer would
-- save less than the fork and the wait cost.
local SHARE_MIN = 32
local SHARE_FORMAT = "<" .. ("i4"):rep(SHARE_MIN)

-- The key of the sequences whose prompts may share a beginning with prompt: its first
-- SHARE_MIN ids, or nil when it has no more than that (its last id is always fed).
local function share_key(prompt)
  if #prompt <= SHARE_MIN then return nil end
  return string.pack(SHARE_FORMAT, table.unpack(prompt, 1, SHARE_MIN))
end

-- How many ids a and b begin with alike, at most most.
local function common_length(a, b, most)
  local n = 0
  while n < most and a[n + 1] == b[n + 1] do n = n + 1 end
  return n
end

-- Whether from's slot holds, or will hold once its prompt is fed, its first length positions
-- for a fork: from runs and has not written past what its rings keep for them.
local function can_give(r, from, length)
  if from.slot == nil or from.finish then return false end
  if from.position < length then return true end
  local limit = r.rewind_limit and r:rewind_limit(from.slot) or 0
  return limit == 0 or length >= limit
end

-- seq's donor, with share on: the latest sequence admitted whose prompt begins with the
-- same SHARE_MIN ids (seq becomes the latest), when they share SHARE_MIN ids or more past
-- what seq holds already (the default system message, forked at admission).
local function find_donor(self, seq)
  local key = share_key(seq.prompt)
  if not key then return end
  local donor = self.sharers[key]
  self.sharers[key], seq.share_key = seq, key
  if donor then
    local n = common_length(seq.prompt, donor.prompt, #seq.prompt - 1)
    if n - seq.position >= SHARE_MIN then seq.prompt_from, seq.shared = donor, n end
  end
end

-- Whether seq, being admitted, waits to fork from its prompt_from (else the fork saves no row).
local function waits_to_fork(r, seq)
  local from = seq.prompt_from
  return from ~= nil and seq.shared > seq.position and can_give(r, from, seq.shared)
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
  local waiting, r, prefix = st.waiting, st.replica, self.prefix
  for i = 1, n do
    local seq = waiting[i]
    seq.slot = table.remove(self.free_slots)
    seq.position = 0
    if prefix and begins_with(seq.prompt, prefix) then
      r:fork(prefix.slot, seq.slot, prefix.length)
      seq.position = prefix.length
    end
    if seq.sampling then r:sampling(seq.slot, seq.sampling) else r:sampling(seq.slot) end
    if seq.prompt_from then
      seq.shared = #seq.prompt - 1
    elseif self.sharers then
      find_donor(self, seq)
    end
    if waits_to_fork(r, seq) then
      self.forking[#self.forking + 1] = seq
    else
      seq.prompt_from, seq.shared = nil, nil
    end
    st.running[#st.running + 1] = seq
    self.prefilling[#self.prefilling + 1] = seq
  end
  table.move(waiting, n + 1, #waiting + n, 1)
  st.free = st.free - n
end

-- Forks into each waiting sequence (self.forking) its prompt_from's first seq.shared
-- positions once the steps built so far feed them (the caller has enqueued them: a GPU
-- replica copies in step order); one whose prompt_from ended first or can no longer give
-- them, or that ended itself, waits no more.
local function fork_prompts(self)
  local r, waiting = self.state.replica, {}
  for _, seq in ipairs(self.forking) do
    local from, length = seq.prompt_from, seq.shared
    if seq.finish or not can_give(r, from, length) then
      seq.prompt_from, seq.shared = nil, nil
    elseif from.position >= length then
      r:fork(from.slot, seq.slot, length)
      seq.position, seq.prompt_from, seq.shared = length, nil, nil
    else
      waiting[#waiting + 1] = seq
    end
  end
  self.forking = waiting
end

-- A step being built: its batch's rows (slots, positions, tokens), the rows that yield a
-- sequence's next id with those sequences (rows[i] yields seqs[i]'s), and the matchers
-- they draw under ({[row] = matcher}).
local function new_step()
  return { slots = {}, positions = {}, tokens = {}, rows = {}, seqs = {}, constraint = {} }
end

-- Adds n rows feeding ids[first .. first + n - 1] to seq's slot at its next positions (a
-- prompt's chunk in one pass, not a call a token).
local function add_rows(step, seq, ids, first, n)
  local slots, positions, base, slot, position = step.slots, step.positions, #step.slots, seq.slot, seq.position
  table.move(ids, first, first + n - 1, base + 1, step.tokens)
  for k = 1, n do
    slots[base + k], positions[base + k] = slot, position + k - 1
  end
  seq.position = position + n
end

-- The step's last row yields seq's next id, under seq.turn's matcher if it has one. The
-- sequence notes it (yield_rows: the step's rows list; yield_row: the row), so that the next
-- step finds the row feeding it without a table of every sequence a step.
local function yields(step, seq)
  local row = #step.slots
  step.rows[#step.rows + 1], step.seqs[#step.seqs + 1] = row, seq
  seq.yield_rows, seq.yield_row = step.rows, row
  local m = seq.turn and seq.turn:matcher()
  if m then step.constraint[row] = m end
end

-- Whether seq (with a turn) waits for its pending id to be read before its next row: its
-- turn has a matcher now, or its draws count penalties (a draw Runner:observed drops would
-- still be counted for the slot's later draws).
local function turn_waits(seq)
  local s = seq.sampling
  return seq.turn:matcher() ~= nil or (s ~= nil and (s.presence_penalty ~= nil or s.frequency_penalty ~= nil))
end

-- One decode row per running sequence whose prompt is fed, while the step has room: its
-- last id, or the id the pending step's row yields for it (fed on the device), unless that
-- id is its last. A sequence with a seq.turn under a matcher (or counting penalties) waits
-- for its pending id to be read instead (its matcher and forced ids follow from it), then
-- feeds the ids not fed yet: its last, and those the turn forced after it (in seq.output
-- too). The row the pending step feeds (every decoding sequence's, each step) is added here
-- in place, as add_rows and yields would (it draws free), without their calls and lengths
-- (#) a row.
local function add_decode_rows(st, step, pending)
  local pending_rows = pending and pending.rows
  local slots, positions, tokens, rows, seqs = step.slots, step.positions, step.tokens, step.rows, step.seqs
  local n, most, running = #slots, st.rows, st.running
  for j = 1, #running do
    local seq = running[j]
    if n == most then break end
    local output = seq.output
    if pending_rows and seq.yield_rows == pending_rows then -- the pending step yields its next id
      -- else its pending id is its last, or its turn waits for it
      if #output + 1 < seq.limit and not (seq.turn and turn_waits(seq)) then
        local position = seq.position
        n = n + 1
        slots[n], positions[n], tokens[n] = seq.slot, position, -seq.yield_row
        seq.position = position + 1
        local k = #rows + 1
        rows[k], seqs[k] = n, seq
        seq.yield_rows, seq.yield_row = rows, n
      end
    else
      local fed = seq.position - #seq.prompt -- of seq.output
      if fed >= 0 and fed < #output then
        local last = math.min(#output, fed + st.chunk, fed + most - n)
        add_rows(step, seq, output, fed + 1, last - fed)
        if last == #output then yields(step, seq) end
        n = #slots
      end
    end
  end
end

-- Prefill chunks in the rows left: for each running sequence with prompt left, as many
-- tokens as the scheduler's prefill_chunk says (default: as many as fit). Only the
-- sequences of self.prefilling are looked at (not every running one, each step); those
-- whose prompt is fed, or that ended, leave it.
local function add_prefill_rows(self, step)
  local st, sched, prefilling, still = self.state, self.scheduler, self.prefilling, {}
  for i = 1, #prefilling do
    local seq = prefilling[i]
    local left, room = #seq.prompt - seq.position, st.rows - #step.slots
    if room == 0 then
      table.move(prefilling, i, #prefilling, #still + 1, still)
      break
    end
    if left > 0 and not seq.prompt_from and not seq.finish then
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
      add_rows(step, seq, seq.prompt, seq.position + 1, n)
      if n > 0 and seq.position == #seq.prompt then yields(step, seq) end
    end
    if seq.position < #seq.prompt and not seq.finish then still[#still + 1] = seq end
  end
  self.prefilling = still
end

function Runner:build(pending)
  local st = self.state
  if #st.waiting > 0 and st.free > 0 then admit(self) end
  if #st.running == 0 then
    if pending then return nil end
    error(("scheduler: admit returned 0 on replica %d while nothing runs there (%d waiting, "
      .. "%d slots free): it would wait forever"):format(st.index, #st.waiting, st.free), 0)
  end
  if #self.forking > 0 then fork_prompts(self) end
  local step = new_step()
  add_decode_rows(st, step, pending)
  local decode_rows = #step.slots
  if #self.prefilling > 0 then add_prefill_rows(self, step) end
  if #step.slots == 0 then
    if pending then return nil end
    error(("scheduler: prefill_chunk returned 0 for every sequence on replica %d and none "
      .. "decodes: the step would be empty and the replica would wait forever"):format(st.index), 0)
  end
  return { batch = { slots = step.slots, positions = step.positions, tokens = step.tokens, draw = step.rows,
    constraint = next(step.constraint) and step.constraint or nil },
    rows = step.rows, seqs = step.seqs, prefill_rows = #step.slots - decode_rows }
end

-- Puts slot back into the descending free list at its place (a search, not a sort of the
-- whole list each step that ends a sequence).
local function free_slot(free_slots, slot)
  local lo, hi = 1, #free_slots + 1
  while lo < hi do
    local mid = (lo + hi) // 2
    if free_slots[mid] > slot then lo = mid + 1 else hi = mid end
  end
  table.insert(free_slots, lo, slot)
end

-- Takes the ended sequences out of state.running, their slots back to the free list, and
-- tells the scheduler.
local function release(self, ended)
  local st, sched = self.state, self.scheduler
  local running, was = {}, st.running
  for j = 1, #was do
    local seq = was[j]
    if seq.finish then
      free_slot(self.free_slots, seq.slot)
      if seq.share_key and self.sharers[seq.share_key] == seq then self.sharers[seq.share_key] = nil end
    else
      running[#running + 1] = seq
    end
  end
  st.running, st.free = running, #self.free_slots
  if sched.on_finish then
    for _, seq in ipairs(ended) do sched.on_finish(sched, seq, st) end
  end
end

--- Queues seq (position 0, empty output, limit >= 1) at index `at` of state.waiting.
function Runner:arrive(seq, at)
  table.insert(self.state.waiting, at, seq)
end

--- Ends seq now with seq.finish = finish: out of the queue when it waits, its slot freed
-- when it runs. A sequence that has ended already is left as it is.
function Runner:cancel(seq, finish)
  if seq.finish then return end
  seq.finish = finish
  if seq.slot == nil then
    local waiting = self.state.waiting
    for i = 1, #waiting do
      if waiting[i] == seq then
        table.remove(waiting, i)
        break
      end
    end
    return
  end
  release(self, { seq })
end

--- After seq.turn took the id that plan's step yielded for seq (and forced what follows
-- it): when a step still in flight fed that id on the device (its turn was free) and the id
-- changed the turn (opened a matcher or forced ids), that step's draw for seq followed the
-- wrong state: r:apply drops it, and seq's next row feeds from the host the forced ids, or
-- that id again at its position to draw under the matcher. The step in flight wrote the
-- id's keys at that position, which stand (fed again, it writes the same); a draw is keyed
-- by (seed, position), so the ids are those of a run that waited for each id. (A turn that
-- ended ends its sequence: the caller cancels it.)
function Runner:observed(seq, plan)
  local ahead = seq.yield_rows
  if seq.finish or ahead == plan.rows then return end -- no step in flight fed it
  local forced = seq.position - #seq.prompt < #seq.output
  if forced or seq.turn:matcher() ~= nil then
    seq.dropped_rows, seq.yield_rows = ahead, nil
    if not forced then seq.position = seq.position - 1 end
  end
end

function Runner:apply(plan, ids, failed)
  local st, rows, seqs, stop = self.state, plan.rows, plan.seqs, self.stop
  local ended, generated, taken = {}, 0, {}
  for i = 1, #rows do
    local r = rows[i]
    local seq, id = seqs[i], ids[r]
    if seq.dropped_rows == rows then
      seq.dropped_rows = nil -- a draw that followed an id which changed its turn (Runner:observed)
    elseif not seq.finish then -- else it ended on a stop id in the step before: a row built ahead
      if not id then
        seq.finish, seq.error = "error", "no token could be drawn: " .. failed[r]
      else
        generated, taken[i] = generated + 1, true
        local output = seq.output
        local n = #output + 1
        output[n] = id
        if stop[id] then
          seq.finish = "stop"
        elseif n >= seq.limit then
          seq.finish = "length"
        end
      end
      if seq.finish then ended[#ended + 1] = seq end
    end
  end
  st.step = st.step + 1
  if #ended > 0 then release(self, ended) end
  return generated, ended, taken
end

return runner
