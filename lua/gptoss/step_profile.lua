--- gptoss.step_profile: a getp run's per-kernel times split between its prefill steps (those
-- that feed a prompt token, the shared prefix's included) and its decode steps (the others),
-- as bench_getp --profile prints them.
--
-- A replica's profile is one running total per kernel (r:profile(true), then r:profile():
-- docs/api.md#gpu-replicas). It is read before every step getp enqueues on the replica
-- (getp's on_step): the read waits for the device, so it holds every step enqueued before
-- and nothing after, and what it grew by since the last read belongs to the step enqueued
-- last. A last read after the run settles the last step.
--
--   local split = step_profile.new()
--   local g <close> = getp.new { ..., on_step = split.on_step }
--   split:watch(k, g.replicas[k])   -- a GPU replica: turns its per-kernel timing on
--   g:run()
--   local times = split:finish()    -- times[k] = {prefill = rows, decode = rows}
--
-- rows as r:profile() gives them, {{label =, seconds =, calls =}, ...}, in the order the
-- kernels first ran in steps of that kind; replicas not watched have no entry.
local step_profile = {}

local Split = {}
Split.__index = Split

--- A split watching no replica yet; split.on_step is the function for getp's on_step.
function step_profile.new()
  local split = setmetatable({ sources = {}, last_read = {}, last_kind = {}, times = {} }, Split)
  split.on_step = function(k, step) split:before_step(k, step) end
  return split
end

-- The rows of one kind of step: a list and the same rows by label.
local function new_times()
  return { rows = {}, by_label = {} }
end

local function add(times, label, seconds, calls)
  local row = times.by_label[label]
  if not row then
    row = { label = label, seconds = 0, calls = 0 }
    times.by_label[label], times.rows[#times.rows + 1] = row, row
  end
  row.seconds, row.calls = row.seconds + seconds, row.calls + calls
end

--- Splits replica k's kernel times: source:profile(true) turns them on, source:profile()
-- reads them (a GPU replica, or anything that answers so).
function Split:watch(k, source)
  source:profile(true)
  self.sources[k], self.last_read[k] = source, {}
  self.times[k] = { prefill = new_times(), decode = new_times() }
end

-- Replica k's totals read; what they grew by since the last read goes to the kind of the
-- step enqueued last (before the first step nothing has run).
function Split:settle(k)
  local kind, before, now = self.last_kind[k], self.last_read[k], {}
  for _, row in ipairs(self.sources[k]:profile()) do
    now[row.label] = row
    local was = before[row.label] or { seconds = 0, calls = 0 }
    if kind and row.calls > was.calls then
      add(self.times[k][kind], row.label, row.seconds - was.seconds, row.calls - was.calls)
    end
  end
  self.last_read[k] = now
end

--- getp's on_step: replica k is about to be given a step of step.prefill_rows prompt rows.
function Split:before_step(k, step)
  if not self.sources[k] then return end
  self:settle(k)
  self.last_kind[k] = step.prefill_rows > 0 and "prefill" or "decode"
end

--- After the run: every watched replica settled; times[k] = {prefill = rows, decode = rows}.
function Split:finish()
  local times = {}
  for k, t in pairs(self.times) do
    self:settle(k)
    times[k] = { prefill = t.prefill.rows, decode = t.decode.rows }
  end
  return times
end

return step_profile
