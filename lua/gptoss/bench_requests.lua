--- gptoss.bench_requests: the requests gptoss bench_serve sends (docs/serve.md#measuring),
-- drawn here so that tests/serve_host_bench.lua loads a server alike without a client:
-- completions of random prompt ids and, a share of them, chats of words, carrying a
-- response_format when one is given. Draws use math.random (seed it first).
local cjson = require "cjson"
local draw_lengths = require "gptoss.lengths"

local bench_requests = {}

local PROMPT_IDS = 100000 -- prompt ids drawn below this: ordinary text tokens of o200k
-- The chat messages' words: each one o200k token, alone and after a space (tests/serve_spec.lua checks)
bench_requests.WORDS = { "the", "time", "people", "year", "way", "day", "man", "thing", "woman", "life", "child",
  "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case",
  "week", "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
  "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job",
  "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour",
  "game", "line", "end", "member" }

--- bench_serve's --json-schema typical: a record of the size and keywords structured-output
-- requests commonly have, every value bounded; as text, since the properties' order is the body's.
bench_requests.TYPICAL_SCHEMA = [[{"type": "object", "additionalProperties": false, "properties": {
  "id": {"type": "integer", "minimum": 1, "maximum": 999999}, "title": {"type": "string", "maxLength": 60},
  "summary": {"type": "string", "maxLength": 160},
  "category": {"enum": ["news", "review", "tutorial", "opinion", "reference"]},
  "rating": {"type": "integer", "minimum": 1, "maximum": 5}, "published": {"type": "boolean"},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 5},
  "author": {"type": "object", "additionalProperties": false, "properties": {
    "name": {"type": "string", "maxLength": 40}, "email": {"type": "string", "maxLength": 60}},
    "required": ["name", "email"]},
  "word_count": {"type": "integer", "minimum": 0, "maximum": 100000},
  "language": {"enum": ["en", "de", "fr", "es", "ja"]}},
  "required": ["id", "title", "summary", "category", "rating", "published", "tags", "author", "word_count",
    "language"]}]]

--- The response_format's JSON text (strict json_schema) of a schema's JSON text, named name.
function bench_requests.response_format(name, schema_text)
  return ('{"type":"json_schema","json_schema":{"name":%s,"strict":true,"schema":%s}}'):format(cjson.encode(name),
    schema_text)
end

--- The next request, drawn: opts {model =, lengths = "sharegpt" | "fixed", input =, output =,
-- max_len =, chat_fraction =, response_format = JSON text or nil}. A completion of random
-- prompt ids, or (chat_fraction) a chat of words, max_tokens the drawn output length,
-- temperature 0, reasoning_effort none, the response_format spliced in when given; the draws
-- are the same with it and without. Returns the path, the body's JSON text and whether it
-- is a chat.
function bench_requests.draw(opts)
  local lengths = opts.lengths == "fixed" and { opts.input, opts.output } or { draw_lengths.draw_sharegpt(opts.max_len) }
  local prompt = {}
  if opts.chat_fraction > 0 and math.random() < opts.chat_fraction then
    local words = bench_requests.WORDS
    for k = 1, lengths[1] do prompt[k] = words[math.random(#words)] end
    local body = cjson.encode { model = opts.model, messages = { { role = "user", content = table.concat(prompt, " ") } },
      max_tokens = lengths[2], temperature = 0, reasoning_effort = "none", stream = true,
      stream_options = { include_usage = true } }
    -- spliced as text: a decoded schema re-encoded would lose its properties' order
    if opts.response_format then body = body:sub(1, -2) .. ',"response_format":' .. opts.response_format .. "}" end
    return "/v1/chat/completions", body, true
  end
  for k = 1, lengths[1] do prompt[k] = math.random(0, PROMPT_IDS - 1) end
  return "/v1/completions", cjson.encode { model = opts.model, prompt = prompt, max_tokens = lengths[2], temperature = 0,
    stream = true, stream_options = { include_usage = true } }, false
end

return bench_requests
