-- getp's step counters (per_replica's prefill_steps, prefill_step_rows, prefill_rows, decode_steps,
-- decode_step_rows), its on_step callback, and gptoss.step_profile's split of a replica's kernel
-- times between prefill and decode steps, on CPU replicas of the synthetic 7m model. The CPU
-- has no per-kernel timing: a stand-in profile counts each step its replica is given, as one
-- kernel whose seconds are the step's rows.
local gptoss = require "gptoss"
local getp = require "gptoss.getp"
local step_profile = require "gptoss.step_profile"
local H = require "helpers"

local STEPS = 96 -- room for chat's renderings (the system message is 53 ids) and some output
local model = gptoss.synthetic("7m", { seed = 1 })
local tok = gptoss.tokenizer(H.TOKENIZER)
local PROMPTS = { "Hello", "Write a short haiku about the ocean.", "Once upon a time, in a land far away, there lived",
  ("123"):rep(30) }

-- The prompt tokens of the prompts, as getp encodes them.
local function prompt_tokens(chat)
  local n = 0
  for _, text in ipairs(PROMPTS) do
    n = n + #getp.prompt_ids(tok, text, chat, model.config.initial_context_length)
  end
  return n
end

describe("getp's step counters and on_step", function()
  it("counts every step as it is enqueued, prefill when it feeds a prompt token, the shared prefix's too", function()
    for _, case in ipairs {
      { devices = { "cpu" } },
      { devices = { "cpu", "cpu" }, chat = true }, -- the system message prefilled once a replica
      { devices = { "cpu" }, replica = { slots = 2 }, mixed = true }, -- prompts admitted while others decode
    } do
      local seen = {}
      local result = getp.run { model = model, tokenizer = tok, devices = case.devices, replica = case.replica,
        steps = STEPS, chat = case.chat, requests = PROMPTS,
        on_step = function(k, step)
          seen[k] = seen[k] or {}
          table.insert(seen[k], step)
        end }
      local prefill_rows = 0
      for k, pr in ipairs(result.per_replica) do
        local told = { prefill_steps = 0, prefill_step_rows = 0, prefill_rows = 0, decode_steps = 0,
          decode_step_rows = 0 }
        for _, step in ipairs(seen[k]) do
          assert.is_true(step.prefill_rows <= step.rows)
          if step.prefill_rows > 0 then
            told.prefill_steps, told.prefill_step_rows = told.prefill_steps + 1, told.prefill_step_rows + step.rows
            told.prefill_rows = told.prefill_rows + step.prefill_rows
          else
            told.decode_steps, told.decode_step_rows = told.decode_steps + 1, told.decode_step_rows + step.rows
          end
        end
        assert.are.same(told, { prefill_steps = pr.prefill_steps, prefill_step_rows = pr.prefill_step_rows,
          prefill_rows = pr.prefill_rows, decode_steps = pr.decode_steps, decode_step_rows = pr.decode_step_rows })
        assert.are.equal(pr.steps, pr.prefill_steps + pr.decode_steps)
        assert.is_true(pr.decode_steps > 0)
        -- a prefill step carrying decode rows too
        if case.mixed then assert.is_true(pr.prefill_step_rows > pr.prefill_rows) end
        prefill_rows = prefill_rows + pr.prefill_rows
      end
      -- each prompt token fed once, but a shared prefix once a replica
      assert.are.equal(prompt_tokens(case.chat) - result.prefill_saved, prefill_rows)
      assert.are.equal(case.chat or false, result.prefill_saved > 0)
    end
  end)
end)

describe("gptoss.step_profile", function()
  it("gives what a watched replica's kernel times grew by before each step to the kind of the step before",
    function()
      local r1 <close> = model:replica { slots = 3, ctx = STEPS }
      local r2 <close> = model:replica { slots = 3, ctx = STEPS }
      -- the stand-in profile of r2: each step it is given, once on, adds its rows as seconds
      local on, seconds, calls = false, 0, 0
      local source = {
        profile = function(_, switch)
          if switch ~= nil then
            on = switch
            return
          end
          return { { label = "step", seconds = seconds, calls = calls } }
        end,
      }
      local mt = getmetatable(r2)
      local index, step = mt.__index, r2.step
      mt.__index = function(r, key)
        if key == "step" and rawequal(r, r2) then
          return function(self, batch)
            if on then seconds, calls = seconds + #batch.slots, calls + 1 end
            return step(self, batch)
          end
        end
        return index(r, key)
      end
      local ok, err = pcall(function()
        local split = step_profile.new()
        -- three requests a replica (round robin), two slots for them and one holding chat's shared
        -- prefix: replica 2's longest prompt ends first, and its third is admitted while "Hi" decodes
        local g <close> = getp.new { tokenizer = tok, replicas = { r1, r2 }, steps = STEPS, chat = true,
          requests = { "Hello", "Hi", "The sea is", "Once upon a time, in a land far away", "The sky", "Hello world" },
          on_step = split.on_step }
        split:watch(2, source)
        local pr = g:run().per_replica[2]
        assert.is_true(pr.shared_prefix > 0 and pr.decode_steps > 0 and pr.prefill_step_rows > pr.prefill_rows)
        local times = split:finish()
        assert.is_nil(times[1])
        assert.are.same({ prefill = { { label = "step", seconds = pr.prefill_step_rows, calls = pr.prefill_steps } },
          decode = { { label = "step", seconds = pr.decode_step_rows, calls = pr.decode_steps } } }, times[2])
      end)
      mt.__index = index
      assert(ok, err)
    end)
end)
