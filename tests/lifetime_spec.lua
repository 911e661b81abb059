-- Objects' lives against a hostile script (issue 45): a metamethod, a callback or a
-- finaliser that closes or finalises an object in the middle of a call on it, objects used
-- after their finaliser ran (by hand, or resurrected by another object's finaliser), a
-- replica whose model object is finalised, and tensor.from of a table that contains itself.
-- Each must end in a clear error or a right answer, never in freed memory: under
-- `make test-sanitized` a use after free here is a report.
local gptoss = require "gptoss"
local H = require "helpers"
local expect_error = H.expect_error

local function model(seed) return gptoss.synthetic(H.TINY, { seed = seed or 5 }) end
local function finalise(x) getmetatable(x).__gc(x) end
local ONE = { slots = { 1 }, positions = { 0 }, tokens = { 1 } }

-- A table reading as t does whose __index first runs act(key).
local function acting(t, act)
  return setmetatable({}, { __index = function(_, k) act(k); return t[k] end })
end

describe("an object closed or finalised in the middle of a call on it", function()
  local m = model()

  it("stops r:step whose batch's metamethods close the replica", function()
    local r = m:replica { slots = 1, ctx = 8 }
    expect_error(function() r:step(acting(ONE, function() r:close() end)) end, "replica: used after close")
    r = m:replica { slots = 1, ctx = 8 }
    local slots = setmetatable({}, { __len = function() r:close(); return 1 end, __index = function() return 1 end })
    expect_error(function() r:step { slots = slots, positions = { 0 }, tokens = { 1 } } end, "replica: used after close")
    r = m:replica { slots = 1, ctx = 8 }
    local function scoped() local c <close> = r end -- a <close> variable closes it too
    expect_error(function() r:step(acting(ONE, scoped)) end, "replica: used after close")
    assert.is_true(r.closed)
    -- only the last read closes it: every argument read, the replica checked again
    r = m:replica { slots = 1, ctx = 8 }
    local batch = acting({ slots = { 1 }, positions = { 0 }, tokens = { 1 }, logits = true },
      function(k) if k == "logits" then r:close() end end)
    expect_error(function() r:step(batch) end, "replica: used after close")
  end)

  it("stops r:step whose feeding step is finalised or its replica closed while the batch is read", function()
    local r = m:replica { slots = 1, ctx = 8 }
    local h = r:step(ONE)
    local batch = acting({ slots = { 1 }, positions = { 1 }, tokens = h }, function(k)
      if k == "logits" then finalise(h) end
    end)
    expect_error(function() r:step(batch) end, "step: tokens: step: used after it was garbage-collected")
    h = r:step { slots = { 1 }, positions = { 1 }, tokens = { 2 } }
    batch = acting({ slots = { 1 }, positions = { 2 }, tokens = { -1 }, from = h }, function(k)
      if k == "logits" then finalise(h) end
    end)
    expect_error(function() r:step(batch) end, "step: from: step: used after it was garbage-collected")
    local other = m:replica { slots = 1, ctx = 8 }
    local theirs = other:step(ONE)
    other:close()
    expect_error(function() r:step { slots = { 1 }, positions = { 2 }, tokens = theirs } end,
      "step: tokens is a step of another replica")
    assert.are.same({ 1 }, { #theirs:tokens() }) -- delivered when its replica closed
  end)

  it("stops r:sampling whose options' metamethods close the replica", function()
    local r = m:replica { slots = 1, ctx = 8 }
    expect_error(function() r:sampling(1, acting({ temperature = 0.5 }, function() r:close() end)) end,
      "replica: used after close")
    r = m:replica { slots = 1, ctx = 8 }
    local opts = acting({ logit_bias = { [3] = 1 } }, function(k) if k == "logit_bias" then r:close() end end)
    expect_error(function() r:sampling(1, opts) end, "replica: used after close")
  end)

  it("gives the error a __tostring in its message closes the replica for", function()
    local r = m:replica { slots = 1, ctx = 8 }
    local bad = setmetatable({}, { __tostring = function() r:close(); return "bad" end })
    expect_error(function() r:step { slots = { bad }, positions = { 0 }, tokens = { 1 } } end,
      "step: slots[1] must be an integer (got bad)")
    assert.is_true(r.closed)
  end)

  it("keeps a replica's model whose object on_progress finalises", function()
    local doomed = model(9)
    local r = doomed:replica { slots = 1, ctx = 8, on_progress = function() finalise(doomed) end }
    local want = model(9):replica { slots = 1, ctx = 8 }:step(ONE):logits()
    assert.are.equal(0, r:step(ONE):logits():max_abs_diff(want))
    expect_error(function() return doomed.config end, "model: used after it was garbage-collected")
  end)

  it("stops model calls whose options' metamethods finalise the model", function()
    local doomed = model()
    expect_error(function() doomed:replica(acting({ slots = 1 }, function() finalise(doomed) end)) end,
      "model: used after it was garbage-collected")
    doomed = model()
    expect_error(function() doomed:save(H.tmp(), acting({}, function() finalise(doomed) end)) end,
      "model: used after it was garbage-collected")
    H.cleanup()
  end)

  it("stops sampler and tokenizer calls whose arguments' metamethods finalise them", function()
    local s = gptoss.sampler { seed = 1 }
    expect_error(function() s:sample({ 1, 2 }, acting({}, function() finalise(s) end)) end,
      "sampler: used after it was garbage-collected")
    local tok = gptoss.tokenizer(H.need_tokenizer(pending))
    local ids = setmetatable({}, { __len = function() return 2 end, __index = function() finalise(tok); return 1 end })
    expect_error(function() tok:decode(ids) end, "tokenizer: used after it was garbage-collected")
    tok = gptoss.tokenizer(H.TOKENIZER)
    local d = tok:decoder()
    ids = setmetatable({}, { __len = function() return 2 end, __index = function() finalise(tok); return 1 end })
    expect_error(function() d:add(ids) end, "decoder:add: tokenizer: used after it was garbage-collected")
  end)

  -- A finaliser runs wherever the collector steps, which is any allocation inside a call.
  -- With a pause of 0 and no bound on a step's work, every allocation that checks the
  -- collector runs a whole cycle, finalisers included; garbage whose finaliser makes new
  -- garbage n times before it ends an object ends it at the call's n-th such allocation. For
  -- n = 0, 1, ... until the object outlives the call, the call must answer or say "used after".
  it("survives finalisers that end its objects at each allocation of a call", function()
    local tokenizers = {} -- loaded before every allocation runs a cycle: a load allocates much
    for i = 1, 16 do tokenizers[i] = gptoss.tokenizer(H.need_tokenizer(pending)) end
    local function at_collection(n, act)
      setmetatable({}, { __gc = function() if n == 0 then act() else at_collection(n - 1, act) end end })
    end
    local calls = {
      function(n, r, h) -- the replica closed and the feeding step finalised
        at_collection(n, function() r:close(); finalise(h) end)
        local next = r:step { slots = { 1, 2 }, positions = { 1, 0 }, tokens = { -1, 5 }, from = h, logits = true }
        return next:logits(), next:tokens(), r:trace(1, 3, 2), r.memory
      end,
      function(n, r, h) -- a step finalised
        r:sampling(1, { logprobs = 2 })
        local next = r:step { slots = { 1 }, positions = { 1 }, tokens = h }
        at_collection(n, function() finalise(next) end)
        return next:logits(), next:logprobs(), next:tokens(), tostring(next)
      end,
      function(n) -- a model object finalised: its replica keeps computing
        local doomed = model(3)
        at_collection(n, function() finalise(doomed) end)
        return doomed:tensor("w_mlp1", 1, 2), doomed.tensors, doomed:replica { slots = 1, ctx = 4 }:step(ONE):tokens()
      end,
      function(n) -- a tensor finalised
        local t = gptoss.tensor.from { { 1, 2 }, { 3, 4 } }
        at_collection(n, function() finalise(t) end)
        return t:totable(), t[2], t.shape, gptoss.sampler():sample(t[1])
      end,
      function(n) -- a sampler and a tokenizer finalised
        local s, own = gptoss.sampler { seed = 2, logprobs = 2 }, table.remove(tokenizers) or gptoss.tokenizer(H.TOKENIZER)
        at_collection(n, function() finalise(s); finalise(own) end)
        return s:sample({ 1, 2, 3 }, { logit_bias = { [0] = 1 } }), own:decode({ 1, 2, 3 }), own:encode("a b"),
          own:decoder():add({ 4, 5 })
      end,
    }
    local mode = collectgarbage("incremental", 1, 1000, 30) -- a whole cycle at every allocation
    finally(function()
      collectgarbage("incremental", 200, 100, 13) -- Lua 5.4's defaults, then the mode it was in
      collectgarbage(mode)
    end)
    collectgarbage() -- from now on: the debt a generational collector left would delay the first
    local ended = 0
    for _, call in ipairs(calls) do
      local n, good, err = -1, false, nil
      while not good and n < 500 do -- until the object outlives the call
        n = n + 1
        local r = m:replica { slots = 2, ctx = 8 }
        good, err = pcall(call, n, r, r:step(ONE))
        if not good then
          assert(tostring(err):find("used after", 1, true), err)
          ended = ended + 1
        end
      end
      assert.is_true(good, err)
    end
    assert.is_true(ended >= #calls)
  end)
end)

describe("an object after its finaliser ran", function()
  it("raises for every use of a model, whose replicas keep computing", function()
    local doomed = model(8)
    local r = doomed:replica { slots = 1, ctx = 8 }
    finalise(doomed)
    finalise(doomed) -- twice is harmless
    for _, use in ipairs({
      function() return doomed.config end, function() return doomed:tensor("embedding") end,
      function() return tostring(doomed) end, function() return doomed:replica() end,
      function() return doomed:replica_bytes() end, function() return r.model.config end,
    }) do
      expect_error(use, "model: used after it was garbage-collected")
    end
    local want = model(8):replica { slots = 1, ctx = 8 }
    assert.are.equal(0, r:step(ONE):logits():max_abs_diff(want:step(ONE):logits()))
    assert.are.equal(0, r:trace(1, 2, 1).logits:max_abs_diff(want:trace(1, 2, 1).logits))
    r:sampling(1, { temperature = 0.5, seed = 1, logit_bias = { [96] = -1 } })
    r:close()
  end)

  it("raises for every use of a host tensor, whose views keep its storage", function()
    local t = gptoss.tensor.from { { 1, 2 }, { 3, 4 } }
    local row = t[2]
    finalise(t)
    for _, use in ipairs({
      function() return t[1] end, function() return #t end, function() return t.shape end,
      function() t[1] = 5 end, function() return t:totable() end, function() return tostring(t) end,
      function() return t:argmax() end, function() return t:save(H.tmp()) end,
    }) do
      expect_error(use, "tensor: used after it was garbage-collected")
    end
    expect_error(function() return row:max_abs_diff(t) end, "max_abs_diff: tensor: used after it was garbage-collected")
    expect_error(function() return gptoss.sampler():sample(t) end,
      "sampler:sample: tensor: used after it was garbage-collected")
    assert.are.same({ 3, 4 }, row:totable())
    H.cleanup()
  end)

  it("raises for a replica and its steps, which keep their tokens", function()
    local r = model():replica { slots = 1, ctx = 8 }
    local h = r:step(ONE)
    finalise(r)
    assert.is_true(r.closed)
    assert.are.equal(1, #h:tokens())
    expect_error(function() r:step(ONE) end, "replica: used after it was garbage-collected")
    expect_error(function() return r.slots end, "replica: used after it was garbage-collected")
    expect_error(function() return tostring(r) end, "replica: used after it was garbage-collected")
    r:close() -- closing after the finaliser is harmless
    finalise(h)
    expect_error(function() h:tokens() end, "step: used after it was garbage-collected")
    expect_error(function() return h.rows end, "step: used after it was garbage-collected")
  end)

  it("raises for objects another object's finaliser resurrects", function()
    local back
    do
      -- marked for finalisation first, so finalised after everything it holds
      local keeper = setmetatable({}, { __gc = function(k) back = k end })
      keeper.model = model(4)
      keeper.replica = keeper.model:replica { slots = 1, ctx = 8 }
      keeper.step = keeper.replica:step(ONE)
      keeper.tensor = gptoss.tensor.from { 1, 2 }
      keeper.sampler = gptoss.sampler { seed = 3 }
      keeper.tokenizer = gptoss.tokenizer(H.need_tokenizer(pending))
      keeper.decoder = keeper.tokenizer:decoder()
    end
    collectgarbage()
    collectgarbage()
    assert.is_not_nil(back)
    local gone = "used after it was garbage-collected"
    expect_error(function() return back.model.config end, "model: " .. gone)
    expect_error(function() back.replica:step(ONE) end, "replica: " .. gone)
    expect_error(function() back.step:tokens() end, "step: " .. gone)
    expect_error(function() return back.tensor[1] end, "tensor: " .. gone)
    expect_error(function() back.sampler:sample({ 1 }) end, "sampler: " .. gone)
    expect_error(function() back.tokenizer:encode("a") end, "tokenizer: " .. gone)
    expect_error(function() back.decoder:add(1) end, "decoder:add: tokenizer: " .. gone)
    assert.are.equal("", back.decoder:flush())
  end)
end)

describe("tensor.from", function()
  local from = gptoss.tensor.from

  it("refuses a table that contains itself", function()
    local t = {}
    t[1] = t
    expect_error(function() from(t) end, "tensor: the nested table contains itself")
    local u = { { 1 }, { 2 } }
    u[2][1] = u
    expect_error(function() from(u) end, "tensor: the nested table contains itself")
    local v = { { 1 }, { 2 } }
    v[2] = v
    expect_error(function() from(v) end, "tensor: the nested table contains itself")
  end)

  it("refuses tables nested deeper than a tensor's dimensions, endless ones too", function()
    local deep = 1
    for _ = 1, 9 do deep = { deep } end
    expect_error(function() from(deep) end, "tensor: nested deeper than 8 tables")
    assert.are.equal(8, from(deep[1]).ndim)
    local endless = setmetatable({}, { __len = function() return 1 end,
      __index = function(t) return setmetatable({}, getmetatable(t)) end })
    expect_error(function() from(endless) end, "tensor: nested deeper than 8 tables")
  end)
end)
