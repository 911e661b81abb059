--- gptoss.serve_stream (internal, gptoss.serve's): a streamed answer's events on their way to
-- its client. The engine loop makes them (gptoss.serve_api, gptoss.serve_responses) into the
-- stream's `pending` list as ids arrive and marks the stream (touched). Once a step's ids are
-- all handed out, send_marked gives each marked stream's new events, as one chunk, to the
-- server's sender (gptoss.sender: a thread that writes them to the socket, so that the loop
-- makes no system call a stream), or wakes the stream's coroutine where they go through
-- lua-http instead (a server not listening, an HTTP/1.0 client, a test's response). The
-- coroutine (run) writes a stream's last events itself, once the sender has sent those before
-- them; it wakes before that only when the client went away.
local cqueues = require "cqueues"
local serve_http = require "gptoss.serve_http"

local serve_stream = {}

-- Seconds between two looks at whether the sender has sent a stream's bytes before its end.
local DRAIN_LOOK = 0.001

--- A stream whose coroutine waits on wake: {pending = {}, done = false, wake = wake}; the
-- caller adds what it makes events with and sets done once the last one is in pending.
function serve_stream.new(wake)
  return { pending = {}, done = false, wake = wake }
end

--- st has new events (or ended): the engine loop's next send_marked sends or wakes it.
function serve_stream.touched(server, st)
  if not st.marked then
    st.marked = true
    local marked = server.marked_streams
    marked[#marked + 1] = st
  end
end

-- The stream's pending events, joined; the list emptied.
local function take_pending(st)
  local parts = st.pending
  local text = table.concat(parts)
  for k = #parts, 1, -1 do parts[k] = nil end
  return text
end

--- Each marked stream's new events to the sender as one chunk, or its coroutine woken (its
-- last events, a stream without a sender's handle, one whose socket failed: a client gone,
-- too slow, or no memory for its bytes). The list is taken first: a call that raises leaves
-- none half read for the next.
function serve_stream.send_marked(server)
  local marked, sender = server.marked_streams, server.sender
  if #marked == 0 then return end
  server.marked_streams = {}
  for i = 1, #marked do
    local st = marked[i]
    st.marked = false
    local handle = st.handle
    if handle and not st.done then
      local text = take_pending(st)
      if text ~= "" then
        local sent, why = sender:send(handle, serve_http.chunk_head(#text), text, serve_http.CHUNK_END)
        if not sent then
          st.failed = why
          st.wake:signal()
        end
      end
    else
      st.wake:signal()
    end
  end
  if sender then sender:flush() end
end

-- A stream whose events go through the sender (handle): waits for its end or its client's
-- departure, then for the sender to have sent what it was given, and writes the rest with
-- the end. False when the client went away. The handle is detached however it ends.
local function run_sent(server, res, st, handle)
  local sender = server.sender
  local _ <close> = setmetatable({}, { __close = function()
    st.handle = nil
    if not sender.closed then sender:detach(handle) end
  end })
  st.handle = handle
  serve_stream.touched(server, st) -- what was made before the handle
  while not (st.done or st.failed) do
    if not res:wait(st.wake) then st.failed = "gone" end
  end
  st.handle = nil
  local left = not st.failed and sender:pending(handle)
  while left and left > 0 do
    cqueues.sleep(DRAIN_LOOK)
    left = sender:pending(handle)
  end
  if not left then
    res.gone = true
    return false
  end
  return res:write_events(take_pending(st), true)
end

--- Writes a stream's events to res (serve_http's response) as they come, until its end.
-- Returns false when the client went away: a write failed, or, before the first id (a
-- stream queued for a slot), its connection closed; once ids flow, the writes tell.
function serve_stream.run(server, res, st)
  if not res:open_events() then return false end
  local socket = server.sender and res.chunk_socket and res:chunk_socket()
  -- a socket the sender cannot take (no descriptor left to duplicate) is written from here
  if socket then
    local attached, handle = pcall(server.sender.attach, server.sender, socket:pollfd())
    if attached then return run_sent(server, res, st, handle) end
  end
  local writes = 0
  while true do
    if #st.pending == 0 and not st.done then
      if writes > 1 then st.wake:wait() elseif not res:wait(st.wake) then return false end
    end
    local last = st.done
    local text = take_pending(st)
    if text ~= "" or last then
      if not res:write_events(text, last) then return false end
      writes = writes + 1
    end
    if last then return true end
  end
end

return serve_stream
