--- gptoss.scheduler: which waiting requests a replica takes on, and which rows each of its
-- steps carries. gptoss.getp drives every replica through a runner (gptoss.runner); the
-- policy is a small Lua object whose hooks the runner calls, so another policy needs no
-- rebuild. This file is that contract and the built-in policies.
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
--                    (it generated limit ids); under gptoss serve also "error" (no id could
--                    be drawn for it: seq.error says why)
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

return scheduler
