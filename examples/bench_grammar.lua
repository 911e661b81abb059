#!/usr/bin/env lua5.4
-- Structured output on one core (docs/structured.md): the compile time of a typical JSON
-- schema (30 properties, one nested object), and the time to compute a token mask over the
-- tokenizer's whole vocabulary (o200k: 201088 tokens), along a realistic document (the
-- tokens a model would write, replayed one by one) and along random walks (each token drawn
-- uniformly among the allowed ones, ended after --tokens); then the same for the schema with
-- its free strings bounded. Each pass starts from a freshly compiled grammar, so the times
-- include filling its cache; the walks after the first reuse the first one's grammar
-- (warm). Prints a table and one JSON line; --record appends it to examples/results.jsonl
-- (gptoss.results).
--   gptoss bench_grammar [--walks 20] [--tokens 300] [--compiles 50] [--seed 1] [--tokenizer PATH] [--record]
local argparse = require "argparse"
local json = require "dkjson"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local results = require "gptoss.results"
local script = require "gptoss.script"

local parser = argparse(script.name, "Structured output: schema compile time and mask time per token.")
parser:option("--walks", "Random walks.", "20"):convert(cmdline.integer("--walks", 1))
parser:option("--tokens", "Tokens at most per walk.", "300"):convert(cmdline.integer("--tokens", 1))
parser:option("--compiles", "Compilations of the schema timed.", "50"):convert(cmdline.integer("--compiles", 1))
parser:option("--seed", "Seed of the walks.", "1"):convert(cmdline.integer("--seed", 0))
parser:option("--tokenizer", "tokenizer.bin path (default: gptoss.tokenizer_path()'s).")
results.add_option(parser)
local a = script.parse(parser)

