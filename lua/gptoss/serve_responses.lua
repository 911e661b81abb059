--- gptoss.serve_responses (internal, gptoss.serve's): OpenAI's Responses API,
-- POST /v1/responses and GET /v1/responses/{id} (docs/serve.md#the-responses-api). A body is
-- read into a chat job (serve_responses_input), run on the engine as a chat completion of one
-- choice is (serve_api's sequences, submit, stream writer and abandon), and its choice's deltas built
-- into output items (serve_responses_output), told as stream events when it streams. Finished
-- responses are kept in memory, the oldest evicted first past a count, for
-- previous_response_id and GET; a kept response holds its own items (input and output) and
-- the one it followed, so a chain costs each response's items once.
local condition = require "cqueues.condition"
local serve_api = require "gptoss.serve_api"
local serve_choice = require "gptoss.serve_choice"
local serve_http = require "gptoss.serve_http"
local serve_openai = require "gptoss.serve_openai"
local serve_responses_input = require "gptoss.serve_responses_input"
local serve_responses_output = require "gptoss.serve_responses_output"
local serve_stream = require "gptoss.serve_stream"

local serve_responses = {}

--- Responses kept when the server is given no count.
serve_responses.DEFAULT_STORED = 1024

local NULL = serve_http.null
local id_counter = 0

-- A fresh id with prefix ("resp", "msg", ...): unique in the process, and not guessed from
-- another one's.
local function new_id(prefix)
  id_counter = id_counter + 1
  return ("%s_%x%06x%012x"):format(prefix, os.time(), id_counter % 0x1000000, math.random(0, 0xffffffffffff))
end

local Store = {}
Store.__index = Store

-- At most limit responses, by id; the oldest evicted first. order[first..last]: their ids
-- as they came.
local function new_store(limit)
  return setmetatable({ limit = limit, by_id = {}, order = {}, first = 1, last = 0 }, Store)
end

function Store:put(id, entry)
  self.by_id[id] = entry
  self.last = self.last + 1
  self.order[self.last] = id
  if self.last - self.first + 1 > self.limit then
    self.by_id[self.order[self.first]], self.order[self.first] = nil, nil
    self.first = self.first + 1
  end
end

-- The entry of id, or the 404 naming it (param: the field that gave it).
function Store:get(id, param)
  local entry = self.by_id[id]
  if entry then return entry end
  serve_openai.fail(("no response '%s' is stored here: unknown, created with 'store': false, or evicted (this server "
    .. "keeps the last %d)"):format(id, self.limit), param, 404, nil,
    param and "previous_response_not_found" or "response_not_found")
end

-- A stored response's whole conversation: the items of those it followed, then its own.
local function conversation(entry)
  local chain = {}
  while entry do
    table.insert(chain, 1, entry.items)
    entry = entry.parent
  end
  local items = {}
  for _, list in ipairs(chain) do table.move(list, 1, #list, #items + 1, items) end
  return items
end

-- The response object of job: its settings echoed, output items, status and usage.
local function response(server, job, status, extra)
  local s = job.settings
  local r = { id = job.id, object = "response", created_at = job.created, status = status, model = server.model_name,
    output = job.output.items, error = NULL, incomplete_details = NULL, usage = NULL,
    instructions = s.instructions or NULL, metadata = s.metadata or setmetatable({}, { __jsontype = "object" }),
    max_output_tokens = s.max_output_tokens or NULL, previous_response_id = s.previous_response_id or NULL,
    reasoning = { effort = s.effort, summary = s.summary or NULL }, store = s.store, background = false,
    temperature = s.temperature, top_p = s.top_p, text = { format = s.format }, truncation = "disabled",
    tool_choice = s.tool_choice, tools = s.tools, parallel_tool_calls = s.parallel_tool_calls, user = s.user }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- A stream's event of kind with fields, numbered, in the stream's pending ones.
local function emitter(st)
  return function(kind, fields)
    fields.type, fields.sequence_number = kind, st.sequence
    st.sequence = st.sequence + 1
    st.pending[#st.pending + 1] = "event: " .. kind .. "\n" .. serve_http.event(fields)
  end
end

-- The job's choice, wrapped so that each id's deltas build its output items (and events)
-- and the ids of its analysis messages' content (their <|end|> included, not their
-- headers) are counted as reasoning tokens: those the harmony parser reads in one.
local function output_choice(server, job, stream)
  local choice = serve_choice.new(job, server.tokenizer)
  job.reasoning_tokens = 0
  local wrapped = setmetatable({}, { __index = choice })
  function wrapped.add(_, id, logprob)
    local open = choice.parser.message
    if open and open.channel == "analysis" then job.reasoning_tokens = job.reasoning_tokens + 1 end
    local deltas = choice:add(id, logprob)
    for _, d in ipairs(deltas) do job.output:add(d) end
    -- an id that shows no text has nothing to write
    if stream and #deltas > 0 then serve_stream.touched(server, stream) end
    return deltas
  end
  return choice, wrapped
end

-- Ends a job whose sequence ended: the output closed, the response made and kept (store),
-- and, streaming, its last event. Returns the response.
local function finish(server, job, choice, seq, emit)
  if seq.error then
    job.output:close("incomplete")
    local r = response(server, job, "failed", { error = { code = "server_error", message = seq.error } })
    emit("response.failed", { response = r })
    return r
  end
  for _, d in ipairs(choice:close(seq.finish)) do job.output:add(d) end
  local incomplete = choice:finish_reason() == "length"
  job.output:close(incomplete and "incomplete" or "completed")
  local generated = #seq.output
  local r = response(server, job, incomplete and "incomplete" or "completed", {
    incomplete_details = incomplete and { reason = "max_output_tokens" } or NULL,
    completed_at = not incomplete and os.time() or nil,
    usage = { input_tokens = #job.prompt, input_tokens_details = { cached_tokens = 0 }, output_tokens = generated,
      output_tokens_details = { reasoning_tokens = job.reasoning_tokens }, total_tokens = #job.prompt + generated } })
  if job.settings.store and seq.finish ~= "disconnected" then
    local own = table.move(job.items, 1, #job.items, 1, {})
    table.move(job.output.items, 1, #job.output.items, #own + 1, own)
    server.responses:put(job.id, { response = r, items = own, parent = job.parent })
  end
  -- completed even when incomplete (its status says so): the openai client's stream helper,
  -- and agent frameworks on it, take the final response from response.completed alone
  emit("response.completed", { response = r })
  return r
end

-- Runs a job to its end and answers it: the whole response, or its events as they come.
local function run_job(server, res, job)
  job.id, job.created, job.ended = new_id("resp"), os.time(), 0
  job.seed = math.random(0, 2 ^ 31 - 1)
  local wake = condition.new()
  local st = job.stream and serve_stream.new(wake) or nil
  if st then st.sequence = 0 end
  local emit = st and emitter(st) or function() end
  job.output = serve_responses_output.new(new_id, st and emit)
  local choice, wrapped = output_choice(server, job, st)
  local seqs = serve_api.sequences(server, job, { wrapped }, nil, wake)
  local seq, on_end = seqs[1], seqs[1].on_end
  seq.on_end = function(s)
    on_end(s)
    job.response = finish(server, job, choice, s, emit)
    if st then st.done = true end
  end
  serve_api.submit(server, job, seqs)
  if st then
    local r = response(server, job, "in_progress")
    emit("response.created", { response = r })
    emit("response.in_progress", { response = r })
    return serve_api.stream_job(server, res, job, st, seqs)
  end
  while job.ended < 1 do
    if not res:wait(wake) then return serve_api.abandon(server, job, seqs) end
  end
  if seq.error then error({ status = 500, type = "server_error", message = seq.error }, 0) end
  res:send(200, job.response)
end

--- Adds the Responses API's routes to routes (serve_api's) for server (gptoss.serve's
-- object, whose stored_responses bounds the responses kept); on_unknown(name) hears of
-- the fields ignored as unknown.
function serve_responses.add_routes(server, routes, on_unknown)
  server.responses = new_store(server.stored_responses or serve_responses.DEFAULT_STORED)
  routes["POST /v1/responses"] = function(res, text)
    local body = serve_http.decode(text)
    serve_openai.check_model(body, server.model_name)
    local parent
    local job = serve_responses_input.job(body, server.tokenizer, server.engine:ctx(), function(id)
      parent = server.responses:get(id, "previous_response_id")
      return conversation(parent)
    end, on_unknown)
    job.parent = parent
    server.answering = server.answering + 1 -- a draining server waits for these
    local ok, err = pcall(run_job, server, res, job)
    server.answering = server.answering - 1
    local generated = job.seqs and #job.seqs[1].output or 0
    res.usage = { prompt_tokens = #job.prompt, completion_tokens = generated } -- the access log's
    if not ok then error(err, 0) end
  end
  routes["GET /v1/responses/{id}"] = function(res, _, _, id)
    res:send(200, server.responses:get(id).response)
  end
end

return serve_responses
