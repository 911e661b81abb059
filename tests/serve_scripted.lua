-- A server over a fake replica (tests/fake_replica.lua), run as its own process:
--   lua5.4 tests/serve_scripted.lua [--slots 3] [--ctx 1024] [--delay SECONDS] [--launch SECONDS]
--                                   [--unscripted]
-- It listens on a free port and logs it as gptoss serve does. The ids are plain text
-- (never a stop id) except where the script applies: a random model never writes a harmony
-- tool call, so where a slot's ids end with <|start|>assistant and a prefix of a script,
-- the id chosen is the script's next (tests/serve_spec.lua's tool call round trip). The
-- script is a call of functions.get_weather before any tool message, a final answer after
-- one; the server, the API mapping and the harmony parsing are the real ones.
-- --unscripted leaves the script out (it scans a slot's ids every row); --delay and
-- --launch make a step take that long on the simulated device and on the host to enqueue
-- (tests/fake_replica.lua): with many slots the server's own cost per streamed token is
-- then what gptoss bench_serve measures (docs/serve.md#measuring).
local argparse = require "argparse"
local fake_replica = require "fake_replica"
local gptoss = require "gptoss"
local harmony = require "gptoss.harmony"
local serve = require "gptoss.serve"

local parser = argparse("serve_scripted", "A server over a fake replica.")
parser:option("--slots", "Slots of the replica.", "3"):convert(math.tointeger)
parser:option("--ctx", "Positions a slot holds.", "1024"):convert(math.tointeger)
parser:option("--delay", "Seconds a step takes on the simulated device.", "0"):convert(tonumber)
parser:option("--launch", "Seconds enqueueing a step takes on the host.", "0"):convert(tonumber)
parser:flag("--unscripted", "Plain text ids only.")
local args = parser:parse()

local tok = gptoss.tokenizer()
local S = harmony.special
local function encode(text) return tok:encode(text, { mode = "o200k" }) end -- as harmony.render_ids does
local function script(pieces)
  local ids = {}
  for _, p in ipairs(pieces) do
    local part = type(p) == "number" and { p } or encode(p)
    table.move(part, 1, #part, #ids + 1, ids)
  end
  return ids
end
local CALL = script { S.channel, "commentary to=functions.get_weather ", S.constrain, "json", S.message,
  '{"city": "Paris"}', S.call }
local ANSWER = script { S.channel, "analysis", S.message, "The tool says sunny.", S["end"], S.start, "assistant",
  S.channel, "final", S.message, "It is sunny in Paris.", S["return"] }
local ASSISTANT, TOOL = encode("assistant")[1], encode("functions.get_weather")[1]
local TEXT = fake_replica.plain_text(tok)

-- Where the reply being generated begins in a slot's ids: after the first <|start|>assistant
-- that follows the last tool message (<|start|>functions...), or nil; and its script.
local function reply_start(ids)
  local after, s = 1, CALL
  for i = 1, #ids - 1 do
    if ids[i] == S.start and ids[i + 1] == TOOL then after, s = i, ANSWER end
  end
  for i = after, #ids - 1 do
    if ids[i] == S.start and ids[i + 1] == ASSISTANT then return i + 2, s end
  end
end

-- The scripted id after a slot's ids, or nil when the script has nothing to say there.
local function scripted(ids)
  local from, s = reply_start(ids)
  if not from then return nil end
  for k = from, #ids do
    if ids[k] ~= s[k - from + 1] then return nil end
  end
  return s[#ids - from + 2]
end

local replica = fake_replica.new { slots = args.slots, ctx = args.ctx, text = TEXT, delay = args.delay,
  launch = args.launch, choose = not args.unscripted and scripted or nil }
local server = serve.new { model = gptoss.synthetic("7m"), model_name = "scripted", tokenizer = tok,
  replicas = { replica }, port = 0, max_queue = math.max(256, args.slots), signals = true }
server:start()
server:run()
