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
    held = {}, logprobs = {}, done_at = 0 }, Replica)
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

function Replica:step(batch)
  local launched = gptoss.clock() + self.launch
  while gptoss.clock() < launched do end
  local ids, fed, tokens, positions = {}, batch.from and batch.from.ids, batch.tokens, batch.positions
  local asked = false
  for i, slot in ipairs(batch.slots) do
    local t = tokens[i]
    if t < 0 then t = fed[-t] end
    ids[i] = self:row_id(slot, positions[i], t)
    asked = asked or self.logprobs[slot] ~= nil
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
