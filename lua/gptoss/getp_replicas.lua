--- gptoss.getp_replicas (internal, gptoss.getp's): the replicas a getp run steps. The ones
-- getp builds, one a device, with the slots and rows chosen as getp's header ("Slots") says;
-- the ones a caller gives, checked; and the bounds of a step on either.
local gptoss = require "gptoss"
local util = require "gptoss.util"

local replicas = {}

local CPU_SLOTS, CPU_ROWS = 16, 64

-- The replica options getp passes on to the replicas it builds.
local REPLICA_OPTIONS = { "weights", "kv", "slots", "threads", "rows", "chunk", "on_progress" }

-- Rows a GPU step carries beyond one per slot, for prefill: a fraction of the slots, at least
-- PREFILL_ROWS_MIN (getp's header, "Slots", says why) ...
local PREFILL_ROWS, PREFILL_ROWS_MIN = 0.25, 128
-- ... and STEP_ROWS_MIN in all, where the experts' GEMMs read each expert's weights once for
-- a few hundred rows (docs/getp.md#slots-and-rows has the measurement) ...
local STEP_ROWS_MIN = 2048

-- ... and never fewer than the rows one slot may feed in a step (chunk, when given).
local function gpu_rows(slots, chunk)
  return math.max(slots + math.max(PREFILL_ROWS_MIN, math.floor(slots * PREFILL_ROWS)), STEP_ROWS_MIN, chunk or 0)
end

--- The most slots a GPU replica of the model can hold for steps positions when `free` bytes
-- of device memory are free: the largest count, at most n_requests (when known) and at
-- least 1, whose memory plan (model:replica_bytes, what the replica itself allocates) and
-- headroom fit. The rows follow the slots as getp chooses them (at least opts.chunk) unless
-- opts.rows is given.
-- opts: weights, kv, rows, chunk.
function replicas.gpu_slots(free, model, steps, n_requests, opts)
  opts = opts or {}
  -- a count the replica would refuse (past its limits, or options it does not take) does
  -- not fit either: the replica itself then says why
  local function fits(slots)
    local ok, plan = pcall(model.replica_bytes, model, { device = 0, slots = slots, ctx = steps,
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
  if not gptoss.device(device) then return 0 end
  return (gptoss.device_memory(device))
end

--- "cpu" or "gpu N": how getp's messages and descriptions name a replica's device.
function replicas.device_name(device)
  return device == "cpu" and "cpu" or ("gpu " .. tostring(device))
end

--- Closes every replica of the list.
function replicas.close_all(list)
  for _, r in ipairs(list) do r:close() end
end

--- A step's bounds on a replica, rows and chunk: GPU replicas say theirs; the CPU has none
-- of its own.
function replicas.bounds(r)
  if r.device == "cpu" then
    local rows = math.max(CPU_ROWS, r.slots)
    return rows, rows
  end
  return r.rows, r.chunk
end

--- Raises unless the replicas given by the caller are open replica objects, each once.
function replicas.check_given(list, level)
  if type(list) ~= "table" or #list == 0 then
    error("getp: no replicas (replicas must be a non-empty list of replica objects)", level + 1)
  end
  for k, r in ipairs(list) do
    if util.kind(r) ~= "gptoss.replica" then
      error(("getp: replicas[%d] must be a replica (got %s)"):format(k, util.kind(r)), level + 1)
    end
    if r.closed then error(("getp: replicas[%d] is closed"):format(k), level + 1) end
    -- one replica twice would be handed two shares of the requests on the same slots
    for j = 1, k - 1 do
      if rawequal(list[j], r) then error(("getp: replicas[%d] is replicas[%d] again"):format(k, j), level + 1) end
    end
  end
end

--- ... and able to run the model for steps.
function replicas.check_fit(list, model, steps, level)
  for k, r in ipairs(list) do
    if not rawequal(r.model, model) then
      error(("getp: replicas[%d] holds another model than the one given"):format(k), level + 1)
    end
    if r.ctx < steps - 1 then
      error(("getp: replicas[%d] holds %d positions a slot but steps = %d feeds positions up to %d "
        .. "(ctx >= %d)"):format(k, r.ctx, steps, steps - 2, steps - 1), level + 1)
    end
  end
end

-- The options of the replica getp builds on device: the caller's, ctx = steps, and the
-- slots and rows getp chooses where the caller gave none. n_requests, extra_slot and
-- n_devices as for replicas.build.
local function options_for(device, options, model, steps, n_requests, extra_slot, n_devices)
  local ropts = { device = device, ctx = steps }
  for _, name in ipairs(REPLICA_OPTIONS) do ropts[name] = options[name] end
  local rows_chosen = ropts.rows == nil and device ~= "cpu"
  if ropts.slots == nil then
    local extra = extra_slot and 1 or 0
    ropts.slots = device == "cpu" and math.max(1, math.min(n_requests or CPU_SLOTS, CPU_SLOTS)) + extra
        or replicas.gpu_slots(free_memory(device), model, steps,
          n_requests and -(-n_requests // n_devices) + extra, ropts) -- a replica's share of the requests
  end
  if rows_chosen then ropts.rows = gpu_rows(ropts.slots, ropts.chunk) end
  return ropts
end

--- One replica per device, with the options given; on a failure the ones built are closed.
-- n_requests: the request count when known; extra_slot: a slot more than the requests
-- need, for a shared prefix.
function replicas.build(devices, options, model, steps, n_requests, extra_slot, level)
  if type(devices) ~= "table" or #devices == 0 then
    error("getp: no replicas (devices must be a non-empty list of \"cpu\" or GPU numbers)", level + 1)
  end
  if options ~= nil and type(options) ~= "table" then
    error(("getp: replica must be a table of replica options (got %s)"):format(type(options)), level + 1)
  end
  options = options or {}
  util.check_known("getp", options, REPLICA_OPTIONS, "replica option", level + 1)
  local built = {}
  for k, device in ipairs(devices) do
    if device ~= "cpu" and math.type(device) ~= "integer" then
      replicas.close_all(built)
      error(("getp: devices[%d] must be \"cpu\" or a GPU number (got %s)"):format(k, tostring(device)), level + 1)
    end
    local ropts = options_for(device, options, model, steps, n_requests, extra_slot, #devices)
    local ok, r = pcall(model.replica, model, ropts)
    if not ok then
      replicas.close_all(built)
      error(("getp: building the replica on %s: %s"):format(replicas.device_name(device), util.bare(r)), level + 1)
    end
    built[k] = r
  end
  return built
end

return replicas
