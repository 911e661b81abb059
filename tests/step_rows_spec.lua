-- A step's rows one by one: which rows draw a token (draw), what a row that cannot draw does
-- to the others (nothing: h:tokens{partial = true} gives the rest), a row fed a token that
-- could not be drawn, logits kept only where asked, and r:check_sampling. On the CPU, and on
-- GPU 0 when there is one.
local gptoss = require "gptoss"
local H = require "helpers"

local expect_error = H.expect_error
local m = gptoss.synthetic(H.TINY, { seed = 5 })
local ENGINES = { { name = "the CPU", opts = { slots = 3, ctx = 16 } } }
if #gptoss.devices() > 0 then ENGINES[2] = { name = "GPU 0", opts = { device = 0, slots = 3, ctx = 16 } } end

-- a logit bias that bans every token of the tiny vocabulary
local BAN_ALL = {}
for id = 0, H.TINY.vocab_size - 1 do BAN_ALL[id] = -math.huge end
local BANS = "logit_bias bans every token that could be chosen"

-- the rows a table of failures names, ascending
local function rows_of(failed)
  local rows = {}
  for row in pairs(failed) do rows[#rows + 1] = row end
  table.sort(rows)
  return rows
end

local function row_step(r, positions, tokens, extra)
  return r:step(H.with({ slots = { 1, 2, 3 }, positions = positions, tokens = tokens }, extra or {}))
end

for _, engine in ipairs(ENGINES) do
  describe("a step's rows on " .. engine.name, function()
    local r
    before_each(function() r = m:replica(engine.opts) end)
    after_each(function() r:close() end)

    it("fails only the row that cannot draw: h:tokens{partial = true} gives the others and why", function()
      r:sampling(2, { temperature = 0, logit_bias = BAN_ALL, logprobs = 1 })
      r:sampling(3, { temperature = 0, logprobs = 1 })
      local h = row_step(r, { 0, 0, 0 }, { 1, 1, 1 })
      expect_error(function() h:tokens() end, "step:tokens: row 2: ", BANS)
      local ids, failed = h:tokens { partial = true }
      assert.are.equal("integer", math.type(ids[1]))
      assert.is_false(ids[2])
      assert.are.equal("integer", math.type(ids[3]))
      assert.truthy(failed[2]:find(BANS, 1, true), failed[2])
      assert.are.same({ 2 }, rows_of(failed))
      local lps = h:logprobs { partial = true }
      assert.is_false(lps[1]) -- slot 1 asked for none
      assert.is_false(lps[2])
      assert.are.equal(ids[3], lps[3].id)
      expect_error(function() h:tokens { partial = 1, other = 2 } end, "step:tokens: unknown option 'other'")
      -- a step fed by it runs: the fed row fails, the others draw
      r:sampling(2)
      local fed = row_step(r, { 1, 1, 1 }, h)
      local fed_ids, fed_failed = fed:tokens { partial = true }
      assert.is_false(fed_ids[2])
      assert.are.same({ "integer", "integer" }, { math.type(fed_ids[1]), math.type(fed_ids[3]) })
      assert.are.same({ 2 }, rows_of(fed_failed))
      if engine.opts.device == nil then -- the CPU feeds it no token (a GPU's row computes NaN logits and fails so)
        assert.are.equal("the token fed to it could not be drawn (row 2 of the step before: sampler: " .. BANS
          .. " (every logit is -inf after the bias))", fed_failed[2])
      end
      -- and the replica goes on, slot 2 started again (its position 1 holds a row fed no token:
      -- NaN keys on a GPU)
      local after = row_step(r, { 2, 0, 2 }, { 4, 5, 6 })
      assert.are.equal(3, #after:tokens())
    end)

    it("draws only the rows draw lists: the others' tokens are false, and no step is fed them", function()
      r:sampling(2, { temperature = 0, logit_bias = BAN_ALL })
      local h = row_step(r, { 0, 0, 0 }, { 1, 1, 1 }, { draw = { 3, 1 } })
      local ids = h:tokens() -- slot 2 could draw nothing, but nobody asked it to
      assert.is_false(ids[2])
      assert.are.equal(ids[1], row_step(m:replica(engine.opts), { 0, 0, 0 }, { 1, 1, 1 }):tokens()[1])
      expect_error(function() row_step(r, { 1, 1, 1 }, h) end,
        "step: tokens[2] is fed by row 2 of the step before, which was not asked to draw a token (draw)")
      r:sampling(2)
      local nothing = row_step(r, { 1, 1, 1 }, { -1, 7, -3 }, { from = h, draw = {} })
      assert.are.same({ false, false, false }, nothing:tokens())
      expect_error(function() row_step(r, { 2, 2, 2 }, { 1, 1, 1 }, { draw = { 4 } }) end,
        "step: draw[1] = 4 is out of range 1..3 (the step's rows)")
      expect_error(function() row_step(r, { 2, 2, 2 }, { 1, 1, 1 }, { draw = { 1, 1 } }) end,
        "step: draw[2] = 1 repeats draw[1]")
      expect_error(function() row_step(r, { 2, 2, 2 }, { 1, 1, 1 }, { draw = 1 }) end,
        "step: draw must be a table of row numbers (got number)")
      assert.are.equal(2, r:length(1)) -- the refused steps changed nothing
    end)

    it("keeps logits only where asked: h:logits() reads the latest step's, while no later step has run", function()
      local h = row_step(r, { 0, 0, 0 }, { 1, 2, 3 })
      local kept = row_step(r, { 1, 1, 1 }, { 4, 5, 6 }, { logits = { 2 } })
      expect_error(function() h:logits() end, "step:logits: a later step on this replica has replaced these logits")
      assert.are.same({ 1, H.TINY.vocab_size }, kept:logits().shape)
      local latest = row_step(r, { 2, 2, 2 }, { 7, 8, 9 })
      assert.are.same({ 3, H.TINY.vocab_size }, latest:logits().shape)
      assert.are.equal(latest:logits()[2]:argmax() - 1, latest:tokens()[2])
      local some = row_step(r, { 3, 3, 3 }, { 7, 8, 9 }, { draw = { 1 }, logits = { 3 } })
      assert.are.same({ 1, H.TINY.vocab_size }, some:logits().shape)
      local drew = row_step(r, { 4, 4, 4 }, { 7, 8, 9 }, { draw = { 1 } })
      if engine.opts.device == nil then -- the CPU computes no logits a row neither draws nor keeps
        expect_error(function() drew:logits() end, "step:logits: this step computed the logits of the rows it drew")
      end
    end)

    it("checks a sampling table as r:sampling would, without setting a slot (r:check_sampling)", function()
      assert.is_true(r:check_sampling { temperature = 0.5, top_p = 0.9, logit_bias = { [3] = 1 }, logprobs = 2 })
      local many = {}
      for id = 1, 1025 do many[id] = 1 end
      expect_error(function() r:check_sampling { logit_bias = many } end,
        "replica:check_sampling: logit_bias has more than 1024 entries")
      expect_error(function() r:check_sampling { temperature = 1e-300 } end,
        "replica:check_sampling: temperature is too small for float arithmetic")
      expect_error(function() r:check_sampling { top_p = 2 } end, "replica:check_sampling: top_p must be within [0, 1]")
      expect_error(function() r:check_sampling { logit_bias = { [97] = 1 } } end,
        "replica:check_sampling: logit_bias: token 97 is out of range 0..96")
      expect_error(function() r:check_sampling { mode = "course" } end, "per-slot sampling has the default mode only")
      expect_error(function() r:check_sampling { temprature = 1 } end, "replica:check_sampling: unknown option")
      -- no slot changed: slot 1 is still greedy
      local h = row_step(r, { 0, 0, 0 }, { 1, 1, 1 })
      assert.are.equal(h:logits()[1]:argmax() - 1, h:tokens()[1])
    end)
  end)
end
