--- gptoss.getp_options (internal, gptoss.getp's): getp.new's options (getp's header lists
-- them) checked, resolved to the objects a run uses, and the replicas built or taken.
local gptoss = require "gptoss"
local getp_replicas = require "gptoss.getp_replicas"
local partition = require "gptoss.partition"
local scheduler = require "gptoss.scheduler"
local util = require "gptoss.util"

local options = {}

local OPTIONS = { "model", "tokenizer", "devices", "replicas", "replica", "steps", "sampling",
  "partition", "scheduler", "on_progress", "on_step", "requests", "chat", "share_prefix", "request_numbers" }
local STEPS = 1024 -- the course's -n default

-- The sampler's options (gptoss.sample_options()) but mode, logit_bias and logprobs: getp
-- draws default-mode ids, keyed by seed and position, and returns ids only.
local SAMPLING_OPTIONS = {}
for _, name in ipairs(gptoss.sample_options()) do
  if name ~= "mode" and name ~= "logit_bias" and name ~= "logprobs" then
    SAMPLING_OPTIONS[#SAMPLING_OPTIONS + 1] = name
  end
end

local kind = util.kind

local function check_known(t, known, what, level)
  util.check_known("getp", t, known, what, level + 1)
end

--- The course's -n once the model is known (docs/course.md#the-command-line): 0 or more than
-- the model's seq_len mean seq_len. A negative count is the caller's to handle (the command
-- line reads it as 0, getp refuses it).
function options.clamp_steps(steps, seq_len)
  if steps == 0 or steps > seq_len then return seq_len end
  return steps
end

local function check_model(model, level)
  if kind(model) ~= "gptoss.model" then
    error(("getp: model must be a model from gptoss.load or gptoss.synthetic (got %s)"):format(kind(model)), level + 1)
  end
end

local function check_tokenizer(tokenizer, level)
  if tokenizer == nil then
    error("getp: tokenizer is required (gptoss.tokenizer(path))", level + 1)
  end
  if kind(tokenizer) ~= "gptoss.tokenizer" then
    error(("getp: tokenizer must be a tokenizer from gptoss.tokenizer (got %s)"):format(kind(tokenizer)), level + 1)
  end
end

-- The steps of a run: a non-negative integer (default the course's), clamped.
local function check_steps(steps, model, level)
  local seq_len = model.config.seq_len
  if steps == nil then steps = STEPS end
  if math.type(steps) ~= "integer" or steps < 0 then
    error(("getp: steps must be a non-negative integer, 0 meaning the model's seq_len %d (got %s)")
      :format(seq_len, tostring(steps)), level + 1)
  end
  return options.clamp_steps(steps, seq_len)
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
  local penalized = (params.presence_penalty or 0) ~= 0 or (params.frequency_penalty or 0) ~= 0
  if params.temperature == 0 and not penalized then return nil end -- greedy: no slot sampling
  params.seed = s.seed
  return params
end

-- The partition function and the name g:describe() gives it.
local function resolve_partition(p, level)
  if p == nil then p = "round_robin" end
  if type(p) == "function" then return p, "custom" end
  if type(p) == "string" and util.listed(partition.names, p) then return partition[p], p end
  error(("getp: partition must be one of %s or a function(requests, replicas) (got %s)")
    :format(table.concat(partition.names, ", "), type(p) == "string" and "'" .. p .. "'" or type(p)), level + 1)
end

local function resolve_scheduler(s, level)
  local names = table.concat(scheduler.names, ", ")
  if s == nil then s = "continuous" end
  if type(s) == "string" then
    if util.listed(scheduler.names, s) then return scheduler[s]() end
    error(("getp: unknown scheduler '%s' (known: %s, or an object with an admit method)"):format(s, names),
      level + 1)
  end
  local indexable = type(s) == "table" or type(s) == "userdata"
  if not indexable or type(s.admit) ~= "function" then
    error(("getp: scheduler must be %s or an object with an admit method (got %s)")
      :format(names, indexable and "one without admit" or type(s)), level + 1)
  end
  for _, hook in ipairs { "prefill_chunk", "on_finish" } do
    if s[hook] ~= nil and type(s[hook]) ~= "function" then
      error(("getp: scheduler.%s must be a function (got %s)"):format(hook, type(s[hook])), level + 1)
    end
  end
  return s
end

--- Raises unless prompts is a list of strings (getp.new's requests, g:run's prompts).
function options.check_prompts(prompts, level)
  if type(prompts) ~= "table" then
    error(("getp: requests must be a list of prompt strings (got %s)"):format(type(prompts)), level + 1)
  end
  for i = 1, #prompts do
    if type(prompts[i]) ~= "string" then
      error(("getp: request %d must be a string (got %s)"):format(i, type(prompts[i])), level + 1)
    end
  end
end

local function check_callbacks_and_flags(opts, level)
  for _, callback in ipairs { "on_progress", "on_step" } do
    if opts[callback] ~= nil and type(opts[callback]) ~= "function" then
      error(("getp: %s must be a function (got %s)"):format(callback, type(opts[callback])), level + 1)
    end
  end
  if opts.requests ~= nil then options.check_prompts(opts.requests, level + 1) end
  for _, flag in ipairs { "chat", "share_prefix" } do
    if opts[flag] ~= nil and type(opts[flag]) ~= "boolean" then
      error(("getp: %s must be a boolean (got %s)"):format(flag, type(opts[flag])), level + 1)
    end
  end
  local numbers = opts.request_numbers
  if numbers ~= nil then
    if type(numbers) ~= "table" then
      error(("getp: request_numbers must be a list of positive integers (got %s)"):format(type(numbers)), level + 1)
    end
    for i = 1, #numbers do
      if math.type(numbers[i]) ~= "integer" or numbers[i] < 1 then
        error(("getp: request_numbers[%d] must be a positive integer (got %s)"):format(i, tostring(numbers[i])),
          level + 1)
      end
    end
  end
end

-- The model: the one given, else the given replicas'; checked against the tokenizer.
local function model_of(opts, level)
  if opts.replicas ~= nil and (opts.devices ~= nil or opts.replica ~= nil) then
    error("getp: devices and replica options are for the replicas getp builds; give them or replicas, not both",
      level + 1)
  end
  if opts.replicas ~= nil then getp_replicas.check_given(opts.replicas, level + 1) end
  local model = opts.model
  if model == nil and opts.replicas ~= nil then model = opts.replicas[1].model end
  check_model(model, level + 1)
  if opts.tokenizer.vocab_size ~= model.config.vocab_size then
    error(("getp: the tokenizer has %d entries but the model's vocabulary has %d")
      :format(opts.tokenizer.vocab_size, model.config.vocab_size), level + 1)
  end
  return model
end

-- The replicas of the run, a copy of the list, and whether getp built them (and closes them).
local function replicas_of(opts, model, steps, share_prefix, level)
  local list, owned = opts.replicas, false
  if list ~= nil then
    getp_replicas.check_fit(list, model, steps, level + 1)
  else
    local devices = opts.devices or gptoss.default_devices()
    local n = opts.requests and #opts.requests
    list, owned = getp_replicas.build(devices, opts.replica, model, steps, n,
      share_prefix and opts.chat and n ~= nil and n >= 2, level + 1), true
  end
  return table.move(list, 1, #list, 1, {}), owned
end

--- The getp object of class `class` for the options opts; errors are raised at level
-- (as for error, counted from the caller).
function options.create(opts, level, class)
  if type(opts) ~= "table" then
    error(("getp: options must be a table (got %s)"):format(type(opts)), level)
  end
  check_known(opts, OPTIONS, "option", level)
  check_tokenizer(opts.tokenizer, level)
  local model = model_of(opts, level)
  local steps = check_steps(opts.steps, model, level)
  local sampling = check_sampling(opts.sampling, level)
  local part, part_name = resolve_partition(opts.partition, level)
  local sched = resolve_scheduler(opts.scheduler, level)
  check_callbacks_and_flags(opts, level)
  local share_prefix = opts.share_prefix ~= false
  local replicas, owned = replicas_of(opts, model, steps, share_prefix, level)
  return setmetatable({
    model = model, tokenizer = opts.tokenizer, replicas = replicas, owned = owned, steps = steps,
    sampling = sampling, partition = part, partition_name = part_name, scheduler = sched,
    on_progress = opts.on_progress, on_step = opts.on_step, requests = opts.requests, chat = opts.chat or false,
    share_prefix = share_prefix, request_numbers = opts.request_numbers, closed = false,
  }, class)
end

return options
