--- gptoss.generate: plain generation loops over a replica's slots (docs/loops.md):
--
--   generate.feed(r, slot, ids, position)   ids stepped into a slot in chunks a step carries
--   generate.run{...}        one sequence: prompt in, ids out until a stop, a length or the context
--   generate.parallel{...}   n samples of one prompt: the prompt prefilled once and forked
--                            into n slots, each slot drawing with its own seed (best-of-n)
--   generate.score(logprob, length, alpha)  a length-normalised score
--
-- Decoding runs one step ahead: the next step is enqueued, fed on the device by the running
-- one (`from = h`), before the running one's ids are read, so a GPU never waits for Lua. A
-- sequence that stops on a stop id or string has had one more row stepped, whose id is
-- dropped: its slot may hold one position more than its prompt and ids.
local constraint = require "gptoss.constraint"
local stops = require "gptoss.stops"
local util = require "gptoss.util"

local generate = {}

-- Rows of one slot a CPU step carries here (a step's scratch grows with its rows times the
-- context; GPU replicas say their own chunk).
local CPU_CHUNK = 64

--- The rows and chunk to give a GPU replica whose steps carry one slot's prompt alone (a chat,
-- a benchmark of one sequence): a replica's default chunk (128 rows) suits many slots sharing
-- a step, and one prompt prefills faster in fewer, larger steps.
generate.LONE_PROMPT_ROWS = 2048

--- The rows of one slot a step of r may carry.
function generate.chunk(r)
  return r.chunk or CPU_CHUNK
end

--- Steps ids into `slot` at positions position, position + 1, ... (truncating the slot
-- there), in chunks of generate.chunk(r) rows; returns the last step's handle, whose last
-- row yields the id after ids: the only row drawn (the others' ids are false, and a CPU
-- replica computes no logits for them). opts: logits = true keeps the last row's logits
-- (h:logits() is then that one row); chunk = n steps n rows at a time instead (at most
-- r.chunk on a GPU); before_step = function(rows) is called before each step with its row
-- count; matcher = m draws the last row under m's constraint (r:step's constraint).
function generate.feed(r, slot, ids, position, opts)
  opts = opts or {}
  local chunk, h = opts.chunk or generate.chunk(r), nil
  for first = 1, #ids, chunk do
    local last = math.min(first + chunk - 1, #ids)
    local batch = { slots = {}, positions = {}, tokens = {}, draw = {} }
    for i = first, last do
      local n = i - first + 1
      batch.slots[n], batch.positions[n], batch.tokens[n] = slot, position + i - 1, ids[i]
    end
    if last == #ids then batch.draw[1] = last - first + 1 end
    if last == #ids and opts.logits then batch.logits = { last - first + 1 } end
    if last == #ids and opts.matcher then batch.constraint = { [last - first + 1] = opts.matcher } end
    if opts.before_step then opts.before_step(last - first + 1) end
    h = r:step(batch)
  end
  return h
end

--- sum / length^alpha: a sequence's summed logprob normalised by its length (alpha 0: the
-- sum itself; 1: the mean logprob).
function generate.score(logprob, length, alpha)
  return logprob / length ^ alpha
end

---------------------------------------------------------------------------------------------
-- Checks shared by the loops (gptoss.beam and gptoss.speculative use them too)

--- A replica, open. fn names the loop in messages.
function generate.check_replica(fn, r, what, level)
  if not util.is_a(r, "gptoss.replica") then
    error(("%s: %s must be a gptoss replica (got %s)"):format(fn, what, util.kind(r)), level + 1)
  end
  if r.closed then error(("%s: %s is closed"):format(fn, what), level + 1) end
end

--- A slot of r (default 1).
function generate.check_slot(fn, r, slot, what, level)
  if slot == nil then return 1 end
  if math.type(slot) ~= "integer" or slot < 1 or slot > r.slots then
    error(("%s: %s must be a slot of the replica, 1..%d (got %s)"):format(fn, what, r.slots, tostring(slot)),
      level + 1)
  end
  return slot
end

