--- gptoss.serve_api (internal, gptoss.serve's): the endpoints. A completion request (chat
-- or plain) becomes a job (serve_openai), its n choices sequences on the engine; the
-- request's coroutine then waits on a condition that the engine loop signals, and answers
-- once every choice has ended, or streams each delta as a server-sent event: the engine
-- loop makes the events as the ids arrive (from templates encoded once a server, a
-- delta's text the only part to quote), and gptoss.serve_stream writes those made in a step
-- in one chunk. A job whose client has gone cancels its sequences, freeing their slots: a
-- stream's when a write fails, a whole answer's when its connection closes while it waits.
-- Choice i > 1 forks choice 1's prompt (gptoss.runner: prompt_from) instead of feeding it.
local condition = require "cqueues.condition"
local gptoss = require "gptoss"
local serve_choice = require "gptoss.serve_choice"
local serve_http = require "gptoss.serve_http"
local serve_openai = require "gptoss.serve_openai"
local serve_stream = require "gptoss.serve_stream"

local serve_api = {}

local NULL = serve_http.null
local escape = serve_http.escape
local job_counter = 0

-- The OpenAI usage object of a job's sequences.
local function usage(job, seqs)
  local generated = 0
  for _, seq in ipairs(seqs) do generated = generated + #seq.output end
  return { prompt_tokens = #job.prompt, completion_tokens = generated, total_tokens = #job.prompt + generated }
end

-- A response's logprobs object of entries (serve_choice's) of a job of kind.
local function logprobs_object(kind, entries)
  if kind == "chat" then return { content = entries } end
  local lp = { tokens = {}, token_logprobs = {}, top_logprobs = {}, text_offset = {} } -- the legacy columns
  for i, e in ipairs(entries) do
    lp.tokens[i], lp.token_logprobs[i], lp.top_logprobs[i], lp.text_offset[i] = e.token, e.logprob, e.top or NULL,
      e.offset
  end
  return lp
end

-- A streamed chunk of choice i with delta d (a serve_choice delta, or {} for the last).
local function chunk(server, job, i, d, finish, logprobs)
  local choice = { index = i - 1, logprobs = logprobs or NULL, finish_reason = finish or NULL }
  if job.kind == "chat" then
    -- the reasoning under vLLM's two names: reasoning_content, and reasoning, which it has now
    local delta = { content = d.content, reasoning_content = d.reasoning_content, reasoning = d.reasoning_content,
      role = d.role }
    if d.tool_call then
      local t = d.tool_call
      delta.tool_calls = { { index = t.index, id = t.id, type = t.id and "function" or nil,
        ["function"] = { name = t.name, arguments = t.arguments } } }
    end
    if next(delta) == nil then delta.content = "" end
    choice.delta = delta
  else
    choice.text = d.content or ""
  end
  return { id = job.id, object = job.kind == "chat" and "chat.completion.chunk" or "text_completion",
    created = job.created, model = server.model_name, choices = { choice },
    usage = job.include_usage and NULL or nil }
end

-- The whole response of a job whose choices have all ended.
local function response(server, job, choices, seqs)
  local out = {}
  for i, c in ipairs(choices) do
    local o = { index = i - 1, finish_reason = c:finish_reason(),
      logprobs = c.logprobs and logprobs_object(job.kind, c.logprobs) or NULL }
    if job.kind == "chat" then
      o.message = c:message()
      o.message.content = o.message.content or NULL
    else
      o.text = c:text()
    end
    out[i] = o
  end
  return { id = job.id, object = job.kind == "chat" and "chat.completion" or "text_completion",
    created = job.created, model = server.model_name, choices = out, usage = usage(job, seqs) }
end

-- A stream's events from templates, so that they cost no encode: the event of each shape
-- (a content or reasoning_content delta, the first chunk, the last) is encoded once a server
-- for each kind, usage asked and choice, with slots where a job's id and created go and where
-- the text goes (a delta's, or the finish_reason); a job fills in its id and created once
-- (new_stream), leaving the pieces around the text slots, and a delta costs its text escaped
-- (serve_http.escape: most need none, and are then no new string). A model name that holds
-- a slot's mark gets no template: its events are encoded whole.
local SLOTS = { id = "\1id\1", created = "\1created\1", text = "\1text\1" }
-- Each slot's mark as the encoded event holds it: the strings' inside their quotes, which
-- stay in the template's pieces; created's (a number) with its quotes, which it replaces.
local SLOT_MARKS = { id = serve_http.escape(SLOTS.id), created = serve_http.quote(SLOTS.created),
  text = serve_http.escape(SLOTS.text) }
-- the text slots of each shape: a reasoning delta holds its text twice (under both its names)
local TEXT_SLOTS = { content = 1, reasoning_content = 2, first = 0, finish = 1 }

-- An event's text split at its slots: {text, slot name, text, ..., text}, or nil when a slot
-- is there another number of times than the shape's (id and created: once).
local function split_at_slots(text, shape)
  local out, at, seen = {}, 1, { id = 0, created = 0, text = 0 }
  while true do
    local slot, a, b
    for name, mark in pairs(SLOT_MARKS) do
      local x, y = text:find(mark, at, true)
      if x and (not a or x < a) then slot, a, b = name, x, y end
    end
    out[#out + 1] = text:sub(at, (a or 0) - 1)
    if not a then break end
    out[#out + 1], seen[slot], at = slot, seen[slot] + 1, b + 1
  end
  if seen.id ~= 1 or seen.created ~= 1 or seen.text ~= TEXT_SLOTS[shape] then return nil end
  return out
end

-- The delta of a choice's first chunk: a chat one's carries the role.
local function first_delta(job)
  return job.kind == "chat" and { role = "assistant", content = "" } or {}
end

-- The server's template of a shape for choice i of jobs like job (nil: none, see above).
local function shape_template(server, job, i, shape)
  local key = ("%s %s %d %s"):format(job.kind, job.include_usage, i, shape)
  local templates = server.event_templates or {}
  server.event_templates = templates
  if templates[key] == nil then
    local like = { kind = job.kind, include_usage = job.include_usage, id = SLOTS.id, created = SLOTS.created }
    local d, finish = {}, nil
    if shape == "first" then
      d = first_delta(job)
    elseif shape == "finish" then
      finish = SLOTS.text
    else
      d[shape] = SLOTS.text
    end
    templates[key] = split_at_slots(serve_http.event(chunk(server, like, i, d, finish)), shape) or false
  end
  return templates[key] or nil
end

-- Choice i's template of a shape with job's id and created in: the pieces around its text
-- slots (nil: none).
local function template(server, job, i, shape)
  local split = shape_template(server, job, i, shape)
  if not split then return nil end
  local pieces, current = {}, {}
  for k = 1, #split, 2 do
    current[#current + 1] = split[k]
    local slot = split[k + 1]
    if slot == "id" then
      current[#current + 1] = serve_http.escape(job.id)
    elseif slot == "created" then
      current[#current + 1] = tostring(job.created)
    elseif slot == "text" then
      pieces[#pieces + 1], current = table.concat(current), {}
    end
  end
  pieces[#pieces + 1] = table.concat(current)
  return pieces
end

-- A job's stream (gptoss.serve_stream's): the text of the events its sequences completed and
-- not yet written (`pending`), made in the engine loop as each id arrives; `done` once the
-- last event is in.
local function new_stream(server, job, wake)
  local st = serve_stream.new(wake)
  st.templates = {}
  for i = 1, job.n do
    st.templates[i] = { content = template(server, job, i, "content"),
      reasoning_content = job.kind == "chat" and template(server, job, i, "reasoning_content") or nil,
      finish = template(server, job, i, "finish") }
    -- each choice begins with an empty chunk
    local first = template(server, job, i, "first")
    st.pending[i] = first and first[1] or serve_http.event(chunk(server, job, i, first_delta(job)))
  end
  return st
end

-- Appends template t's pieces with the text escaped between them to the pending events.
local function add_filled(pending, t, text)
  local escaped, n = escape(text), #pending
  for k = 1, #t - 1 do
    pending[n + 1], pending[n + 2] = t[k], escaped
    n = n + 2
  end
  pending[n + 1] = t[#t]
end

-- Choice c's (i's) deltas (serve_choice's) as events in the stream's pending ones, joined
-- with the others at the write; the first carries the logprob entries of the ids since the
-- last event that carried text (an event with entries is encoded whole, the others are
-- made from their templates).
local function add_deltas(server, job, st, i, c, deltas)
  local entries = #deltas > 0 and c.logprobs and c:take_logprobs() or nil
  local templates, pending = st.templates[i], st.pending
  for k = 1, #deltas do
    local d = deltas[k]
    local field = d.content and "content" or d.reasoning_content and "reasoning_content"
    local t = not entries and field and templates[field]
    if t then
      add_filled(pending, t, d[field])
    else
      pending[#pending + 1] = serve_http.event(chunk(server, job, i, d, nil,
        entries and logprobs_object(job.kind, entries)))
    end
    entries = nil
  end
end

-- Choice i's last events: its last deltas and finish (or the error that ended it); after
-- the job's last choice, the usage when asked and [DONE].
local function add_end(server, job, st, choices, seqs, i)
  local pending, seq, c = st.pending, seqs[i], choices[i]
  if seq.error then
    pending[#pending + 1] = serve_http.event { error = { message = seq.error, type = "server_error", param = NULL,
      code = NULL } }
  else
    add_deltas(server, job, st, i, c, c:close(seq.finish))
    local rest = c:take_logprobs() -- of ids that showed no text
    local t = not rest and st.templates[i].finish
    if t then
      add_filled(pending, t, c:finish_reason())
    else
      pending[#pending + 1] = serve_http.event(chunk(server, job, i, {}, c:finish_reason(),
        rest and logprobs_object(job.kind, rest)))
    end
  end
  if job.ended < job.n then return end
  if job.include_usage then
    pending[#pending + 1] = serve_http.event { id = job.id,
      object = job.kind == "chat" and "chat.completion.chunk" or "text_completion", created = job.created,
      model = server.model_name, choices = {}, usage = usage(job, seqs) }
  end
  pending[#pending + 1] = serve_http.event("[DONE]")
  st.done = true
end

-- The ids seq.turn forces after id (gptoss.serve_structured's tracker), taken as drawn ones:
-- into seq.output as far as its limit allows, each to take(id, logprob entry) (logprob 0: the
-- only token its constraint allowed); the sequence ends where the turn is over.
local function follow_turn(engine, seq, id, take)
  local forced = seq.turn:push(id)
  for _, f in ipairs(forced) do
    if seq.finish or #seq.output >= seq.limit then break end
    seq.output[#seq.output + 1] = f
    take(f, { id = f, logprob = 0, top = {} })
  end
  if seq.turn.finished then engine:cancel(seq, "stop") end
  if #seq.output >= seq.limit then engine:cancel(seq, "length") end
end

-- The sequences of a job, each feeding its choice and counting job.ended; a streamed
-- job's (st: new_stream's) also make its events, and mark the stream (serve_stream.touched)
-- when there is something to write. `wake` is signalled when a choice ends. A job with a
-- plan gives each sequence its tracker (seq.turn), whose forced ids its choice takes as
-- generated ones.
local function sequences(server, job, choices, st, wake)
  local seqs, metrics, engine = {}, server.metrics, server.engine
  local arrived = gptoss.clock()
  for i = 1, job.n do
    local c = choices[i]
    local function take(id, logprob)
      metrics:tokens(0, 1)
      local deltas = c:add(id, logprob)
      if st and #deltas > 0 then -- an id that shows no text yet has nothing to write
        add_deltas(server, job, st, i, c, deltas)
        serve_stream.touched(server, st)
      end
      if c.stopped then engine:cancel(seqs[i], "stop") end
    end
    seqs[i] = {
      prompt = job.prompt, limit = job.limit, sampling = serve_openai.sampling_for(job, i),
      prompt_from = seqs[1], -- nil for the first
      turn = job.plan and job.plan:new(),
      on_id = function(seq, id, logprob)
        local now = engine.read_at
        if not seq.first_at then
          seq.first_at = now
          metrics:first_token(now - arrived)
        end
        seq.last_at = now
        take(id, logprob)
        if seq.turn then follow_turn(engine, seq, id, take) end
      end,
      on_end = function(seq)
        if seq.first_at and #seq.output > 1 then metrics:per_token((seq.last_at - seq.first_at) / (#seq.output - 1)) end
        job.ended = job.ended + 1
        if st then add_end(server, job, st, choices, seqs, i) end
        wake:signal()
      end,
    }
  end
  return seqs
end

-- Ends a job whose client went away: its sequences cancelled, their slots free.
local function abandon(server, job, seqs)
  for _, seq in ipairs(seqs) do server.engine:cancel(seq, "disconnected") end
  server.log(("%s: the client went away; its slots are free"):format(job.id))
end

-- Streams a job's events (serve_stream.run); a client gone, or an error raised on the way,
-- cancels its sequences (the error is raised again, for the handler to answer or close).
local function stream_job(server, res, job, st, seqs)
  local ok, answered = pcall(serve_stream.run, server, res, st)
  if not (ok and answered) then abandon(server, job, seqs) end
  if not ok then error(answered, 0) end
end

-- Queues a job's sequences (job.seqs), or raises the 503 of a draining server or the 429 of
-- a full queue.
local function submit(server, job, seqs)
  if not server.engine:submit(seqs) then
    error({ status = server.engine.stopping and 503 or 429, type = "server_error", retry_after = 1,
      message = server.engine.stopping and "the server is shutting down"
          or ("the queue is full: %d requests wait for a slot, the most this server lets wait (--max-queue): "
            .. "try again later"):format(server.engine:waiting()) }, 0)
  end
  job.seqs = seqs
  server.metrics:tokens(#job.prompt, 0)
end

-- Runs a job to its end and answers it.
local function run_job(server, res, job)
  job_counter = job_counter + 1
  job.id = ("%s-%d%06d"):format(job.kind == "chat" and "chatcmpl" or "cmpl", os.time(), job_counter)
  job.created = os.time()
  job.seed = job.seed or math.random(0, 2 ^ 31 - 1)
  job.ended = 0 -- choices whose sequence has ended
  local choices, wake = {}, condition.new()
  for i = 1, job.n do choices[i] = serve_choice.new(job, server.tokenizer) end
  local st = job.stream and new_stream(server, job, wake) or nil
  local seqs = sequences(server, job, choices, st, wake)
  submit(server, job, seqs)
  if st then return stream_job(server, res, job, st, seqs) end
  while job.ended < job.n do
    if not res:wait(wake) then return abandon(server, job, seqs) end
  end
  for i, seq in ipairs(seqs) do
    if seq.error then error({ status = 500, type = "server_error", message = seq.error }, 0) end
    choices[i]:close(seq.finish)
  end
  res:send(200, response(server, job, choices, seqs))
end

-- Unknown field names logged once a server, and at most this many (a client may send
-- any number of names).
local MAX_UNKNOWN_LOGGED = 64

-- A function(name) that logs the first time a field name is ignored as unknown.
local function unknown_field_logger(server)
  local seen, count = {}, 0
  return function(name)
    if seen[name] or count > MAX_UNKNOWN_LOGGED then return end
    count = count + 1
    seen[name] = true
    if count > MAX_UNKNOWN_LOGGED then
      server.log(("%d unknown fields ignored; the next ones are ignored without a word"):format(MAX_UNKNOWN_LOGGED))
    else
      server.log(("ignoring the unknown field '%s' (said once)"):format(serve_http.printable(name)))
    end
  end
end

--- The routes of server (gptoss.serve's object), for serve_http.listen: "METHOD /path" to
-- a handler function(res, body_text, headers, arg), arg what a path's {part} matched.
function serve_api.routes(server)
  local on_unknown = unknown_field_logger(server)
  local function completion(parse)
    return function(res, text)
      local body = serve_http.decode(text)
      serve_openai.check_model(body, server.model_name)
      local job = parse(body, server.tokenizer, server.engine:ctx(), on_unknown)
      server.answering = server.answering + 1 -- a draining server waits for these
      local ok, err = pcall(run_job, server, res, job)
      server.answering = server.answering - 1
      res.usage = usage(job, job.seqs or {}) -- the access log's
      if not ok then error(err, 0) end
    end
  end
  local function model()
    return { id = server.model_name, object = "model", created = server.started, owned_by = "gptoss",
      max_model_len = server.engine:ctx() }
  end
  local routes = {
    ["POST /v1/chat/completions"] = completion(serve_openai.chat),
    ["POST /v1/completions"] = completion(serve_openai.completion),
    ["GET /v1/models"] = function(res) res:send(200, { object = "list", data = { model() } }) end,
    ["GET /v1/models/{id}"] = function(res, _, _, id)
      if id ~= server.model_name then serve_openai.check_model({ model = id }, server.model_name) end
      res:send(200, model())
    end,
    ["GET /health"] = function(res)
      res:send(server.engine.stopping and 503 or 200, server.engine.stopping and "shutting down\n" or "ok\n", nil,
        "text/plain")
    end,
    ["GET /metrics"] = function(res)
      local used, total = server.engine:slots_in_use()
      res:send(200, server.metrics:text(server.engine:waiting(), used, total), nil, "text/plain; version=0.0.4")
    end,
  }
  -- required here, not above: gptoss.serve_responses requires this module
  require("gptoss.serve_responses").add_routes(server, routes, on_unknown)
  return routes
end

-- gptoss.serve_responses runs its jobs with these
serve_api.sequences, serve_api.submit, serve_api.stream_job = sequences, submit, stream_job
serve_api.abandon = abandon

return serve_api