-- 30 properties, in the order a document writes them; preferences is the nested object
local SCHEMA = [[{"type": "object", "additionalProperties": false, "properties": {
  "id": {"type": "string", "format": "uuid"}, "name": {"type": "string"},
  "email": {"type": "string", "format": "email"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "height_cm": {"type": "number", "minimum": 0, "maximum": 300}, "is_active": {"type": "boolean"},
  "created_at": {"type": "string", "format": "date-time"}, "birthday": {"type": "string", "format": "date"},
  "role": {"enum": ["admin", "editor", "viewer"]}, "score": {"type": "number"},
  "rank": {"type": "integer"}, "nickname": {"type": ["string", "null"]}, "bio": {"type": "string"},
  "website": {"type": "string"}, "phone": {"type": "string", "pattern": "^\\+?[0-9 -]{7,20}$"},
  "country": {"enum": ["DE", "FR", "JP", "US", "BR"]}, "city": {"type": "string"},
  "zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "language": {"enum": ["en", "de", "fr", "ja", "pt"]},
  "timezone": {"type": "string"}, "currency": {"enum": ["EUR", "USD", "JPY", "BRL"]},
  "balance": {"type": "number", "minimum": -1000000, "maximum": 1000000}, "verified": {"type": "boolean"},
  "newsletter": {"type": "boolean"}, "last_login": {"type": "string", "format": "date-time"},
  "login_count": {"type": "integer", "minimum": 0}, "notes": {"type": "string"},
  "preferences": {"type": "object", "additionalProperties": false, "properties": {
    "theme": {"enum": ["light", "dark"]}, "notifications": {"type": "boolean"},
    "font_size": {"type": "integer", "minimum": 8, "maximum": 32}, "layout": {"type": "string"}},
    "required": ["theme", "notifications", "font_size", "layout"]},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
  "status": {"enum": ["new", "active", "suspended"]}},
  "required": ["id", "name", "email", "age", "height_cm", "is_active", "created_at", "birthday", "role", "score",
    "rank", "nickname", "bio", "website", "phone", "country", "city", "zip", "language", "timezone", "currency",
    "balance", "verified", "newsletter", "last_login", "login_count", "notes", "preferences", "tags", "status"]}]]

local DOCUMENT = '{"id":"3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c","name":"Ada Lovelace","email":"ada@example.org",'
  .. '"age":36,"height_cm":165.5,"is_active":true,"created_at":"2024-03-01T09:30:00Z","birthday":"1815-12-10",'
  .. '"role":"editor","score":98.25,"rank":3,"nickname":null,"bio":"Mathematician and writer, known for her '
  .. 'work on the Analytical Engine.","website":"https://example.org/ada","phone":"+44 20 7946 0958",'
  .. '"country":"FR","city":"London","zip":"12345","language":"en","timezone":"Europe/London",'
  .. '"currency":"EUR","balance":1234.56,"verified":true,"newsletter":false,'
  .. '"last_login":"2024-05-17T18:02:11+01:00","login_count":42,"notes":"Prefers email.",'
  .. '"preferences":{"theme":"dark","notifications":true,"font_size":14,"layout":"grid"},'
  .. '"tags":["math","computing","poetry"],"status":"active"}'

-- mean, p50, p99 and max of a list of numbers
local function summary(xs)
  local sorted, sum = {}, 0
  for i, x in ipairs(xs) do sorted[i], sum = x, sum + x end
  table.sort(sorted)
  local function at(q) return sorted[math.max(1, math.ceil(q * #sorted))] end
  return { mean = sum / #sorted, p50 = at(0.5), p99 = at(0.99), max = sorted[#sorted], n = #sorted }
end

-- The mask time (µs) of each token of a pass: ids replayed, or (ids nil) drawn by next_id
-- among the allowed ones up to max tokens or the end.
local function pass(m, mask, ids, next_id, max, times)
  for i = 1, ids and #ids or max do
    local t0 = gptoss.clock()
    m:mask(mask)
    times[#times + 1] = (gptoss.clock() - t0) * 1e6
    local id = ids and ids[i] or next_id(m)
    assert(m:accept(id))
    if m.ended then return end
  end
end

-- The typical schema with every free string bounded (maxLength), as the specs' random
-- schemas are: each position of a bounded string is a state of its own, whose cache the
-- first token there fills.
local BOUNDED = SCHEMA:gsub('"name": {"type": "string"}', '"name": {"type": "string", "maxLength": 80}')
  :gsub('"notes": {"type": "string"}', '"notes": {"type": "string", "maxLength": 200}')
  :gsub('"items": {"type": "string"}', '"items": {"type": "string", "maxLength": 20}')

-- compile times, and mask times along the document and along the walks, of one schema
local function measure(tok, text)
  local END = tok.special["end"]
  local compile = {}
  for i = 1, a.compiles do
    local t0 = gptoss.clock()
    gptoss.grammar.json_schema(text)
    compile[i] = (gptoss.clock() - t0) * 1e3
  end
  local g = gptoss.grammar.json_schema(text)
  local m = g:matcher(tok, { end_ids = { END } })
  local mask = m:mask()
  local replay = {}
  local ids = tok:encode(DOCUMENT, { mode = "o200k" })
  ids[#ids + 1] = END
  pass(m, mask, ids, nil, nil, replay)
  math.randomseed(a.seed) -- the same walks on every run and for both schemas
  local function next_id(w)
    local set = w:allowed()
    return set:nth(math.random(#set))
  end
  local cold, warm = {}, {}
  local walk_grammar = gptoss.grammar.json_schema(text)
  for i = 1, a.walks do
    pass(walk_grammar:matcher(tok, { end_ids = { END } }), mask, nil, next_id, a.tokens, i == 1 and cold or warm)
  end
  local all = table.move(warm, 1, #warm, #cold + 1, table.move(cold, 1, #cold, 1, {}))
  return { rules = g.rules, states = g.states, compile_ms = summary(compile),
    mask_us = { replay = summary(replay), walks = summary(all), walks_warm = summary(warm) } }
end

script.run(function()
  local record = results.recorder(a.record)
  local tok = gptoss.tokenizer(a.tokenizer)
  local t0 = gptoss.clock()
  gptoss.grammar.regex("a"):matcher(tok) -- the first matcher of a tokenizer builds its vocabulary's trie
  local trie_ms = (gptoss.clock() - t0) * 1e3
  local result = { bench = "grammar", vocab = tok.vocab_size, properties = 30, trie_ms = trie_ms, walks = a.walks,
    tokens = a.tokens,
    typical = measure(tok, SCHEMA), bounded = measure(tok, BOUNDED),
    bars = { mask_mean_us = 100, mask_p99_us = 2000, compile_ms = 50 } }
  print(("%-44s %9s %9s %9s %9s %6s"):format("measure", "mean", "p50", "p99", "max", "n"))
  for _, which in ipairs { "typical", "bounded" } do
    local r = result[which]
    local function row(name, s, unit)
      print(("%-44s %9.3f %9.3f %9.3f %9.3f %6d"):format(("%s: %s (%s)"):format(which, name, unit), s.mean, s.p50,
        s.p99, s.max, s.n))
    end
    row("compile", r.compile_ms, "ms")
    row("mask, a document replayed", r.mask_us.replay, "µs")
    row("mask, random walks", r.mask_us.walks, "µs")
    row("mask, random walks after the first", r.mask_us.walks_warm, "µs")
  end
  print(("vocabulary trie built in %.1f ms (once per tokenizer); typical: %d rules, %d states; bounded: %d states")
    :format(trie_ms, result.typical.rules, result.typical.states, result.bounded.states))
  print(json.encode(result))
  record({ result }, { "cpu" })
end)
