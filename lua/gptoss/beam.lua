--- gptoss.beam: beam search over a replica's slots (docs/loops.md#beam-search). Each live
-- beam holds a slot; a beam with several children is forked (r:fork) into the slots its
-- siblings free, so the prompt and the shared parts are never stepped twice. Each beam's
-- candidates are its slot's top tokens from the device's logprobs (r:sampling's
-- `logprobs`), so no logits row is copied back.
local generate = require "gptoss.generate"
local util = require "gptoss.util"

local beam = {}

local OPTIONS = { "replica", "prompt", "width", "max_tokens", "end_ids", "alpha", "slots" }
-- the most top entries a step's logprobs give per row (docs/api.md#per-slot-sampling)
local MOST_TOP = 20

-- Candidates best first: by summed logprob, then the parent beam's rank, then the token's
-- rank in its parent's list (lower id among equal logprobs).
local function better(a, b)
  if a.logprob ~= b.logprob then return a.logprob > b.logprob end
  if a.parent ~= b.parent then return a.parent < b.parent end
  return a.rank < b.rank
end

local function check_end_ids(fn, ids, vocab_size, level)
  if ids == nil then return {} end
  if type(ids) ~= "table" then
    error(("%s: end_ids must be a list of token ids (got %s)"):format(fn, type(ids)), level + 1)
  end
  local set = {}
  for i, id in ipairs(ids) do
    if math.type(id) ~= "integer" or id < 0 or id >= vocab_size then
      error(("%s: end_ids[%d] = %s is not a token id (0..%d)"):format(fn, i, tostring(id), vocab_size - 1), level + 1)
    end
    set[id] = true
  end
  return set
end

--- Beam search: beam.search{replica = r, prompt = ids, width = 4, max_tokens = 16,
-- end_ids = {...}, alpha = 1, slots = {...} (default 1..width; the first width of a longer
-- list)}.
--
-- Every step each live beam (its ids so far and their summed logprob) offers its top
-- min(width, vocab_size) tokens (at most 20: the device's logprobs); the candidates are
-- ranked by summed logprob. Walking them best first, a candidate ending in an end id is a
-- finished hypothesis when it ranks within the first `width`, and the first `width` others
-- are the next live beams. After max_tokens ids the live beams finish too. A hypothesis
-- scores generate.score(logprob, #ids, alpha): its summed logprob over its length^alpha
-- (the end id counts). The search ends when no beam is live.
--
-- Returns {ids =, logprob =, score =, finish = "end" | "length" (the best hypothesis),
-- hypotheses = {{ids =, logprob =, score =, finish =}, ...} (all finished, best first),
-- steps =}.
function beam.search(opts)
  local fn = "beam.search"
  opts = util.options(fn, opts, OPTIONS, 2)
  generate.check_replica(fn, opts.replica, "replica", 2)
  local r = opts.replica
  local vocab_size = r.model.config.vocab_size
  local width = generate.check_count(fn, opts.width, "width", 1, 2) or 4
  local max_tokens = generate.check_count(fn, opts.max_tokens, "max_tokens", 1, 2)
  if max_tokens == nil then error(("%s: max_tokens is required"):format(fn), 2) end
  local prompt = opts.prompt
  generate.check_prompt(fn, prompt, vocab_size, r.ctx, 2)
  if #prompt + max_tokens - 1 > r.ctx then
    error(("%s: the prompt's %d tokens and max_tokens = %d need %d positions; the replica holds %d")
      :format(fn, #prompt, max_tokens, #prompt + max_tokens - 1, r.ctx), 2)
  end
  local ends = check_end_ids(fn, opts.end_ids, vocab_size, 2)
  local alpha = opts.alpha or 1
  if type(alpha) ~= "number" or alpha ~= alpha or alpha < 0 then
    error(("%s: alpha must be a number >= 0 (got %s)"):format(fn, tostring(alpha)), 2)
  end
  local top = math.min(width, vocab_size)
  if top > MOST_TOP then
    error(("%s: each beam offers its top min(width, vocab_size) = %d tokens from the device's logprobs, "
      .. "which give at most %d"):format(fn, top, MOST_TOP), 2)
  end
  local slots = generate.check_slots(fn, r, opts.slots, width, "a beam", 2)
  for _, s in ipairs(slots) do r:sampling(s, { temperature = 0, logprobs = top }) end

  -- live beams: {slot =, ids =, logprob =, top = its slot's top tokens after its last id}
  local h = generate.feed(r, slots[1], prompt, 0)
  local live = { { slot = slots[1], ids = {}, logprob = 0, top = h:logprobs()[h.rows].top } }
  local free = table.move(slots, 2, #slots, 1, {})
  local finished, steps = {}, math.ceil(#prompt / generate.chunk(r))
  local function finish(b, how)
    finished[#finished + 1] = { ids = b.ids, logprob = b.logprob, finish = how,
      score = generate.score(b.logprob, #b.ids, alpha), order = #finished + 1 }
  end
  for t = 1, max_tokens do
    local candidates = {}
    for parent, b in ipairs(live) do
      for rank, e in ipairs(b.top) do
        if e.logprob > -math.huge then
          candidates[#candidates + 1] = { parent = parent, rank = rank, id = e.id, logprob = b.logprob + e.logprob }
        end
      end
    end
    table.sort(candidates, better)
    local chosen = {}
    for rank, c in ipairs(candidates) do
      if #chosen == width then break end
      local ids = table.move(live[c.parent].ids, 1, t - 1, 1, {})
      ids[t] = c.id
      local b = { ids = ids, logprob = c.logprob, parent = c.parent }
      if ends[c.id] then
        if rank <= width then finish(b, "end") end
      elseif t == max_tokens then
        finish(b, "length")
        chosen[#chosen + 1] = b
      else
        chosen[#chosen + 1] = b
      end
    end
    if t == max_tokens or #chosen == 0 then break end

    -- slots: a parent's first child continues in its slot, the others in forks of it
    local taken = {}
    for _, b in ipairs(chosen) do
      if not taken[b.parent] then
        taken[b.parent], b.slot = true, live[b.parent].slot
      end
    end
    for parent, p in ipairs(live) do
      if not taken[parent] then free[#free + 1] = p.slot end
    end
    local length = #prompt + t - 1
    for _, b in ipairs(chosen) do
      if not b.slot then
        b.slot = table.remove(free)
        r:fork(live[b.parent].slot, b.slot, length)
      end
    end
    local batch = { slots = {}, positions = {}, tokens = {} }
    for i, b in ipairs(chosen) do
      batch.slots[i], batch.positions[i], batch.tokens[i] = b.slot, length, b.ids[t]
    end
    local logprobs = r:step(batch):logprobs()
    steps = steps + 1
    for i, b in ipairs(chosen) do b.top = logprobs[i].top end
    live = chosen
  end

  table.sort(finished, function(a, b)
    if a.score ~= b.score then return a.score > b.score end
    return a.order < b.order
  end)
  for _, f in ipairs(finished) do f.order = nil end
  local best = finished[1]
  return { ids = best.ids, logprob = best.logprob, score = best.score, finish = best.finish,
    hypotheses = finished, steps = steps }
end

return beam
