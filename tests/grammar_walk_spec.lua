-- Random walks through grammars on the real o200k vocabulary, each token drawn uniformly
-- among the allowed ones (the adversary a random-weight model is), every output checked by
-- an independent validator: hundreds of generated JSON schemas by ajv through node (one batch;
-- pending where node or ajv is missing), generated regexes and EBNF grammars by PCRE2. On the
-- way, every step checks the mask against the matcher's direct answer on random tokens.

local gptoss = require "gptoss"
local core = require "gptoss.core"
local H = require "helpers"
local G = require "grammar_gen"

local SCHEMAS, REGEXES = 300, 200
local MAX_TOKENS, PROBES = 600, 3

local function tokenizer()
  return gptoss.tokenizer(H.need_tokenizer(pending))
end

describe("random walks through generated grammars", function()
  it("write JSON that ajv validates against its schema", function()
    local why = G.why_no_ajv()
    if why then pending(why) end
    local tok = tokenizer()
    local END = tok.special["end"]
    local cases, finished, walks = {}, 0, 0
    for seed = 1, SCHEMAS do
      local rng = G.rng(seed)
      local schema = seed % 10 == 0 and G.recursive_schema(rng) or G.schema(rng, 0)
      local text = G.json(schema)
      local g = gptoss.grammar.json_schema(text, { whitespace = rng(3) - 1 })
      local outputs = {}
      for _ = 1, 2 do
        local out, done = G.walk(g:matcher(tok, { end_ids = { END } }), tok, rng, MAX_TOKENS, PROBES)
        walks = walks + 1
        if done then
          finished = finished + 1
          outputs[#outputs + 1] = out
        end
      end
      cases[#cases + 1] = { schema = require("dkjson").decode(text), outputs = outputs, text = text }
    end
    local verdicts = G.ajv(cases)
    for i, c in ipairs(cases) do
      for j, verdict in ipairs(verdicts[i]) do
        assert(verdict == true, ("schema %s\noutput %q\najv: %s"):format(c.text, c.outputs[j], tostring(verdict)))
      end
    end
    assert.is_true(finished >= 0.95 * walks, ("%d of %d walks finished"):format(finished, walks))
  end)

  it("write text that PCRE2 matches in full", function()
    local tok = tokenizer()
    local END = tok.special["end"]
    local finished = 0
    for seed = 1, REGEXES do
      local rng = G.rng(1000 + seed)
      local pattern = G.regex(rng)
      local g = gptoss.grammar.regex(pattern)
      for _ = 1, 2 do
        local out, done = G.walk(g:matcher(tok, { end_ids = { END } }), tok, rng, MAX_TOKENS, PROBES)
        assert.is_true(done, pattern)
        assert(core.pcre2_full_match(pattern, out), ("pattern %s, output %q"):format(pattern, out))
        finished = finished + 1
      end
    end
    for _, pattern in ipairs(G.PATTERNS) do -- the schemas' patterns, as grammars of their own
      local out = G.walk(gptoss.grammar.regex(pattern):matcher(tok, { end_ids = { END } }), tok, G.rng(7), MAX_TOKENS, PROBES)
      assert(core.pcre2_full_match(pattern, out), ("pattern %s, output %q"):format(pattern, out))
    end
    assert.are.equal(2 * REGEXES, finished)
  end)

  it("write what EBNF grammars describe", function()
    local tok = tokenizer()
    local END = tok.special["end"]
    -- each grammar with a PCRE2 regex of the same language
    local cases = {
      { 'root ::= item ("," item){0,3}\nitem ::= [a-c]{1,2} | "[" [0-9] "]"\n',
        "(?:[a-c]{1,2}|\\[[0-9]\\])(?:,(?:[a-c]{1,2}|\\[[0-9]\\])){0,3}" },
      { 'root ::= "<" tag ">" text "</" tag ">"\ntag ::= /[a-z]{1,3}/\ntext ::= [^<>]{0,4}\n',
        "<[a-z]{1,3}>[^<>]{0,4}</[a-z]{1,3}>" },
      { 'root ::= %json {"type": "integer", "minimum": -5, "maximum": 5} (" " | "\\n") (\'yes\' | \'no\')?\n',
        "-?[0-5]( |\\n)(?:yes|no)?" },
      { 'root ::= pair{2}\npair ::= key "=" value ";"\nkey ::= [A-Z]\nvalue ::= "é"+ | .\n', "(?:[A-Z]=(?:é+|[^\\n]|\\n);){2}" },
    }
    for i, c in ipairs(cases) do
      local g = gptoss.grammar.ebnf(c[1])
      local rng = G.rng(i)
      for _ = 1, 20 do
        local out, done = G.walk(g:matcher(tok, { end_ids = { END } }), tok, rng, MAX_TOKENS, PROBES)
        assert.is_true(done, c[1])
        assert(core.pcre2_full_match(c[2], out), ("grammar %s\noutput %q"):format(c[1], out))
      end
    end
  end)
end)
