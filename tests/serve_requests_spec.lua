-- gptoss serve's engine loop over a CPU replica of a tiny model: a request is only ever its
-- own failure. Its sampling is checked with the replica's own rules before it is queued
-- (a 400 naming the option), and a row that no token can be drawn for at step time ends
-- its own sequence with an error while the others run on as they would alone.
local gptoss = require "gptoss"
local scheduler = require "gptoss.scheduler"
local H = require "helpers"

local ok_http = pcall(require, "gptoss.serve_http")

describe("the serve engine keeps one request's failure its own", function()
  if not ok_http then return pending("lua-http, lua-cqueues or lua-cjson is missing (make setup)") end
  local cqueues = require "cqueues"
  local serve_engine = require "gptoss.serve_engine"
  local m = gptoss.synthetic(H.TINY, { seed = 5 })

  local function new_engine(log)
    return serve_engine.new { replicas = { m:replica { slots = 3, ctx = 16 } }, scheduler = scheduler.continuous(),
      max_queue = 8, on_error = log }
  end
  -- a sequence of prompt {1, 2, 3} and 4 ids; out gets its ids, finish and error
  local function sequence(sampling, out)
    out.ids = {}
    return { prompt = { 1, 2, 3 }, limit = 4, sampling = sampling,
      on_id = function(_, id) out.ids[#out.ids + 1] = id end,
      on_end = function(seq) out.finish, out.error = seq.finish, seq.error end }
  end
  local function run_to_end(engine)
    engine:stop() -- the loop returns once every sequence has ended
    local cq = cqueues.new()
    cq:wrap(function() engine:run() end)
    assert(cq:loop())
  end

  it("refuses at submit a sampling the replica refuses, with a 400 naming the option, and queues nothing", function()
    local engine = new_engine()
    local many = {}
    for id = 0, 1024 do many[id] = 1 end
    for _, case in ipairs {
      { { temperature = 1e-300 }, "temperature", "'temperature' cannot be sampled by this server: temperature is too "
        .. "small for float arithmetic (0 means greedy) (got 1e-300)" },
      { { temperature = 1, logit_bias = many }, "logit_bias", "'logit_bias' cannot be sampled by this server: "
        .. "logit_bias has more than 1024 entries" },
    } do
      local fine = sequence({ temperature = 0 }, {})
      local ok, err = pcall(engine.submit, engine, { fine, sequence(case[1], {}) })
      assert.is_false(ok)
      assert.are.same({ 400, case[2], case[3] }, { err.status, err.param, err.message })
      assert.are.equal(0, engine:waiting())
      assert.is_nil(fine.index) -- not queued either: the request is refused whole
    end
  end)

  it("ends a sequence whose row cannot be drawn with an error; the others run as they would alone", function()
    local ban_all = {}
    for id = 0, H.TINY.vocab_size - 1 do ban_all[id] = -math.huge end
    local logged = {}
    local engine = new_engine(function(line) logged[#logged + 1] = line end)
    local banned, greedy, sampled = {}, {}, {}
    assert.is_true(engine:submit { sequence({ temperature = 0, logit_bias = ban_all }, banned) })
    assert.is_true(engine:submit { sequence({ temperature = 0 }, greedy) })
    assert.is_true(engine:submit { sequence({ temperature = 1, seed = 3 }, sampled) })
    run_to_end(engine)
    assert.are.same({ "error", {} }, { banned.finish, banned.ids })
    assert.truthy(banned.error:find("^no token could be drawn: sampler: logit_bias bans every token"), banned.error)
    assert.are.same({ "request 1: " .. banned.error }, logged)
    local alone = new_engine()
    local greedy_alone, sampled_alone = {}, {}
    assert.is_true(alone:submit { sequence({ temperature = 0 }, greedy_alone) })
    assert.is_true(alone:submit { sequence({ temperature = 1, seed = 3 }, sampled_alone) })
    run_to_end(alone)
    assert.are.same({ "length", greedy_alone.ids }, { greedy.finish, greedy.ids })
    assert.are.same({ "length", sampled_alone.ids }, { sampled.finish, sampled.ids })
    assert.are.equal(4, #greedy.ids)
  end)
end)
