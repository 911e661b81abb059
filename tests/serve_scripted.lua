-- A server whose model's choices are scripted (tests/serve_spec.lua's tool call round trip),
-- run as its own process: lua5.4 tests/serve_scripted.lua. A random model never writes a
-- harmony tool call, so a CPU replica of the 7m model is wrapped: every step runs on it, but
-- where a slot's ids end with <|start|>assistant and a prefix of a script, the id chosen is
-- the script's next. The script is a call of functions.get_weather before any tool message,
-- a final answer after one; the server, the API mapping and the harmony parsing are the real
-- ones. It listens on a free port and logs it as gptoss serve does.
local gptoss = require "gptoss"
local harmony = require "gptoss.harmony"
local serve = require "gptoss.serve"

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

local Scripted = {}
Scripted.__index = function(self, k) return Scripted[k] or self.inner[k] end

local function wrap(inner) return setmetatable({ inner = inner, held = {} }, Scripted) end

function Scripted:sampling(...) return self.inner:sampling(...) end
function Scripted:close() return self.inner:close() end

function Scripted:fork(from, to, length)
  self.inner:fork(from, to, length)
  self.held[to] = table.move(self.held[from] or {}, 1, length, 1, {})
end

-- A handle over the inner step: its tokens with the scripted ids in.
local Handle = {}
Handle.__index = Handle
function Handle:ready() return self.inner:ready() end
function Handle:logprobs() return self.inner:logprobs() end
function Handle:tokens()
  local ids = self.inner:tokens()
  for row, id in pairs(self.forced) do ids[row] = id end
  return ids
end

function Scripted:step(batch)
  local tokens = {}
  for i, t in ipairs(batch.tokens) do
    tokens[i] = t < 0 and batch.from:tokens()[-t] or t -- fed ids, read on the host
  end
  local forced = {}
  for i, slot in ipairs(batch.slots) do
    local held = self.held[slot] or {}
    for p = #held, batch.positions[i] + 1, -1 do held[p] = nil end
    held[batch.positions[i] + 1] = tokens[i]
    self.held[slot] = held
    forced[i] = scripted(held)
  end
  local inner = self.inner:step { slots = batch.slots, positions = batch.positions, tokens = tokens }
  return setmetatable({ inner = inner, forced = forced, rows = inner.rows }, Handle)
end

local model = gptoss.synthetic("7m")
local r = model:replica { device = "cpu", slots = 3, ctx = 1024 }
local server = serve.new { model = model, model_name = "scripted", tokenizer = tok, replicas = { wrap(r) },
  port = 0, signals = true }
server:start()
server:run()
