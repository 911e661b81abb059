-- gptoss.sender: a thread writing bytes to sockets for the Lua thread. Each socket's bytes
-- arrive whole and in order; a client that closed, reads too slowly or reads nothing fails
-- its socket alone, saying why; a handle detached no longer names a socket, whose own
-- descriptor stays open; bad arguments and a closed sender are errors naming them.
local gptoss = require "gptoss"
local ok_cqueues, socket = pcall(require, "cqueues.socket")

describe("gptoss.sender", function()
  if not ok_cqueues then
    pending("lua-cqueues is missing (make setup)")
    return
  end
  local cqueues = require "cqueues"

  -- Looks at f() until done(its values) says so, at most 5 seconds; returns its values.
  local function eventually(f, done)
    local deadline = cqueues.monotime() + 5
    local v, why = f()
    while not done(v, why) and cqueues.monotime() < deadline do
      cqueues.sleep(0.002)
      v, why = f()
    end
    return v, why
  end
  local function drained(v) return v == 0 or v == nil end
  local function failed(v) return v == nil end

  it("sends each socket's bytes whole and in order, pieces of one send together", function()
    local s <close> = gptoss.sender()
    local pairs_, handles, want = {}, {}, {}
    for k = 1, 3 do
      local a, b = socket.pair()
      pairs_[k], handles[k], want[k] = { a, b }, s:attach(a:pollfd()), {}
    end
    for i = 1, 200 do
      for k = 1, 3 do
        local text = ("%d:%d;"):format(k, i)
        assert.is_true(s:send(handles[k], text:sub(1, 2), text:sub(3)))
        want[k][#want[k] + 1] = text
      end
      if i % 7 == 0 then s:flush() end
    end
    s:flush()
    for k = 1, 3 do
      assert.are.equal(0, (eventually(function() return s:pending(handles[k]) end, drained)))
      local expected = table.concat(want[k])
      assert.are.equal(expected, pairs_[k][2]:xread(#expected, "b", 5))
    end
    local total = 0
    for k = 1, 3 do total = total + #table.concat(want[k]) end
    assert.are.equal(total, s.bytes)
  end)

  it("fails a socket whose client closed, reads too slowly or reads nothing, the others sending on", function()
    local s <close> = gptoss.sender { timeout = 0.3, max_queued = 1 << 20 }
    local a1, b1 = socket.pair()
    local a2, b2 = socket.pair()
    local a3, b3 = socket.pair()
    local closed, slow, fine = s:attach(a1:pollfd()), s:attach(a2:pollfd()), s:attach(a3:pollfd())
    b1:close()
    assert.is_true(s:send(closed, "to nobody"))
    s:flush()
    local left, why = eventually(function() return s:pending(closed) end, failed)
    assert.is_nil(left)
    assert.matches("^the connection failed: ", why)
    assert.are.same({ false, why }, { s:send(closed, "more") })
    -- a client that reads nothing: past max_queued bytes, the socket fails at the send
    local big, ok = ("x"):rep(64 * 1024), true
    for _ = 1, 64 do
      ok, why = s:send(slow, big)
      s:flush()
      if not ok then break end
    end
    assert.is_false(ok)
    assert.are.equal("the client reads too slowly (more than 1048576 bytes wait for it)", why)
    assert.is_true(s:send(fine, "still here"))
    s:flush()
    assert.are.equal("still here", b3:xread(10, "b", 5))
    -- one that reads nothing for the timeout, less than max_queued waiting for it (more
    -- than its socket's buffers take)
    local a4, b4 = socket.pair()
    local idle = s:attach(a4:pollfd())
    for _ = 1, 12 do assert.is_true(s:send(idle, big)) end
    s:flush()
    left, why = eventually(function() return s:pending(idle) end, failed)
    assert.is_nil(left)
    assert.are.equal("the client read nothing for 0.3 s", why)
    b2:close()
    b4:close()
  end)

  it("frees a detached handle; the socket's own descriptor stays open and usable", function()
    local s <close> = gptoss.sender()
    local a, b = socket.pair()
    local h = s:attach(a:pollfd())
    assert.is_true(s:send(h, "one"))
    s:flush()
    assert.are.equal("one", b:xread(3, "b", 5))
    s:detach(h)
    for _, call in ipairs { function() return s:send(h, "x") end, function() return s:pending(h) end,
      function() return s:detach(h) end } do
      local ok, err = pcall(call)
      assert.is_false(ok)
      assert.matches("is not an attached socket's handle", err)
    end
    assert.truthy(a:xwrite("two", "n", 5))
    assert.are.equal("two", b:xread(3, "b", 5))
    assert.are.equal(h, s:attach(a:pollfd())) -- the free entry is taken again
  end)

  it("refuses bad arguments, unknown options and use after close, naming them", function()
    local cases = {
      { function() gptoss.sender { timeout = 0 } end, "sender: timeout must be seconds in %(0, 86400%]" },
      { function() gptoss.sender { max_queued = 0 } end, "sender: max_queued must be at least 1 byte" },
      { function() gptoss.sender { limit = 1 } end, "sender: unknown option 'limit'" },
      { function() gptoss.sender():attach(-1) end, "sender:attach: descriptor %-1: Bad file descriptor" },
      { function() gptoss.sender():attach("x") end, "number expected" },
      { function() gptoss.sender():send(1, "x") end, "sender:send: 1 is not an attached socket's handle" },
      { function()
        local s = gptoss.sender()
        local a = socket.pair()
        s:send(s:attach(a:pollfd()), {})
      end, "string expected" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.matches(c[2], err)
    end
    local s = gptoss.sender()
    s:close()
    assert.is_true(s.closed)
    local ok, err = pcall(s.flush, s)
    assert.is_false(ok)
    assert.matches("sender: used after close", err)
    s:close() -- again: nothing
  end)

  it("stops its thread and closes its descriptors when collected with bytes queued", function()
    local a, b = socket.pair()
    do
      local s = gptoss.sender()
      s:send(s:attach(a:pollfd()), ("y"):rep(4 << 20)) -- more than the socket's buffers take
      s:flush()
    end
    collectgarbage()
    collectgarbage()
    -- what the thread sent before it stopped, read; then a's own descriptor still works
    local got = 0
    while true do
      local chunk = b:xread(-65536, "b", 0.2)
      if not chunk then break end
      got = got + #chunk
    end
    b:clearerr() -- the read that timed out
    assert.truthy(a:xwrite("z", "n", 5))
    assert.are.equal("z", b:xread(1, "b", 5))
    assert.is_true(got < 4 << 20) -- not all: the socket's buffers take less, and no one read while it ran
  end)
end)
