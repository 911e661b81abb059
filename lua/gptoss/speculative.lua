--- gptoss.speculative: speculative decoding (docs/loops.md#speculative-decoding). A draft
-- replica (any model with the target's vocabulary: a smaller one, or the same) proposes k
-- tokens one step at a time; the target verifies them in one step of k + 1 rows of its
-- slot; the acceptance rule keeps the target's output distribution:
--
--   accept drafted x with probability min(1, p(x) / q(x))   (p the target's, q the draft's)
--   at the first rejection, draw from normalize(max(0, p - q)) and end the round
--   when all k are accepted, draw one more from the target's next row
--
-- Greedy (temperature 0) is that rule for one-hot p and q: drafted tokens are accepted
-- while they are the target's own choices, and the output is plain greedy decoding's, token
-- for token. Sampling draws from softmax(logits / temperature), computed here from the rows'
-- logits (filters such as top_p are not part of it), with uniforms from a seeded stream.
--
-- Rows past the accepted ones are never undone: the next round writes from the first
-- position that differs, which truncates each slot there (docs/api.md#replicas-and-steps).
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local util = require "gptoss.util"

local speculative = {}

--- A stream of uniforms in [0, 1) from a seed (SplitMix64: 53 bits of each output).
function speculative.uniforms(seed)
  local state = seed
  return function()
    state = state + 0x9E3779B97F4A7C15
    local z = (state ~ (state >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    return ((z ~ (z >> 31)) >> 11) * 2.0 ^ -53
  end
end

--- softmax(logits / temperature) of a logits row (a host tensor row or a list): a list whose
-- entry id + 1 is token id's probability.
function speculative.probabilities(row, temperature)
  local logits = type(row) == "table" and row or row:totable()
  local m = -math.huge
  for i = 1, #logits do
    if logits[i] > m then m = logits[i] end
  end
  local p, sum, exp = {}, 0, math.exp
  for i = 1, #logits do
    local w = exp((logits[i] - m) / temperature)
    p[i], sum = w, sum + w
  end
  for i = 1, #p do p[i] = p[i] / sum end
  return p
end

--- The token drawn from weights (a list: entry id + 1 is token id's weight, >= 0, not all
-- 0) with the uniform u: the first id whose running sum exceeds u times the weights' sum;
-- where rounding leaves none, the last id of non-zero weight.
function speculative.draw(weights, u)
  local total = 0
  for i = 1, #weights do total = total + weights[i] end
  local target, sum, last = u * total, 0, nil
  for i = 1, #weights do
    local w = weights[i]
    if w > 0 then
      sum, last = sum + w, i
      if sum > target then return i - 1 end
    end
  end
  return last - 1
end

--- Whether the drafted token x is accepted with the uniform u: u < p(x) / q(x), written
-- u * q(x) < p(x) (always when p(x) >= q(x)).
function speculative.accepts(p_x, q_x, u)
  return u * q_x < p_x
end

--- max(0, p - q) as weights for speculative.draw (unnormalised); where rounding leaves
-- them all 0 (p and q equal but for rounding, which a rejection makes almost impossible),
-- p itself.
function speculative.residual(p, q)
  local r, any = {}, false
  for i = 1, #p do
    local d = p[i] - q[i]
    r[i] = d > 0 and d or 0
    any = any or d > 0
  end
  return any and r or p
end

--- One round's verdict: p[i] the target's distribution for the token at drafted position
-- i (i = 1..k + 1), q[i] the draft's (i = 1..k), drafted[i] the ids the draft drew,
-- uniform() the stream. Returns how many drafted ids are accepted and the id that follows
-- them (from the residual at a rejection, else from p[k + 1]). p and q are read only as far
-- as the round gets, so they may compute their rows on first access.
function speculative.verify(p, q, drafted, uniform)
  for i, x in ipairs(drafted) do
    local pi, qi = p[i], q[i]
    if not speculative.accepts(pi[x + 1], qi[x + 1], uniform()) then
      return i - 1, speculative.draw(speculative.residual(pi, qi), uniform())
    end
  end
  return #drafted, speculative.draw(p[#drafted + 1], uniform())
end

-- A list whose entry i is computed by row(i) on first access.
local function lazy(row)
  return setmetatable({}, { __index = function(t, i)
    local v = row(i)
    rawset(t, i, v)
    return v
  end })
end

local OPTIONS = { "target", "draft", "prompt", "k", "max_tokens", "sampling", "target_slot", "draft_slot",
  "stop", "on_text", "on_round" }
-- Of the sampler's options (gptoss.sample_options()), those speculative sampling takes: it
-- draws from softmax(logits / temperature) itself, so no filter, bias or other mode applies.
local SAMPLING_OPTIONS = {}
for _, name in ipairs(gptoss.sample_options()) do
  if name == "temperature" or name == "seed" then SAMPLING_OPTIONS[#SAMPLING_OPTIONS + 1] = name end
end

local function check_sampling(fn, sampling, level)
  if sampling == nil then return 0, nil end
  if type(sampling) ~= "table" then
    error(("%s: sampling must be a table {%s =} (got %s)"):format(fn, table.concat(SAMPLING_OPTIONS, " =, "),
      type(sampling)), level + 1)
  end
  for key in pairs(sampling) do
    if not util.listed(SAMPLING_OPTIONS, key) then
      error(("%s: sampling: unknown option '%s' (known: %s: speculative sampling draws from "
        .. "softmax(logits / temperature))"):format(fn, tostring(key), table.concat(SAMPLING_OPTIONS, ", ")), level + 1)
    end
  end
  local t = sampling.temperature or 1
  if type(t) ~= "number" or t ~= t or t < 0 or t == math.huge then
    error(("%s: sampling.temperature must be a finite number >= 0 (got %s)"):format(fn, tostring(t)), level + 1)
  end
  local seed = sampling.seed
  if seed ~= nil and math.type(seed) ~= "integer" then
    error(("%s: sampling.seed must be an integer (got %s)"):format(fn, tostring(seed)), level + 1)
  end
  if t == 0 then return 0, nil end
  return t, seed or gptoss.sampler({}).seed -- the sampler picks a random seed
end

-- speculative.generate's options checked, with their defaults: {target, draft, ts, ds (the
-- slots), prompt, k, max_tokens, temperature, seed, stopper, on_text, on_round}. level:
-- generate's caller, seen from here.
local function check_options(fn, opts, level)
  opts = util.options(fn, opts, OPTIONS, level)
  generate.check_replica(fn, opts.target, "target", level)
  generate.check_replica(fn, opts.draft, "draft", level)
  local target, draft = opts.target, opts.draft
  local vocab_size = target.model.config.vocab_size
  if draft.model.config.vocab_size ~= vocab_size then
    error(("%s: the draft's vocabulary has %d tokens, the target's %d: they must be the same")
      :format(fn, draft.model.config.vocab_size, vocab_size), level)
  end
  local ts = generate.check_slot(fn, target, opts.target_slot, "target_slot", level)
  local ds = generate.check_slot(fn, draft, opts.draft_slot, "draft_slot", level)
  if rawequal(target, draft) and ts == ds then
    error(("%s: the target and the draft are one replica and both use slot %d"):format(fn, ts), level)
  end
  generate.check_prompt(fn, opts.prompt, vocab_size, target.ctx, level)
  local k = generate.check_count(fn, opts.k, "k", 1, level) or 4
  if k + 1 > generate.chunk(target) then
    error(("%s: a round steps k + 1 = %d rows of the target's slot; it takes at most %d (its chunk)")
      :format(fn, k + 1, generate.chunk(target)), level)
  end
  -- after a rejection the draft goes back up to k - 1 positions, which a GPU slot's windowed
  -- rings allow while they reach that far back: up to its chunk
  if k - 1 > generate.chunk(draft) then
    error(("%s: after a rejection the draft goes back up to k - 1 = %d positions; it may go back at most %d"
      .. " (its chunk)"):format(fn, k - 1, generate.chunk(draft)), level)
  end
  local max_tokens = generate.check_count(fn, opts.max_tokens, "max_tokens", 1, level)
  local temperature, seed = check_sampling(fn, opts.sampling, level)
  local stopper = generate.stopper(fn, opts.stop, level)
  for _, f in ipairs { "on_text", "on_round" } do
    if opts[f] ~= nil and type(opts[f]) ~= "function" then
      error(("%s: %s must be a function (got %s)"):format(fn, f, type(opts[f])), level)
    end
  end
  return { target = target, draft = draft, ts = ts, ds = ds, prompt = opts.prompt, k = k, max_tokens = max_tokens,
    temperature = temperature, seed = seed, stopper = stopper, on_text = opts.on_text, on_round = opts.on_round }
end

--- Speculative decoding of one sequence: speculative.generate{target = r, draft = rd,
-- prompt = ids, k = 4, max_tokens = n, sampling = {temperature =, seed =} (default
-- greedy), target_slot = 1, draft_slot = 1, stop = {text =, ids =, tokenizer =}, on_text =
-- function(text), on_round = function(round)}. The target and the draft may be one replica
-- (then with two slots). Ends at a stop, max_tokens ids, or prompt + ids filling the
-- target's context. on_round gets {position = where the round's target rows start,
-- drafted = ids, accepted = how many, next = the id that followed} after each round's
-- verdict, before its ids are taken.
--
-- Returns {ids =, finish = "stop" | "length" | "context", stop =, text = (with a
-- tokenizer), rounds = target steps that verified, proposed = drafted ids, accepted =
-- accepted ids, tokens_per_round = #ids / rounds, target_steps =, draft_steps = (prefill
-- included), seed = (sampling)}.
function speculative.generate(opts)
  local o = check_options("speculative.generate", opts, 3)
  local target, draft, ts, ds, prompt, k = o.target, o.draft, o.ts, o.ds, o.prompt, o.k
  local temperature, seed, stopper = o.temperature, o.seed, o.stopper
  local sampled = temperature > 0
  local uniform = sampled and speculative.uniforms(seed)
  target:sampling(ts, { temperature = 0 })
  draft:sampling(ds, { temperature = 0 })

  local seq = table.move(prompt, 1, #prompt, 1, {}) -- prompt and ids so far
  local ids, text = {}, {}
  local limit, limit_reason = #prompt + (o.max_tokens or math.huge), "length"
  if limit > target.ctx then limit, limit_reason = target.ctx, "context" end
  local stats = { rounds = 0, proposed = 0, accepted = 0, target_steps = 0, draft_steps = 0 }
  local chunk = generate.chunk(draft)

  -- positions each slot holds of seq: both are fed everything but seq's last id
  local held = #prompt - 1
  if held > 0 then
    local head = table.move(prompt, 1, held, 1, {})
    generate.feed(target, ts, head, 0)
    generate.feed(draft, ds, head, 0)
    stats.target_steps, stats.draft_steps = math.ceil(held / generate.chunk(target)), math.ceil(held / chunk)
  end
  local draft_held = held

  -- the draft's k ids after seq, drawn one step at a time (greedy: each step fed by the
  -- one before on the device, read at the end), and its distributions when sampling
  local function propose(n, k_round)
    local catch_up = table.move(seq, draft_held + 1, n, 1, {})
    stats.draft_steps = stats.draft_steps + math.ceil(#catch_up / chunk) + k_round - 1
    local h = generate.feed(draft, ds, catch_up, draft_held, { logits = sampled })
    local drafted, q = {}, {}
    if sampled then
      for i = 1, k_round do
        q[i] = speculative.probabilities(h:logits()[1], temperature)
        drafted[i] = speculative.draw(q[i], uniform())
        if i < k_round then
          h = draft:step { slots = { ds }, positions = { n + i - 1 }, tokens = { drafted[i] }, logits = { 1 } }
        end
      end
    else
      local steps, rows = { h }, { h.rows }
      for i = 2, k_round do
        steps[i], rows[i] = draft:step { slots = { ds }, positions = { n + i - 2 }, tokens = { -rows[i - 1] },
          from = steps[i - 1] }, 1
      end
      for i = 1, k_round do drafted[i] = steps[i]:tokens()[rows[i]] end
    end
    draft_held = n + k_round - 1
    return drafted, q
  end

  local finish
  while not finish do
    local n = #seq
    local k_round = math.max(0, math.min(k, limit - n - 1, draft.ctx - n + 1))
    local drafted, q = {}, {}
    if k_round > 0 then drafted, q = propose(n, k_round) end
    local batch = { slots = {}, positions = {}, tokens = {}, logits = sampled or nil }
    for j = 0, k_round do
      batch.slots[j + 1], batch.positions[j + 1], batch.tokens[j + 1] = ts, n - 1 + j, j == 0 and seq[n] or drafted[j]
    end
    local h = target:step(batch)
    local accepted, next_id
    if sampled then
      local logits = h:logits()
      accepted, next_id = speculative.verify(lazy(function(i)
        return speculative.probabilities(logits[i], temperature)
      end), q, drafted, uniform)
    else
      local chosen = h:tokens()
      accepted = 0
      while accepted < k_round and drafted[accepted + 1] == chosen[accepted + 1] do accepted = accepted + 1 end
      next_id = chosen[accepted + 1]
    end
    stats.rounds, stats.target_steps = stats.rounds + 1, stats.target_steps + 1
    stats.proposed, stats.accepted = stats.proposed + k_round, stats.accepted + accepted
    if o.on_round then
      o.on_round { position = n - 1, drafted = drafted, accepted = accepted, next = next_id }
    end
    -- the round's ids, up to a stop or the limit
    local out = table.move(drafted, 1, accepted, 1, {})
    out[#out + 1] = next_id
    for _, id in ipairs(out) do
      seq[#seq + 1], ids[#ids + 1] = id, id
      if stopper then
        local shown, stopped = stopper:add(id)
        if shown then
          text[#text + 1] = shown
          if o.on_text and shown ~= "" then o.on_text(shown) end
        end
        if stopped then finish = "stop" end
      end
      if not finish and #seq == limit then finish = limit_reason end
      if finish then break end
    end
    draft_held = math.min(draft_held, n + accepted)
  end

  local result = { ids = ids, finish = finish, seed = seed }
  if stopper and stopper.decoder then
    if finish ~= "stop" then
      local rest = stopper:flush()
      text[#text + 1] = rest
      if o.on_text and rest ~= "" then o.on_text(rest) end
    end
    result.text = table.concat(text)
  end
  result.stop = stopper and stopper.reason
  for key, v in pairs(stats) do result[key] = v end
  result.tokens_per_round = #ids / stats.rounds
  return result
end

return speculative
