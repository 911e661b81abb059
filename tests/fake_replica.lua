-- A replica that runs no model, for driving gptoss serve without a GPU or a model's cost:
-- it acts as one (docs/serve.md's "objects that act as one": step, fork, sampling,
-- check_sampling; slots, ctx, device, rows, chunk; handles with ready, tokens and logprobs,
-- both taking {partial = true}) and chooses each row's id at once, so what the server does
-- per id is all that is measured. Every row draws: no row of it ever fails.
--
--   fake_replica.new{slots =, ctx =, text = ids, delay = seconds, launch = seconds, choose = function}
--
-- A row's id is choose(ids) when choose is given and returns one (ids: every id its slot
-- holds, the row's own last: tests/serve_scripted.lua scripts a model's reply so), else
-- the text's id at the row's position (cycling), which is never a stop id when the text
-- has none. delay simulates a device: a step is ready that many seconds after the one
-- before it is, or after it was enqueued if later, as a GPU runs its queue in order; and
-- launch the host's part of enqueueing it (a GPU's kernel launches): r:step spins that
-- long first.
-- Rows whose slot asked for logprobs get the id with logprob -1 and no alternatives.
-- A step's constraint ({[row] = matcher}, docs/structured.md#constrained-steps) is honoured:
-- such a row's id is the one above when its matcher allows it, else one of m:allowed()
-- picked by its position (deterministic, spread over the set), and the matcher takes it at
-- once, as a device's step makes it take it when the ids are read. r.constraint_seconds
-- counts the CPU of what a device's step does for them on the host: each row's mask (m:mask)
-- and the matcher's accept; the choice is the fake's own.
local gptoss = require "gptoss"

local fake_replica = {}

local Replica = {}
Replica.__index = Replica

local Handle = {}
Handle.__index = Handle

--- The ids of a line of plain text, quotes and backslashes in it and never a stop id: a
-- text for new{} whose deltas exercise JSON's escapes.
function fake_replica.plain_text(tokenizer)
  return tokenizer:encode(" The quick brown fox jumps over the lazy dog, and \"quotes\" \\ backslashes stay escaped.\n",
    { mode = "o200k" })
end

--- A fake replica (see the header); rows default to slots + 128, chunk to 128.
function fake_replica.new(opts)
  assert(opts.text and #opts.text > 0, "fake_replica.new: text must be a non-empty list of ids")
  local chunk = opts.chunk or 128
  return setmetatable({ slots = opts.slots, ctx = opts.ctx, device = "fake", rows = opts.rows or opts.slots + chunk,
    chunk = chunk, text = opts.text, delay = opts.delay or 0, launch = opts.launch or 0, choose = opts.choose,
    held = {}, logprobs = {}, done_at = 0, constraint_seconds = 0 }, Replica)
end

function Replica:sampling(slot, params)
  self.logprobs[slot] = params and params.logprobs or nil
end

function Replica:check_sampling()
  return true
end

function Replica:fork(from, to, length)
  if self.choose then self.held[to] = table.move(self.held[from] or {}, 1, length, 1, {}) end
end

-- The id a row at position of slot chooses, its token fed (the slot's ids tracked only for
-- choose, which is the costly part).
function Replica:row_id(slot, position, token)
  if self.choose then
    local held = self.held[slot] or {}
    for p = #held, position + 1, -1 do held[p] = nil end
    held[position + 1] = token
    self.held[slot] = held
    local id = self.choose(held)
    if id then return id end
  end
  local text = self.text
  return text[position % #text + 1]
end

-- Spreads a position over 1..n (Knuth's multiplicative hash).
local function spread(position, n)
  return (position * 2654435761 >> 7) % n + 1
end

-- The id a constrained row draws: id (the unconstrained choice) if m allows it, else one of
-- m's allowed set. Raises if m allows nothing (a step that could not draw).
local function constrained_id(m, id, position)
  if m:allows(id) then return id end
  local set = m:allowed()
  if #set == 0 then error(("fake_replica: the matcher at position %d allows no token"):format(position), 0) end
  return set:nth(spread(position, #set))
end

function Replica:step(batch)
  local launched = gptoss.clock() + self.launch
  while gptoss.clock() < launched do end
  local ids, fed, tokens, positions = {}, batch.from and batch.from.ids, batch.tokens, batch.positions
  local constraint, asked = batch.constraint, false
  for i, slot in ipairs(batch.slots) do
    local t = tokens[i]
    if t < 0 then t = fed[-t] end
    ids[i] = self:row_id(slot, positions[i], t)
    asked = asked or self.logprobs[slot] ~= nil
  end
  if constraint then
    -- what a device's step does on the host: each row's mask made (a new buffer, as a step
    -- makes one for its rows), then its id taken
    local started = os.clock()
    for _, m in pairs(constraint) do m:mask() end
    local seconds = os.clock() - started
    for row, m in pairs(constraint) do
      ids[row] = constrained_id(m, ids[row], positions[row])
      started = os.clock()
      assert(m:accept(ids[row]))
      seconds = seconds + os.clock() - started
    end
    self.constraint_seconds = self.constraint_seconds + seconds
  end
  local now = gptoss.clock()
  self.done_at = math.max(now, self.done_at) + self.delay
  return setmetatable({ replica = self, ids = ids, slots = batch.slots, asked = asked, done_at = self.done_at,
    rows = #ids }, Handle)
end

function Handle:ready()
  return gptoss.clock() >= self.done_at
end

-- Waits as a device's handle does: the rest of its simulated time. {partial = true} adds
-- the rows that failed: none.
function Handle:tokens(opts)
  while not self:ready() do end
  if opts and opts.partial then return self.ids, {} end
  return self.ids
end

function Handle:logprobs()
  assert(self.asked, "step:logprobs: no row of this step asked for logprobs")
  local out, wants = {}, self.replica.logprobs
  for i, id in ipairs(self:tokens()) do
    out[i] = wants[self.slots[i]] and { id = id, logprob = -1.0, top = {} } or false
  end
  return out
end

return fake_replica
