-- Generated JSON schemas (grammar_gen) decoded by the CPU engine: a random-weight 7m model at
-- temperature 1, each sequence seeded by its schema's number, many sequences to a step (one
-- slot each, a constrained row each). Shared by tests/constraint_walk_spec.lua (a few dozen
-- schemas) and tools/constraint_walk.lua (hundreds, outside the suite).
local gptoss = require "gptoss"
local json = require "dkjson"
local G = require "grammar_gen"

local W = {}

-- A sequence of schema number seed: its grammar's matcher, started at position 0.
local function start(tok, seed, slot, prompt_id, end_id)
  local rng = G.rng(seed)
  local schema = seed % 10 == 0 and G.recursive_schema(rng) or G.schema(rng, 0)
  local text = G.json(schema)
  local g = gptoss.grammar.json_schema(text, { whitespace = rng(3) - 1 })
  return { seed = seed, slot = slot, text = text, matcher = g:matcher(tok, { end_ids = { end_id } }), ids = {},
    last = prompt_id }
end

--- Decodes schemas first .. first + n - 1 on a replica of `slots` slots, each until its end
-- token or max_tokens ids. Returns {cases = {{schema =, outputs = {text} or {}, text =}, ...}
-- (ajv's input: the finished outputs), finished = count, tokens = ids drawn, steps =}.
function W.run(opts)
  local tok, model = opts.tokenizer, opts.model or gptoss.synthetic("7m")
  local slots, max = opts.slots or 16, opts.max_tokens or 600
  local r <close> = model:replica { device = "cpu", slots = slots, ctx = max + 1 }
  local prompt_id, end_id = tok:encode("JSON")[1], tok.special["end"]
  local next_seed, last_seed = opts.first, opts.first + opts.n - 1
  local live, out = {}, { cases = {}, finished = 0, tokens = 0, steps = 0 }
  -- the next schema's sequence on slot, into list
  local function refill(list, slot)
    if next_seed > last_seed then return end
    r:sampling(slot, { temperature = 1, seed = next_seed })
    list[#list + 1] = start(tok, next_seed, slot, prompt_id, end_id)
    next_seed = next_seed + 1
  end
  for slot = 1, slots do refill(live, slot) end
  while #live > 0 do
    local batch = { slots = {}, positions = {}, tokens = {}, constraint = {} }
    for i, seq in ipairs(live) do
      batch.slots[i], batch.positions[i], batch.tokens[i] = seq.slot, #seq.ids, seq.last
      batch.constraint[i] = seq.matcher
    end
    local ids = r:step(batch):tokens()
    out.steps, out.tokens = out.steps + 1, out.tokens + #ids
    local still = {}
    for i, seq in ipairs(live) do
      local id = ids[i]
      seq.ids[#seq.ids + 1], seq.last = id, id
      local ended = seq.matcher.ended
      if ended or #seq.ids == max then
        local text = ended and tok:decode(table.move(seq.ids, 1, #seq.ids - 1, 1, {})) or nil
        out.cases[#out.cases + 1] = { schema = json.decode(seq.text), text = seq.text, outputs = { text } }
        if ended then out.finished = out.finished + 1 end
        refill(still, seq.slot) -- position 0 again: the slot starts over
      else
        still[#still + 1] = seq
      end
    end
    live = still
  end
  return out
end

return W