--- A prompt: a non-empty list of token ids below vocab_size, shorter than ctx (room for one
-- generated id at least).
function generate.check_prompt(fn, prompt, vocab_size, ctx, level)
  if type(prompt) ~= "table" or #prompt == 0 then
    error(("%s: prompt must be a non-empty list of token ids (got %s)"):format(fn,
      type(prompt) == "table" and "an empty list" or type(prompt)), level + 1)
  end
  for i, id in ipairs(prompt) do
    if math.type(id) ~= "integer" or id < 0 or id >= vocab_size then
      error(("%s: prompt[%d] = %s is not a token id (0..%d)"):format(fn, i, tostring(id), vocab_size - 1), level + 1)
    end
  end
  if #prompt >= ctx then
    error(("%s: the prompt's %d tokens leave no room in a context of %d positions"):format(fn, #prompt, ctx),
      level + 1)
  end
end

--- The slots a loop of n sequences uses: slots as given (at least n distinct slots of r;
-- the first n are used) or, when nil, 1..n. what says what each slot holds ("a sample").
function generate.check_slots(fn, r, slots, n, what, level)
  if slots == nil then
    if n > r.slots then
      error(("%s: %d slots are needed (one for %s); the replica has %d"):format(fn, n, what, r.slots), level + 1)
    end
    slots = {}
    for i = 1, n do slots[i] = i end
    return slots
  end
  if type(slots) ~= "table" or #slots < n then
    error(("%s: slots must list at least %d slots (got %s)"):format(fn, n,
      type(slots) == "table" and #slots or type(slots)), level + 1)
  end
  local seen = {}
  for i = 1, n do
    local s = generate.check_slot(fn, r, slots[i], ("slots[%d]"):format(i), level + 1)
    if seen[s] then error(("%s: slots[%d] = %d repeats slots[%d]"):format(fn, i, s, seen[s]), level + 1) end
    seen[s] = i
  end
  return table.move(slots, 1, n, 1, {})
end

--- An integer >= min, or nil (the default).
function generate.check_count(fn, v, name, min, level)
  if v ~= nil and (math.type(v) ~= "integer" or v < min) then
    error(("%s: %s must be an integer >= %d (got %s)"):format(fn, name, min, tostring(v)), level + 1)
  end
  return v
end

--- A stop option, {text =, ids =, tokenizer =} (gptoss.stops.new), as a stopper; nil when
-- not given.
function generate.stopper(fn, stop, level)
  if stop == nil then return nil end
  if type(stop) ~= "table" then
    error(("%s: stop must be a table {text =, ids =, tokenizer =} (got %s)"):format(fn, type(stop)), level + 1)
  end
  local ok, s = pcall(stops.new, stop)
  if not ok then error(("%s: stop: %s"):format(fn, util.bare(s):gsub("^stops%.new: ", "")), level + 1) end
  return s
end

-- r:sampling(slot, params), its error naming the loop.
local function set_sampling(fn, r, slot, params, level)
  local ok, err = pcall(r.sampling, r, slot, params)
  if not ok then error(("%s: sampling: %s"):format(fn, util.bare(err):gsub("^replica:sampling: ", "")), level + 1) end
end

---------------------------------------------------------------------------------------------
-- The decode loop

-- Whether matcher m's output is over: an end token taken, or complete with nothing that
-- may follow (reading m waits for the token the step before drew for it).
local function format_done(m)
  return m.ended or (m:done() and #m:allowed() == 0)
end

-- Decodes sequences whose next ids the step h yields, until each stops. A sequence seq has
-- slot, row (the row of h yielding its next id), position (where that id is fed), limit
-- (most ids), ids (so far), stopper (or nil), matcher (its format's, or nil), logprobs (a
-- list, when its slot reports them), text (a list of pieces, when the stopper shows text),
-- on_text; finish is set when it ends. Returns the steps it stepped, h included.
local function decode(r, h, seqs)
  local live, steps = seqs, 1
  while #live > 0 do
    -- the next step, fed by h on the device: a row for each sequence whose id from h is
    -- not its last by length or format (a stop may still end it there); a constrained row
    -- waits for h's id, which its matcher takes before its mask is made
    local batch, rows = { slots = {}, positions = {}, tokens = {}, from = h, constraint = {} }, {}
    for _, seq in ipairs(live) do
      if #seq.ids + 1 < seq.limit and not (seq.matcher and format_done(seq.matcher)) then
        local n = #batch.slots + 1
        batch.slots[n], batch.positions[n], batch.tokens[n] = seq.slot, seq.position, -seq.row
        batch.constraint[n] = seq.matcher
        rows[seq] = n
      end
    end
    local ahead = #batch.slots > 0 and r:step(batch) or nil
    if ahead then steps = steps + 1 end
    local ids, logprobs = h:tokens(), seqs.logprobs and h:logprobs()
    local still = {}
    for _, seq in ipairs(live) do
      local id = ids[seq.row]
      seq.ids[#seq.ids + 1] = id
      if logprobs then seq.logprobs[#seq.ids] = logprobs[seq.row].logprob end
      local stopped = false
      if seq.stopper then
        local text
        text, stopped = seq.stopper:add(id)
        if text then
          seq.text[#seq.text + 1] = text
          if seq.on_text and text ~= "" then seq.on_text(text) end
        end
      end
      if stopped or (seq.matcher and not rows[seq]) and format_done(seq.matcher) then
        seq.finish = "stop"
      elseif #seq.ids == seq.limit then
        seq.finish = seq.limit_reason
      else
        seq.row, seq.position = rows[seq], seq.position + 1
        still[#still + 1] = seq
      end
    end
    live, h = still, ahead
  end
  return steps
end

-- A sequence of the decode loop at `slot`, its next id from row `row` of the first step.
local function sequence(slot, row, position, limit, limit_reason, stopper, on_text)
  return { slot = slot, row = row, position = position, limit = limit, limit_reason = limit_reason, ids = {},
    logprobs = {}, text = {}, stopper = stopper, on_text = on_text }
end

-- The matcher of a format option (nil without one): a matcher as given, else a grammar or
-- JSON schema (gptoss.constraint.grammar) matched over tokenizer's vocabulary, ended by the
-- stop's sequences of one id.
local function format_matcher(fn, format, tokenizer, stop, level)
  if format == nil then return nil end
  if util.is_a(format, "gptoss.matcher") then return format end
  local g = constraint.grammar(fn, format)
  if not util.is_a(tokenizer, "gptoss.tokenizer") then
    error(("%s: format needs tokenizer (a gptoss tokenizer) to match its grammar over (got %s)")
      :format(fn, util.kind(tokenizer)), level + 1)
  end
  local end_ids = {}
  for _, seq in ipairs(stop and stop.ids or {}) do
    if #seq == 1 then end_ids[#end_ids + 1] = seq[1] end
  end
  return g:matcher(tokenizer, { end_ids = end_ids })
end

-- What a decoded sequence gives back.
local function result(seq, with_logprobs)
  local out = { ids = seq.ids, finish = seq.finish }
  if seq.stopper and seq.stopper.decoder then
    if seq.finish ~= "stop" then
      local rest = seq.stopper:flush()
      seq.text[#seq.text + 1] = rest
      if seq.on_text and rest ~= "" then seq.on_text(rest) end
    end
    out.text = table.concat(seq.text)
  end
  if seq.stopper and seq.stopper.reason then out.stop = seq.stopper.reason end
  if with_logprobs then
    local sum = 0
    for _, lp in ipairs(seq.logprobs) do sum = sum + lp end
    out.logprobs, out.logprob = seq.logprobs, sum
  end
  return out
end

-- The most ids a sequence may take after a prompt of n tokens: max_tokens, and what the
-- context leaves (prompt + ids <= ctx); and which of the two ends it.
local function limit(max_tokens, n, ctx)
  local room = ctx - n
  if max_tokens and max_tokens <= room then return max_tokens, "length" end
  return room, "context"
end

-- The options run and parallel share, checked: returns the replica, the prompt, max_tokens,
-- the stopper (nil without stop) and the format's matcher (nil without format).
local function check_common(fn, opts, known, level)
  opts = util.options(fn, opts, known, level + 1)
  generate.check_replica(fn, opts.replica, "replica", level + 1)
  local r = opts.replica
  generate.check_prompt(fn, opts.prompt, r.model.config.vocab_size, r.ctx, level + 1)
  local stopper = generate.stopper(fn, opts.stop, level + 1)
  local ok, matcher = pcall(format_matcher, fn, opts.format, opts.tokenizer, opts.stop, level + 1)
  if not ok then error(util.bare(matcher), level + 1) end
  return r, opts.prompt, generate.check_count(fn, opts.max_tokens, "max_tokens", 1, level + 1), stopper, matcher
end

local RUN_OPTIONS = { "replica", "slot", "prompt", "max_tokens", "sampling", "stop", "on_text", "logprobs", "format",
  "tokenizer" }

--- One sequence: generate.run{replica = r, prompt = ids, slot = 1, max_tokens = n,
-- sampling = r:sampling's parameters (default greedy), stop = {text =, ids =, tokenizer =},
-- on_text = function(text), logprobs = true, format = a matcher, or a grammar or JSON schema
-- with tokenizer = its tokenizer (docs/structured.md#generation)}. The prompt is fed from
-- position 0 of the slot (what it held is replaced) and ids are decoded until a stop, the
-- format's end, max_tokens ids, or prompt + ids filling the replica's context. Returns {ids
-- =, finish = "stop" | "length" | "context", stop = what stopped it, text = (with a
-- tokenizer) the text shown, logprob =,
-- logprobs = (with logprobs = true) the ids' log-probabilities and their sum, steps =}.
function generate.run(opts)
  local fn = "generate.run"
  local r, prompt, max_tokens, stopper, matcher = check_common(fn, opts, RUN_OPTIONS, 2)
  local slot = generate.check_slot(fn, r, opts.slot, "slot", 2)
  local params = { temperature = 0 } -- greedy unless sampling is given
  if opts.sampling ~= nil then
    params = {}
    for k, v in pairs(util.options(fn .. ": sampling", opts.sampling, nil, 2)) do params[k] = v end
  end
  if opts.logprobs then params.logprobs = 0 end
  set_sampling(fn, r, slot, params, 2)

  local h = generate.feed(r, slot, prompt, 0, { matcher = matcher })
  local seq = sequence(slot, h.rows, #prompt, limit(max_tokens, #prompt, r.ctx))
  seq.stopper, seq.on_text, seq.matcher = stopper, opts.on_text, matcher
  local steps = decode(r, h, { seq, logprobs = opts.logprobs })
  local out = result(seq, opts.logprobs)
  out.steps = steps + math.ceil(#prompt / generate.chunk(r)) - 1 -- the prompt's last chunk is decode's first
  return out
end

local PARALLEL_OPTIONS = { "replica", "prompt", "n", "slots", "max_tokens", "sampling", "stop", "alpha", "format",
  "tokenizer" }

--- n samples of one prompt: generate.parallel{replica = r, prompt = ids, n = 4, slots =
-- {...} (default 1..n; the first n of a longer list), sampling = {temperature =, top_p =, ..., seed = s}, max_tokens =,
-- stop = {...}, alpha = 1, format =, tokenizer = (as run's; each sample a fork of the
-- format's matcher)}. The prompt but its last token is prefilled once, into the
-- first slot, and forked into the others; then every slot feeds the last token and decodes
-- on its own, sample i drawing with seed s + i - 1 (keyed by position, so sample i is the
-- sequence generate.run gives with that seed on a fresh slot). Each sample's slot reports
-- its ids' log-probabilities, and sample i scores generate.score(logprob, #ids, alpha).
-- Returns {samples = {run's result for each, with score}, best = the index of the highest
-- score, steps =, prefill_rows = rows stepped for the prompt (L - 1 + n, where n prefills
-- would step n L)}.
function generate.parallel(opts)
  local fn = "generate.parallel"
  local r, prompt, max_tokens, stopper, matcher = check_common(fn, opts, PARALLEL_OPTIONS, 2)
  local n = generate.check_count(fn, opts.n, "n", 1, 2)
  if n == nil then error(("%s: n (how many samples) is required"):format(fn), 2) end
  local slots = generate.check_slots(fn, r, opts.slots, n, "a sample", 2)
  local alpha = opts.alpha or 1
  if type(alpha) ~= "number" or alpha ~= alpha or alpha < 0 then
    error(("%s: alpha must be a number >= 0 (got %s)"):format(fn, tostring(alpha)), 2)
  end
  local sampling = util.options(fn .. ": sampling", opts.sampling, nil, 2)
  local seed = sampling.seed
  if math.type(seed) ~= "integer" then
    error(("%s: sampling.seed must be an integer: sample i draws with seed + i - 1 (got %s)")
      :format(fn, tostring(seed)), 2)
  end
  set_sampling(fn, r, slots[1], sampling, 2) -- checked before any step

  -- the shared part of the prompt once, then one row a sample for its last token
  local shared = #prompt - 1
  local steps = 0
  if shared > 0 then
    generate.feed(r, slots[1], table.move(prompt, 1, shared, 1, {}), 0)
    steps = math.ceil(shared / generate.chunk(r))
    for i = 2, n do r:fork(slots[1], slots[i], shared) end
  end
  -- set after the shared prefill, whose drawn id is none of the samples': penalties count from here
  for i, s in ipairs(slots) do
    local params = { logprobs = 0 }
    for k, v in pairs(sampling) do params[k] = v end
    params.seed = seed + i - 1
    set_sampling(fn, r, s, params, 2)
  end
  local batch = { slots = {}, positions = {}, tokens = {}, constraint = {} }
  local seqs = { logprobs = true }
  local most, why = limit(max_tokens, #prompt, r.ctx)
  for i, s in ipairs(slots) do
    batch.slots[i], batch.positions[i], batch.tokens[i] = s, shared, prompt[#prompt]
    seqs[i] = sequence(s, i, #prompt, most, why, stopper and stopper:fresh())
    seqs[i].matcher = matcher and matcher:fork()
    batch.constraint[i] = seqs[i].matcher
  end
  steps = steps + decode(r, r:step(batch), seqs)
  local samples, best = {}, nil
  for i, seq in ipairs(seqs) do
    local out = result(seq, true)
    out.score = generate.score(out.logprob, #out.ids, alpha)
    samples[i] = out
    if best == nil or out.score > samples[best].score then best = i end
  end
  return { samples = samples, best = best, steps = steps, prefill_rows = shared + n }
end

return generate
