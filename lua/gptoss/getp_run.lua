--- gptoss.getp_run (internal, gptoss.getp's): what g:run does. The prompts become requests
-- (getp's header, "Per request i"), the partition shares them out, each replica gets a
-- runner (gptoss.runner) over its queue, after its shared prefix is prefilled ("Shared
-- prefixes"), and one loop steps every replica until every request has ended.
--
-- A replica's next step is enqueued before its running one is read, its decode rows fed on
-- the device by that step's (gptoss.runner: one step ahead), so a GPU runs step after step
-- while Lua reads the last one's ids and serves the other replicas (reading first, then
-- enqueuing, left the GPU idle while Lua worked).
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local getp_options = require "gptoss.getp_options"
local getp_replicas = require "gptoss.getp_replicas"
local harmony = require "gptoss.harmony"
local partition = require "gptoss.partition"
local runner = require "gptoss.runner"

local getp_run = {}

-- docs/course.md#generation-rule-and-token-count: the course tests these ids, whatever the
-- tokenizer names them
local STOP = { [199999] = true, [200002] = true }

-- The shortest shared prefix worth a slot that requests could have used (getp's header,
-- "Shared prefixes").
local SHARED_PREFIX_MIN = 32

--- A request's prompt ids (getp's header, "Per request i"): the text up to its first NUL
-- byte, encoded as the course does and cut at max_tokens, or with chat its harmony
-- rendering (not cut: getp refuses one longer than max_tokens).
function getp_run.prompt_ids(tokenizer, text, chat, max_tokens)
  text = text:match("^[^\0]*")
  if chat then return harmony.render_ids({ harmony.system {}, harmony.user(text) }, tokenizer) end
  return tokenizer:encode(text, { max_tokens = max_tokens })
end

--- The requests of the prompts, as a partition sees them: {index, text, tokens, limit}.
-- run: {model =, tokenizer =, steps = (clamped), chat =}; numbers[i] (default i) is the
-- number errors give prompt i. Errors are raised at level.
function getp_run.requests_of(run, prompts, numbers, level)
  local limit_tokens = run.model.config.initial_context_length
  local requests = {}
  for i, text in ipairs(prompts) do
    local ids = getp_run.prompt_ids(run.tokenizer, text, run.chat, limit_tokens)
    local number = numbers and numbers[i] or i
    if run.chat and #ids > limit_tokens then
      error(("getp: request %d renders to %d tokens, more than initial_context_length (%d)")
        :format(number, #ids, limit_tokens), level + 1)
    end
    if #ids == 0 then
      error(("getp: request %d encodes to no tokens (an empty prompt: the course's getp exits there)"):format(number),
        level + 1)
    end
    requests[i] = { index = i, text = text, tokens = ids, limit = math.max(0, run.steps - #ids) }
  end
  return requests
end

-- The prefix a replica's queued prompts share (getp's header, "Shared prefixes"): {slot =
-- the replica's last, ids =, length =}, or nil when there is nothing to share.
local function shared_prefix(r, queue)
  if #queue < 2 or r.slots < 2 then return nil end
  local first = queue[1].prompt
  local length = #first - 1
  for i = 2, #queue do
    local prompt = queue[i].prompt
    length = math.min(length, #prompt - 1)
    for j = 1, length do
      if prompt[j] ~= first[j] then
        length = j - 1
        break
      end
    end
  end
  if length < 1 or (r.slots <= #queue and length < SHARED_PREFIX_MIN) then return nil end
  return { slot = r.slots, ids = table.move(first, 1, length, 1, {}), length = length }
end

-- One g:run in progress: the requests (and their numbers, g.request_numbers), each
-- replica's runner, the step each has running (plans[k] and its handle handles[k]),
-- per_replica's figures and the run's totals.
local Run = {}
Run.__index = Run

-- f(...)'s result; a replica's failure (a row no token can be drawn for, a device error)
-- names the replica.
function Run:on_replica(k, f, ...)
  local ok, v = pcall(f, ...)
  if not ok then
    error(("getp: replica %d (%s): %s"):format(k, getp_replicas.device_name(self.g.replicas[k].device), v), 0)
  end
  return v
end

-- Replica k's queue: a sequence (gptoss.scheduler's header) for each request assigned to
-- it that may generate; the others end at once, with no ids.
function Run:queue_of(k, assigned)
  local g, queue = self.g, {}
  for _, i in ipairs(assigned) do
    local req = self.requests[i]
    local seq = {
      index = i, text = req.text, prompt = req.tokens, output = {}, limit = req.limit,
      position = 0, replica = g.replicas[k],
    }
    if g.sampling then
      seq.sampling = {}
      for name, v in pairs(g.sampling) do seq.sampling[name] = v end
      seq.sampling.seed = g.sampling.seed + (self.numbers and self.numbers[i] or i) - 1
    end
    self.outputs[i] = seq.output
    if req.limit > 0 then
      queue[#queue + 1] = seq
      self.max_tokens = self.max_tokens + req.limit
    else
      seq.finish, self.done = "length", self.done + 1
    end
  end
  return queue
end

-- Counts a step of `rows` rows, prefill_rows of them feeding a prompt token, about to be
-- enqueued on replica k (a prefill step when it has one, else a decode step), and tells
-- g.on_step.
function Run:stepping(k, rows, prefill_rows)
  local pr = self.per_replica[k]
  if prefill_rows > 0 then
    pr.prefill_steps, pr.prefill_step_rows = pr.prefill_steps + 1, pr.prefill_step_rows + rows
    pr.prefill_rows = pr.prefill_rows + prefill_rows
  else
    pr.decode_steps, pr.decode_step_rows = pr.decode_steps + 1, pr.decode_step_rows + rows
  end
  if self.g.on_step then self.g.on_step(k, { rows = rows, prefill_rows = prefill_rows }) end
end

-- Replica k's shared prefix fed into its slot, a step a chunk.
function Run:feed_prefix(k, prefix)
  local r, pr = self.g.replicas[k], self.per_replica[k]
  r:sampling(prefix.slot) -- its rows' ids are never read
  self:on_replica(k, generate.feed, r, prefix.slot, prefix.ids, 0, { before_step = function(rows)
    self:stepping(k, rows, rows)
    pr.steps, self.steps = pr.steps + 1, self.steps + 1
  end })
end

-- Replica k's runner over the requests assigned to it, its shared prefix (if any) prefilled.
function Run:start_replica(k, assigned)
  local g, r = self.g, self.g.replicas[k]
  local queue = self:queue_of(k, assigned)
  local rows, chunk = getp_replicas.bounds(r)
  local prefix = g.share_prefix and shared_prefix(r, queue) or nil
  local pr = { requests = #assigned, tokens = 0, steps = 0, shared_prefix = 0, prefill_saved = 0, host = 0, waited = 0,
    prefill_steps = 0, prefill_step_rows = 0, prefill_rows = 0, decode_steps = 0, decode_step_rows = 0 }
  self.per_replica[k] = pr
  if prefix then
    self:feed_prefix(k, prefix)
    pr.shared_prefix, pr.prefill_saved = prefix.length, (#queue - 1) * prefix.length
    self.prefill_saved = self.prefill_saved + pr.prefill_saved
  end
  self.runners[k] = runner.new(g.scheduler, r, k, queue, { rows = rows, chunk = chunk, stop = STOP, prefix = prefix })
end

function Run:report()
  local g = self.g
  if g.on_progress then
    g.on_progress { done = self.done, total = #self.requests, tokens = self.tokens, max_tokens = self.max_tokens,
      steps = self.steps, elapsed = gptoss.clock() - self.started }
  end
end

-- Enqueues plan's step on replica k, its decode rows fed by step `from` (nil: none).
function Run:enqueue(k, plan, from)
  plan.batch.from = from
  local r = self.g.replicas[k]
  self:stepping(k, #plan.batch.slots, plan.prefill_rows)
  self.plans[k], self.handles[k] = plan, self:on_replica(k, r.step, r, plan.batch)
end

-- Replica k's running step done with: its next step built and enqueued first (one step
-- ahead), then the running one's ids read and applied. Counts the seconds of Lua work on
-- the steps (host) and of waiting in h:tokens() (waited): while the host keeps waiting, the
-- GPUs have their next steps queued.
function Run:advance(k)
  local replica_runner, plan, h = self.runners[k], self.plans[k], self.handles[k]
  local t0 = gptoss.clock()
  self.plans[k], self.handles[k] = nil, nil
  local ahead = replica_runner:build(plan)
  if ahead then self:enqueue(k, ahead, h) end
  local t1 = gptoss.clock()
  local ids = self:on_replica(k, h.tokens, h)
  local t2 = gptoss.clock()
  local generated, ended = replica_runner:apply(plan, ids)
  local pr = self.per_replica[k]
  pr.tokens, pr.steps = pr.tokens + generated, pr.steps + 1
  self.tokens, self.steps, self.done = self.tokens + generated, self.steps + 1, self.done + #ended
  for _, seq in ipairs(ended) do self.max_tokens = self.max_tokens - (seq.limit - #seq.output) end
  if not ahead and replica_runner:busy() then self:enqueue(k, replica_runner:build()) end
  pr.host, pr.waited = pr.host + (t1 - t0) + (gptoss.clock() - t2), pr.waited + (t2 - t1)
end

-- Steps every replica, round after round, until none has a step running.
function Run:step_all()
  self:report()
  for k, replica_runner in ipairs(self.runners) do
    local t0 = gptoss.clock()
    if replica_runner:busy() then self:enqueue(k, replica_runner:build()) end
    self.per_replica[k].host = gptoss.clock() - t0
  end
  while next(self.handles) ~= nil do
    for k = 1, #self.runners do
      if self.handles[k] then self:advance(k) end
    end
    self:report()
  end
end

--- g:run(prompts): the result getp's header describes; errors raised at level (as for
-- error, counted from the caller).
function getp_run.run(g, prompts, level)
  if g.closed then error("getp: used after close", level) end
  if prompts == nil then prompts = g.requests end
  getp_options.check_prompts(prompts, level)
  local numbers = g.request_numbers
  if numbers and #numbers ~= #prompts then
    error(("getp: request_numbers has %d entries, one a prompt, but the run has %d %s")
      :format(#numbers, #prompts, #prompts == 1 and "prompt" or "prompts"), level)
  end
  local started = gptoss.clock()
  local requests = getp_run.requests_of(g, prompts, numbers, level)
  local assignment = g.partition(requests, g.replicas)
  partition.check(assignment, #requests, #g.replicas)
  local run = setmetatable({ g = g, requests = requests, numbers = numbers, started = started, outputs = {},
    runners = {}, per_replica = {}, plans = {}, handles = {}, done = 0, max_tokens = 0, tokens = 0, steps = 0, prefill_saved = 0 },
    Run)
  for k = 1, #g.replicas do run:start_replica(k, assignment[k] or {}) end
  run:step_all()
  return { outputs = run.outputs, tokens = run.tokens, steps = run.steps, prefill_saved = run.prefill_saved,
    per_replica = run.per_replica, elapsed = gptoss.clock() - started }
end

return getp_run
