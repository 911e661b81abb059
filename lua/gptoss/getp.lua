--- gptoss.getp: the course's "getp" batch workload (docs/course.md#the-getp-workload) on one
-- or more replicas.
--
-- getp.new{...} is the course's warm_up: it builds one replica per device (or takes the
-- replicas given) and runs nothing. g:run(prompts) is its inference(): it tokenizes,
-- partitions the requests over the replicas, and steps every replica from one Lua thread
-- (a replica's next step is enqueued before its running one is read, so GPU steps overlap
-- across devices and with the Lua work). g:close() is its finish. getp.run{..., requests =
-- prompts} does all three.
--
-- Options of getp.new (any other is an error that lists these):
--   model        from gptoss.load or gptoss.synthetic (default: the given replicas' model)
--   tokenizer    from gptoss.tokenizer, required; its vocab_size must be the model's
--   devices      "cpu" or GPU numbers, one replica each (default: every GPU, else {"cpu"})
--   replicas     existing replicas to use instead; they stay the caller's (g:close() leaves
--                them open) and need ctx >= steps - 1
--   replica      options of the replicas getp builds: weights, kv, slots, threads (CPU),
--                rows, chunk (GPU), on_progress; ctx is steps
--   steps        the course's -n: prompt + generated tokens (default 1024; 0 or more than the
--                model's seq_len mean seq_len, as the course clamps it)
--   sampling     nil (greedy) or {temperature=, top_p=, top_k=, min_p=, seed=}
--   partition    a name of gptoss.partition.names (default "round_robin") or a function
--                (gptoss.partition)
--   scheduler    a name of gptoss.scheduler.names (default "continuous") or a scheduler
--                object (gptoss.scheduler)
--   on_progress  function(p) before the first step and after each round: p = {done = requests
--                finished, total = requests, tokens = generated so far, max_tokens = the most
--                the run can generate (tokens + what the running requests may still add:
--                it falls as requests stop early), steps =, elapsed = seconds}
--   requests     the prompts, when known before warm-up (the course reads its file first):
--                they size the slots and are what g:run() runs when given no prompts
--   chat         true: each prompt is a harmony user turn after harmony's default system
--                message, ending <|start|>assistant (gptoss.harmony), as gpt-oss is meant to
--                be prompted; default false: the course's raw prompt
--   share_prefix true (default): prompts of a replica that begin alike (notably chat's
--                system message) have their shared beginning prefilled once, into a slot of
--                its own, and forked into each request's slot (below); false: every prompt
--                is prefilled whole
-- g.replicas, g.model, g.tokenizer, g.steps (clamped), g.sampling (nil when greedy, else
-- the parameters with the seed chosen), g.share_prefix, g:describe() (one line: replicas,
-- slots, ctx, modes, steps, sampling, partition, scheduler, chat, prefix sharing when off).
--
-- g:run(prompts) returns {outputs = {ids of request 1, ...}, tokens = the course's count,
-- steps = engine steps of all replicas, prefill_saved = prompt rows not stepped thanks to
-- shared prefixes, per_replica = {{requests = assigned, tokens =, steps =, shared_prefix =
-- the prefix length its requests shared (0: none), prefill_saved =, host = seconds of Lua
-- work on its steps, waited = seconds in h:tokens()}, ...}, elapsed = seconds}.
--
-- Per request i (docs/course.md#generation-rule-and-token-count):
--   prompt   tok:encode(text, max_tokens = initial_context_length), no BOS/EOS; the text
--            ends at its first NUL byte, as the course's C string does. A prompt of no
--            tokens is an error naming the request (the course's getp exits there). With
--            chat, harmony.render_ids of the turn; one longer than initial_context_length
--            is an error naming the request (a cut would lose <|start|>assistant).
--   feeding  the prompt's L tokens at positions 0..L-1; the id sampled after position p is
--            the next token to feed once p + 1 >= L, and is appended to the output.
--   end      after appending 199999 (<|endoftext|>) or 200002 (<|return|>), which stay in
--            the output and count, or when L + #output = steps (no position above steps - 2
--            is ever fed). A prompt of L >= steps tokens generates nothing and never runs.
--   count    result.tokens, the sum of the outputs' lengths: what the course's inference()
--            returns and divides by the elapsed time.
--
-- Sampling: greedy (the course default) unless sampling.temperature > 0. Request i's slot
-- then samples with r:sampling(slot, {..., seed = seed + i - 1}), the seed being chosen at
-- random and kept in g.sampling.seed when none is given. Each draw is keyed by its seed and
-- position only (docs/api.md#default-mode), so a request's output does not depend on the
-- replica, slot, partition, scheduler or batch it runs in. The course's own sampler is one
-- xorshift stream shared by the requests in order (docs/course.md#the-sampler); its draws depend on
-- everything sampled before, which batched generation cannot reproduce.
--
-- Slots: replicas getp builds hold ctx = steps positions and, unless replica.slots says
-- otherwise, min(#requests, 16) slots on the CPU, and on a GPU as many as its free memory
-- holds, at most #requests (getp.gpu_slots, from the replica's memory plan; the request
-- count is known when getp.new is given requests). A step carries at most r.rows rows on a
-- GPU (r.chunk of one slot) and max(64, slots) on the CPU, whose steps keep every row's
-- logits on the host (0.8 MB a row with the real vocabulary). GPU replicas getp builds get,
-- unless replica.rows says otherwise, rows = slots + a quarter of them (at least 128) for
-- prefill: with rows = slots, a step whose slots all decode has no row left for a newly
-- admitted prompt, and the last prompts of a full start wait many steps
-- (docs/getp.md#slots-and-rows).
--
-- Shared prefixes (share_prefix): for each replica, P is the length of the longest common
-- beginning of its queued prompts, at most the shortest one's length - 1 (the last prompt
-- row yields the first id). The replica's last slot then holds those P ids, prefilled before
-- the first step and never offered to requests, and each admitted request's slot gets them
-- by r:fork, its prompt fed from position P: (requests - 1) * P prompt rows saved. Forks are
-- bit-identical to prefills, so the outputs are the same either way. A slot is worth that
-- when the replica has one to spare (more slots than queued requests) or P is at least
-- SHARED_PREFIX_MIN ids (chat's system message is longer); it takes P >= 1, two requests and
-- two slots at least. With chat, replicas getp builds get one slot more for it (when two
-- requests or more are known at getp.new).
--
-- Partitions: gptoss.partition; schedulers: gptoss.scheduler (whose header describes the
-- hooks, the state they see and the sequence objects).
local gptoss = require "gptoss"
local generate = require "gptoss.generate"
local harmony = require "gptoss.harmony"
local partition = require "gptoss.partition"
local runner = require "gptoss.runner"
local scheduler = require "gptoss.scheduler"
local util = require "gptoss.util"

local getp = {}

local Getp = {}
Getp.__index = Getp

-- docs/course.md#generation-rule-and-token-count: the course tests these ids, whatever the
-- tokenizer names them
local STOP = { [199999] = true, [200002] = true }
local STEPS = 1024 -- the course's -n default
local CPU_SLOTS, CPU_ROWS = 16, 64

local OPTIONS = { "model", "tokenizer", "devices", "replicas", "replica", "steps", "sampling",
  "partition", "scheduler", "on_progress", "requests", "chat", "share_prefix" }
local REPLICA_OPTIONS = { "weights", "kv", "slots", "threads", "rows", "chunk", "on_progress" }
-- The sampler's options (gptoss.sample_options()) but mode, logit_bias and logprobs: getp
-- draws default-mode ids, keyed by seed and position, and returns ids only.
local SAMPLING_OPTIONS = {}
for _, name in ipairs(gptoss.sample_options()) do
  if name ~= "mode" and name ~= "logit_bias" and name ~= "logprobs" then
    SAMPLING_OPTIONS[#SAMPLING_OPTIONS + 1] = name
  end
end
-- C lists top_k first; getp's messages, header and describe line have always said top_p first
for i = 2, #SAMPLING_OPTIONS do
  if SAMPLING_OPTIONS[i] == "top_p" and SAMPLING_OPTIONS[i - 1] == "top_k" then
    SAMPLING_OPTIONS[i - 1], SAMPLING_OPTIONS[i] = "top_p", "top_k"
  end
end

-- Rows a GPU step carries beyond one per slot, for prefill: a fraction of the slots, at least
-- PREFILL_ROWS_MIN (the header's "Slots" says why).
local PREFILL_ROWS, PREFILL_ROWS_MIN = 0.25, 128

-- The shortest shared prefix worth a slot that requests could have used (the header's
-- "Shared prefixes").
local SHARED_PREFIX_MIN = 32

-- ... and never fewer than the rows one slot may feed in a step (chunk, when given).
local function gpu_rows(slots, chunk)
  return math.max(slots + math.max(PREFILL_ROWS_MIN, math.floor(slots * PREFILL_ROWS)), chunk or 0)
end

--- The most slots a GPU replica of the model can hold for steps positions when `free` bytes
-- of device memory are free: the largest count, at most n_requests (when known) and at
-- least 1, whose memory plan (model:replica_bytes, what the replica itself allocates) and
-- headroom fit. The rows follow the slots as getp chooses them (at least opts.chunk) unless
-- opts.rows is given.
-- opts: weights, kv, rows, chunk.
function getp.gpu_slots(free, model, steps, n_requests, opts)
  opts = opts or {}
  -- a count the replica would refuse (past its limits, or options it does not take) does
  -- not fit either: the replica itself then says why
  local function fits(slots)
    local ok, plan = pcall(model.replica_bytes, model, { device = 1, slots = slots, ctx = steps,
      weights = opts.weights, kv = opts.kv, rows = opts.rows or gpu_rows(slots, opts.chunk), chunk = opts.chunk })
    return ok and plan.total + plan.headroom <= free
  end
  local cap = n_requests or math.huge
  local lo, hi = 1, 2 -- lo fits (or is the floor of 1); find an hi that does not, then bisect
  while hi <= cap and fits(hi) do lo, hi = hi, 2 * hi end
  hi = math.min(hi - 1, cap)
  while lo < hi do
    local mid = (lo + hi + 1) // 2
    if fits(mid) then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- Bytes free on GPU `device` now, or 0 when there is no such device (the replica says so).
local function free_memory(device)
  if not gptoss.devices()[device] then return 0 end
  return (gptoss.device_memory(device))
end

local kind = util.kind

local listed = util.listed

local function check_known(t, known, what, level)
  util.check_known("getp", t, known, what, level + 1)
end

--- "cpu" or "gpu N": how getp's messages and descriptions name a replica's device.
function getp.device_name(device)
  return device == "cpu" and "cpu" or ("gpu " .. tostring(device))
end
local device_name = getp.device_name

-- a core error message without the "file:line: " position Lua put in front of it
local function close_all(replicas)
  for _, r in ipairs(replicas) do r:close() end
end

local function check_model(model, level)
  if kind(model) ~= "gptoss.model" then
    error(("getp: model must be a model from gptoss.load or gptoss.synthetic (got %s)"):format(kind(model)), level + 1)
  end
end

--- The course's -n once the model is known (docs/course.md#the-command-line): 0 or more than the
-- model's seq_len mean seq_len. A negative count is the caller's to handle (the command
-- line reads it as 0, getp refuses it).
function getp.clamp_steps(steps, seq_len)
  if steps == 0 or steps > seq_len then return seq_len end
  return steps
end

-- The steps of a run: a non-negative integer (default the course's), clamped.
local function check_steps(steps, model, level)
  local seq_len = model.config.seq_len
  if steps == nil then steps = STEPS end
  if math.type(steps) ~= "integer" or steps < 0 then
    error(("getp: steps must be a non-negative integer, 0 meaning the model's seq_len %d (got %s)")
      :format(seq_len, tostring(steps)), level + 1)
  end
  return getp.clamp_steps(steps, seq_len)
end

-- The sampling parameters of every request's slot but the seed, or nil for greedy.
-- gptoss.sampler checks the values (and picks the seed when none is given).
local function check_sampling(sampling, level)
  if sampling == nil then return nil end
  if type(sampling) ~= "table" then
    error(("getp: sampling must be a table (got %s)"):format(type(sampling)), level + 1)
  end
  check_known(sampling, SAMPLING_OPTIONS, "sampling option", level + 1)
  local params = {}
  for _, k in ipairs(SAMPLING_OPTIONS) do params[k] = sampling[k] end
  params.temperature = params.temperature or 0 -- the course's -t default
  local ok, s = pcall(gptoss.sampler, params)
  if not ok then
    error("getp: sampling: " .. util.bare(s):gsub("^sampler: ", ""), level + 1)
  end
  if params.temperature == 0 then return nil end
  params.seed = s.seed
  return params
end

local function resolve_partition(p, level)
  if p == nil then p = "round_robin" end
  if type(p) == "function" then return p, "custom" end
  if type(p) == "string" and listed(partition.names, p) then return partition[p], p end
  error(("getp: partition must be one of %s or a function(requests, replicas) (got %s)")
    :format(table.concat(partition.names, ", "), type(p) == "string" and "'" .. p .. "'" or type(p)), level + 1)
end

local function resolve_scheduler(s, level)
  if s == nil then s = "continuous" end
  if type(s) == "string" then
    if listed(scheduler.names, s) then return scheduler[s]() end
    error(("getp: unknown scheduler '%s' (known: %s, or an object with an admit method)")
      :format(s, table.concat(scheduler.names, ", ")), level + 1)
  end
  local indexable = type(s) == "table" or type(s) == "userdata"
  if not indexable or type(s.admit) ~= "function" then
    error(("getp: scheduler must be %s or an object with an admit method (got %s)")
      :format(table.concat(scheduler.names, ", "), indexable and "one without admit" or type(s)), level + 1)
  end
  for _, hook in ipairs { "prefill_chunk", "on_finish" } do
    if s[hook] ~= nil and type(s[hook]) ~= "function" then
      error(("getp: scheduler.%s must be a function (got %s)"):format(hook, type(s[hook])), level + 1)
    end
  end
  return s
end

local function check_prompts(prompts, level)
  if type(prompts) ~= "table" then
    error(("getp: requests must be a list of prompt strings (got %s)"):format(type(prompts)), level + 1)
  end
  for i = 1, #prompts do
    if type(prompts[i]) ~= "string" then
      error(("getp: request %d must be a string (got %s)"):format(i, type(prompts[i])), level + 1)
    end
  end
end

-- The replicas given by the caller: open replica objects.
local function check_replicas(replicas, level)
  if type(replicas) ~= "table" or #replicas == 0 then
    error("getp: no replicas (replicas must be a non-empty list of replica objects)", level + 1)
  end
  for k, r in ipairs(replicas) do
    if kind(r) ~= "gptoss.replica" then
      error(("getp: replicas[%d] must be a replica (got %s)"):format(k, kind(r)), level + 1)
    end
    if r.closed then error(("getp: replicas[%d] is closed"):format(k), level + 1) end
  end
end

-- ... and able to run the model for steps.
local function check_fit(replicas, model, steps, level)
  for k, r in ipairs(replicas) do
    if not rawequal(r.model, model) then
      error(("getp: replicas[%d] holds another model than the one given"):format(k), level + 1)
    end
    if r.ctx < steps - 1 then
      error(("getp: replicas[%d] holds %d positions a slot but steps = %d feeds positions up to %d "
        .. "(ctx >= %d)"):format(k, r.ctx, steps, steps - 2, steps - 1), level + 1)
    end
  end
end

-- One replica per device, with the options given; on a failure the ones built are closed.
-- extra_slot: a slot more than the requests need, for a shared prefix.
local function build_replicas(devices, options, model, steps, n_requests, extra_slot, level)
  if type(devices) ~= "table" or #devices == 0 then
    error("getp: no replicas (devices must be a non-empty list of \"cpu\" or GPU numbers)", level + 1)
  end
  if options ~= nil and type(options) ~= "table" then
    error(("getp: replica must be a table of replica options (got %s)"):format(type(options)), level + 1)
  end
  options = options or {}
  check_known(options, REPLICA_OPTIONS, "replica option", level + 1)
  local replicas = {}
  for k, device in ipairs(devices) do
    if device ~= "cpu" and math.type(device) ~= "integer" then
      close_all(replicas)
      error(("getp: devices[%d] must be \"cpu\" or a GPU number (got %s)"):format(k, tostring(device)), level + 1)
    end
    local ropts = { device = device, ctx = steps }
    for _, name in ipairs(REPLICA_OPTIONS) do ropts[name] = options[name] end
    local rows_chosen = ropts.rows == nil and device ~= "cpu"
    if ropts.slots == nil then
      local extra = extra_slot and 1 or 0
      ropts.slots = device == "cpu" and math.max(1, math.min(n_requests or CPU_SLOTS, CPU_SLOTS)) + extra
          or getp.gpu_slots(free_memory(device), model, steps,
            n_requests and -(-n_requests // #devices) + extra, ropts) -- a replica's share of the requests
    end
    if rows_chosen then ropts.rows = gpu_rows(ropts.slots, ropts.chunk) end
    local ok, r = pcall(model.replica, model, ropts)
    if not ok then
      close_all(replicas)
      error(("getp: building the replica on %s: %s"):format(device_name(device), util.bare(r)), level + 1)
    end
    replicas[k] = r
  end
  return replicas
end

local function create(opts, level)
  if type(opts) ~= "table" then
    error(("getp: options must be a table (got %s)"):format(type(opts)), level)
  end
  check_known(opts, OPTIONS, "option", level)
  if opts.tokenizer == nil then
    error("getp: tokenizer is required (gptoss.tokenizer(path))", level)
  end
  if kind(opts.tokenizer) ~= "gptoss.tokenizer" then
    error(("getp: tokenizer must be a tokenizer from gptoss.tokenizer (got %s)"):format(kind(opts.tokenizer)), level)
  end
  if opts.replicas ~= nil and (opts.devices ~= nil or opts.replica ~= nil) then
    error("getp: devices and replica options are for the replicas getp builds; give them or replicas, not both",
      level)
  end
  if opts.replicas ~= nil then check_replicas(opts.replicas, level) end
  local model = opts.model
  if model == nil and opts.replicas ~= nil then model = opts.replicas[1].model end
  check_model(model, level)
  if opts.tokenizer.vocab_size ~= model.config.vocab_size then
    error(("getp: the tokenizer has %d entries but the model's vocabulary has %d")
      :format(opts.tokenizer.vocab_size, model.config.vocab_size), level)
  end
  local steps = check_steps(opts.steps, model, level)
  local sampling = check_sampling(opts.sampling, level)
  local part, part_name = resolve_partition(opts.partition, level)
  local sched = resolve_scheduler(opts.scheduler, level)
  if opts.on_progress ~= nil and type(opts.on_progress) ~= "function" then
    error(("getp: on_progress must be a function (got %s)"):format(type(opts.on_progress)), level)
  end
  if opts.requests ~= nil then check_prompts(opts.requests, level) end
  for _, flag in ipairs { "chat", "share_prefix" } do
    if opts[flag] ~= nil and type(opts[flag]) ~= "boolean" then
      error(("getp: %s must be a boolean (got %s)"):format(flag, type(opts[flag])), level)
    end
  end
  local share_prefix = opts.share_prefix ~= false

  local replicas, owned = opts.replicas, false
  if replicas ~= nil then
    check_fit(replicas, model, steps, level)
  else
    local devices = opts.devices or gptoss.default_devices()
    local n = opts.requests and #opts.requests
    replicas, owned = build_replicas(devices, opts.replica, model, steps, n,
      share_prefix and opts.chat and n ~= nil and n >= 2, level), true
  end
  local copy = {}
  for k, r in ipairs(replicas) do copy[k] = r end
  return setmetatable({
    model = model, tokenizer = opts.tokenizer, replicas = copy, owned = owned, steps = steps,
    sampling = sampling, partition = part, partition_name = part_name, scheduler = sched,
    on_progress = opts.on_progress, requests = opts.requests, chat = opts.chat or false,
    share_prefix = share_prefix, closed = false,
  }, Getp)
end

--- Builds (or takes) the replicas; runs nothing. See the header for the options.
function getp.new(opts)
  return create(opts, 3)
end

-- A step's bounds on a replica: GPU replicas say theirs; the CPU has none of its own.
local function bounds(r)
  if r.device == "cpu" then
    local rows = math.max(CPU_ROWS, r.slots)
    return rows, rows
  end
  return r.rows, r.chunk
end

-- The prefix a replica's queued prompts share (the header's "Shared prefixes"): {slot =
-- the replica's last, ids =, length =}, or nil when there is nothing to share.
local function shared_prefix(r, queue)
  if #queue < 2 or r.slots < 2 then return nil end
  local first = queue[1].prompt
  local length = #first - 1
  for i = 2, #queue do
    local prompt = queue[i].prompt
    length = math.min(length, #prompt - 1)
    for j = 1, length do
      if prompt[j] ~= first[j] then
        length = j - 1
        break
      end
    end
  end
  if length < 1 or (r.slots <= #queue and length < SHARED_PREFIX_MIN) then return nil end
  return { slot = r.slots, ids = table.move(first, 1, length, 1, {}), length = length }
end

--- A request's prompt ids (the header's "Per request i"): the text up to its first NUL byte,
-- encoded as the course does and cut at max_tokens, or with chat its harmony rendering (not
-- cut: getp refuses one longer than max_tokens).
function getp.prompt_ids(tokenizer, text, chat, max_tokens)
  text = text:match("^[^\0]*")
  if chat then return harmony.render_ids({ harmony.system {}, harmony.user(text) }, tokenizer) end
  return tokenizer:encode(text, { max_tokens = max_tokens })
end

local function run(g, prompts, level)
  if g.closed then error("getp: used after close", level) end
  if prompts == nil then prompts = g.requests end
  check_prompts(prompts, level)
  local started = gptoss.clock()

  local limit_tokens = g.model.config.initial_context_length
  local requests = {}
  for i, text in ipairs(prompts) do
    local ids = getp.prompt_ids(g.tokenizer, text, g.chat, limit_tokens)
    if g.chat and #ids > limit_tokens then
      error(("getp: request %d renders to %d tokens, more than initial_context_length (%d)")
        :format(i, #ids, limit_tokens), level)
    end
    if #ids == 0 then
      error(("getp: request %d encodes to no tokens (an empty prompt: the course's getp exits there)"):format(i),
        level)
    end
    requests[i] = { index = i, text = text, tokens = ids, limit = math.max(0, g.steps - #ids) }
  end
  local assignment = g.partition(requests, g.replicas)
  partition.check(assignment, #requests, #g.replicas)

  -- a replica's failure (a row no token can be drawn for, a device error) names the replica
  local function on_replica(k, f, ...)
    local ok, v = pcall(f, ...)
    if not ok then error(("getp: replica %d (%s): %s"):format(k, device_name(g.replicas[k].device), v), 0) end
    return v
  end
  local outputs, runners, per_replica, done, max_tokens = {}, {}, {}, 0, 0
  local tokens, steps, prefill_saved = 0, 0, 0
  for k, r in ipairs(g.replicas) do
    local queue = {}
    for _, i in ipairs(assignment[k] or {}) do
      local req = requests[i]
      local seq = {
        index = i, text = req.text, prompt = req.tokens, output = {}, limit = req.limit,
        position = 0, replica = r,
      }
      if g.sampling then
        seq.sampling = {}
        for name, v in pairs(g.sampling) do seq.sampling[name] = v end
        seq.sampling.seed = g.sampling.seed + i - 1
      end
      outputs[i] = seq.output
      if req.limit > 0 then
        queue[#queue + 1] = seq
        max_tokens = max_tokens + req.limit
      else
        seq.finish, done = "length", done + 1
      end
    end
    local rows, chunk = bounds(r)
    local prefix = g.share_prefix and shared_prefix(r, queue) or nil
    per_replica[k] = { requests = #(assignment[k] or {}), tokens = 0, steps = 0, shared_prefix = 0, prefill_saved = 0,
      host = 0, waited = 0 }
    if prefix then
      r:sampling(prefix.slot) -- its rows' ids are never read
      on_replica(k, generate.feed, r, prefix.slot, prefix.ids, 0)
      local pr = per_replica[k]
      pr.steps, pr.shared_prefix, pr.prefill_saved = math.ceil(prefix.length / generate.chunk(r)), prefix.length,
          (#queue - 1) * prefix.length
      steps, prefill_saved = steps + pr.steps, prefill_saved + pr.prefill_saved
    end
    runners[k] = runner.new(g.scheduler, r, k, queue, { rows = rows, chunk = chunk, stop = STOP, prefix = prefix })
  end

  -- A replica's next step is enqueued before its running one is read, its decode rows fed
  -- on the device by that step's (gptoss.runner: one step ahead), so a GPU runs step
  -- after step while Lua reads the last one's ids and serves the other replicas (reading
  -- first, then enqueuing, left the GPU idle while Lua worked).
  local function report()
    if g.on_progress then
      g.on_progress { done = done, total = #requests, tokens = tokens, max_tokens = max_tokens, steps = steps,
        elapsed = gptoss.clock() - started }
    end
  end
  local plans, handles = {}, {}
  local function enqueue(k, plan, from)
    plan.batch.from = from
    local r = g.replicas[k]
    plans[k], handles[k] = plan, on_replica(k, r.step, r, plan.batch)
  end
  -- Each replica's seconds of Lua work on its steps (host) and of waiting in h:tokens()
  -- (waited): while the host keeps waiting, the GPUs have their next steps queued.
  report()
  for k, replica_runner in ipairs(runners) do
    local t0 = gptoss.clock()
    if replica_runner:busy() then enqueue(k, replica_runner:build()) end
    per_replica[k].host = gptoss.clock() - t0
  end
  while next(handles) ~= nil do
    for k, replica_runner in ipairs(runners) do
      local plan, h = plans[k], handles[k]
      if h then
        local t0 = gptoss.clock()
        plans[k], handles[k] = nil, nil
        local ahead = replica_runner:build(plan)
        if ahead then enqueue(k, ahead, h) end
        local t1 = gptoss.clock()
        local ids = on_replica(k, h.tokens, h)
        local t2 = gptoss.clock()
        local generated, ended = replica_runner:apply(plan, ids)
        local pr = per_replica[k]
        pr.tokens, pr.steps = pr.tokens + generated, pr.steps + 1
        tokens, steps, done = tokens + generated, steps + 1, done + #ended
        for _, seq in ipairs(ended) do max_tokens = max_tokens - (seq.limit - #seq.output) end
        if not ahead and replica_runner:busy() then enqueue(k, replica_runner:build()) end
        pr.host, pr.waited = pr.host + (t1 - t0) + (gptoss.clock() - t2), pr.waited + (t2 - t1)
      end
    end
    report()
  end
  return { outputs = outputs, tokens = tokens, steps = steps, prefill_saved = prefill_saved,
    per_replica = per_replica, elapsed = gptoss.clock() - started }
end

--- Runs the prompts (a list of strings; default: the requests given to getp.new).
-- Returns {outputs = {ids of request i, ...}, tokens = the course's count, steps = engine
-- steps, per_replica = {{requests=, tokens=, steps=, host=, waited=, ...}, ...}, elapsed =
-- seconds} (the header says each field).
function Getp:run(prompts)
  return run(self, prompts, 3)
end

--- One line: the replicas (device, slots, ctx, modes), steps, sampling, partition, scheduler,
-- chat, and prefix sharing when it is off.
function Getp:describe()
  local parts = {}
  for k, r in ipairs(self.replicas) do
    if r.closed then
      parts[k] = "closed"
    else
      local rows, chunk = bounds(r)
      parts[k] = ("%s (%d %s, ctx %d, weights %s, kv %s, %d rows a step%s)"):format(device_name(r.device),
        r.slots, r.slots == 1 and "slot" or "slots", r.ctx, r.weights, r.kv, rows,
        chunk < rows and (", %d of one slot"):format(chunk) or "")
    end
  end
  local s = self.sampling
  local sampling = s and ("temperature %g, top_p %g, top_k %d, min_p %g, seed %d + request - 1")
      :format(s.temperature, s.top_p or 1, s.top_k or 0, s.min_p or 0, s.seed) or "greedy"
  return ("getp: %d %s: %s; steps %d; %s; partition %s; scheduler %s%s%s"):format(#self.replicas,
    #self.replicas == 1 and "replica" or "replicas", table.concat(parts, ", "), self.steps, sampling,
    self.partition_name, self.scheduler.name or "custom", self.chat and "; prompts as harmony user turns" or "",
    self.share_prefix and "" or "; prompt prefixes not shared")
end

--- Closes the replicas getp built (not the ones it was given). Idempotent.
function Getp:close()
  if self.closed then return end
  self.closed = true
  if self.owned then close_all(self.replicas) end
end

Getp.__close = Getp.close
Getp.__tostring = Getp.describe

--- new + run + close: getp.run{..., requests = prompts} returns run's result.
function getp.run(opts)
  local g <close> = create(opts, 3)
  return run(g, opts.requests, 3)
end

return getp
