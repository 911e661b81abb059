-- The engine harness of the structured-output specs (serve_structured_spec,
-- serve_freeturn_spec): chat bodies run at once, in this process, through gptoss serve's
-- sequences (gptoss.serve_api) and engine loop on a fresh random-weight 7m replica on the
-- CPU. Needs lua-http, lua-cqueues and lua-cjson (the caller checks).
local cjson = require "cjson"
local cqueues = require "cqueues"
local dkjson = require "dkjson"
local gptoss = require "gptoss"
local H = require "helpers"
local scheduler = require "gptoss.scheduler"
local serve_api = require "gptoss.serve_api"
local serve_choice = require "gptoss.serve_choice"
local serve_engine = require "gptoss.serve_engine"
local serve_openai = require "gptoss.serve_openai"

local model = gptoss.synthetic("7m")
local QUIET = setmetatable({}, { __index = function() return function() end end }) -- metrics not kept

-- A replica r whose steps are shown to on_step(batch, unread, running) before they run
-- (unread: whether the step before was still unread when it was enqueued; running: the
-- engine's running sequences).
local function watched(r, on_step, running)
  local last, handle_of = nil, {}
  return setmetatable({ step = function(_, batch)
    if on_step then on_step(batch, last ~= nil and not rawget(last, "read"), running()) end
    batch.from = batch.from and handle_of[batch.from]
    local h = r:step(batch)
    last = setmetatable({ tokens = function(self, ...)
      self.read = true
      return h:tokens(...)
    end }, { __index = function(_, k) return function(_, ...) return h[k](h, ...) end end })
    handle_of[last] = h
    return last
  end }, { __index = function(_, k)
    local v = r[k]
    if type(v) ~= "function" then return v end
    return function(_, ...) return v(r, ...) end
  end })
end

--- Runs the chat bodies (model and messages filled in) on a fresh replica. opts: tok (the
-- tokenizer), on_step (above) or nil, depth (the engine's steps in flight) or nil, plans
-- ({[k] = a plan replacing job k's}) or nil. Job k is seeded 100 + k. Returns each job's
-- {choice} (closed) and each job's sequences.
return function(bodies, opts)
  local tok = opts.tok
  local r = model:replica { device = "cpu", slots = 4, ctx = 600 }
  local engine
  local replica = watched(r, opts.on_step, function() return engine.runners[1].state.running end)
  engine = serve_engine.new { replicas = { replica }, scheduler = scheduler.continuous(), max_queue = 8,
    depth = opts.depth, on_error = function(message) error("the engine failed: " .. message) end }
  local server, out, seqs = { metrics = QUIET, engine = engine }, {}, {}
  for k, body in ipairs(bodies) do
    local job = serve_openai.chat(cjson.decode(dkjson.encode(H.with({ model = "7m",
      messages = { { role = "user", content = "Hi" } } }, body))), tok, 600)
    job.seed, job.ended, out[k] = 100 + k, 0, { serve_choice.new(job, tok) }
    job.plan = opts.plans and opts.plans[k] or job.plan
    seqs[k] = serve_api.sequences(server, job, out[k], nil, { signal = function() end })
    assert(engine:submit(seqs[k]), "the engine refused a job")
  end
  engine:stop()
  local cq = cqueues.new()
  cq:wrap(function() engine:run() end)
  assert(cq:loop())
  for _, choices in ipairs(out) do choices[1]:close() end
  return out, seqs
end
