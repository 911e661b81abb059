--- gptoss.getp_ranks: the course's getp run by one process, or by the ranks of an MPI job
-- (docs/getp.md#ranks-under-mpi), behind one interface for the command line
-- (examples/run.lua). A job is one of
--   getp_ranks.one_process()   this process alone, as getp runs by itself
--   getp_ranks.new(mpi)        the ranks of the job gptoss.mpi sees (starts MPI)
-- and offers:
--   job.prints               whether this process prints the run's lines (rank 0)
--   job:agree(fn, ...)       fn(...)'s results; across ranks, fn runs on every rank and every
--                            rank learns whether it failed anywhere: if so, each raises the same
--                            failure (getp_ranks.is_failure) naming the first rank that failed
--   job:devices(given)       the devices this process runs: given, else the host's GPUs
--                            (across ranks the local rank's share of them), else the CPU
--   job:share(prompts, run, devices, partition)   what this process runs: {prompts =,
--                            numbers = (their request numbers, nil for all), seed =, partition =};
--                            run = {model =, tokenizer =, steps =, chat =, seed =}
--   job:timed(fn)            ms, fn()'s result: across ranks, from a barrier to the agreement after
--   job:collect(result)      the printer's result of all ranks' g:run results, outputs in request order
--   job:gather(s)            on the printer, every process's string; nil elsewhere
--   job:named(k, text)       process k's text, each line prefixed with its rank across ranks
--   job.devices_all          the devices of the whole job, in rank order (after share)
--   job.rank, job.size, job:label(r)   across ranks only: this rank, the job's ranks, and
--                            "rank r of N (host)" as messages name rank r
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local getp = require "gptoss.getp"
local partition = require "gptoss.partition"

local getp_ranks = {}

-- What agree raises on every rank when fn failed on some; tostring gives its message.
local Failure = { __tostring = function(f) return f.message end }

function getp_ranks.is_failure(err)
  return getmetatable(err) == Failure
end

--- The devices of local rank `local_rank` (from 0) of `local_size` on a host whose GPUs are
-- `gpus` (their numbers): contiguous runs, of sizes that differ by one at most.
function getp_ranks.local_devices(gpus, local_rank, local_size)
  if #gpus == 0 then
    error("this host has no GPU (--device cpu runs on its CPUs)", 0)
  end
  if local_size > #gpus then
    error(("local rank %d of the %d on this host has no GPU of its own: the host shows %d (give --device, "
      .. "e.g. --device 0 where each rank sees its own GPU alone)"):format(local_rank, local_size, #gpus), 0)
  end
  local ranks = {}
  for k = 1, local_size do ranks[k] = k end
  local mine = {}
  for j, i in ipairs(partition.blocks(gpus, ranks)[local_rank + 1]) do mine[j] = gpus[i] end
  return mine
end

--- The requests of each rank: partition_fn (gptoss.partition's kind) over the devices of
-- every rank (rank_devices[r + 1] those of rank r), as one process would share them out
-- over all of them; a rank's share is its devices' requests, in index order.
function getp_ranks.assign(requests, rank_devices, partition_fn)
  local devices, shares = {}, {}
  for r, list in ipairs(rank_devices) do
    shares[r] = {}
    for _, device in ipairs(list) do devices[#devices + 1] = { rank = r, device = device } end
  end
  local assignment = partition_fn(requests, devices)
  partition.check(assignment, #requests, #devices)
  for k, list in pairs(assignment) do
    local share = shares[devices[k].rank]
    table.move(list, 1, #list, #share + 1, share)
  end
  for _, share in ipairs(shares) do table.sort(share) end
  return shares
end

-- ---- one process ----

local One = {}
One.__index = One

function getp_ranks.one_process()
  return setmetatable({ prints = true }, One)
end

function One.agree(_, fn, ...) return fn(...) end

function One:devices(given)
  self.devices_all = given or gptoss.default_devices()
  return self.devices_all
end

function One.share(_, prompts, run, _, part)
  return { prompts = prompts, seed = run.seed, partition = part }
end

function One.timed(_, fn)
  local t0 = gptoss.realtime_ms()
  local result = fn()
  return gptoss.realtime_ms() - t0, result
end

function One.collect(_, result) return result end

function One.gather(_, s) return { s } end

function One.named(_, _, text) return text end

-- ---- the ranks of an MPI job ----

local Ranks = {}
Ranks.__index = Ranks

function getp_ranks.new(mpi)
  local job = setmetatable({ mpi = mpi, rank = mpi.rank(), size = mpi.size(), local_rank = mpi.local_rank(),
    local_size = mpi.local_size() }, Ranks)
  job.prints = job.rank == 0
  job.hosts = mpi.allgather(mpi.host()) -- nothing can fail between MPI's start and this
  return job
end

function Ranks:label(r)
  return ("rank %d of %d (%s)"):format(r, self.size, self.hosts[r + 1])
end

function Ranks:agree(fn, ...)
  local results = table.pack(pcall(fn, ...))
  local all = self.mpi.allgather(results[1] and "" or "\0" .. cmdline.message(results[2]))
  local failed = {}
  for r, status in ipairs(all) do
    if #status > 0 then failed[#failed + 1] = r - 1 end
  end
  if #failed > 0 then
    local first = failed[1]
    local message = self:label(first) .. ": " .. all[first + 1]:sub(2)
    if #failed > 1 then
      message = ("%s (%s %s failed too)"):format(message, #failed == 2 and "rank" or "ranks",
        table.concat(failed, ", ", 2))
    end
    error(setmetatable({ message = message }, Failure), 0)
  end
  return table.unpack(results, 2, results.n)
end

function Ranks:devices(given)
  if given then return given end
  local gpus = {}
  for i, d in ipairs(gptoss.devices()) do gpus[i] = d.id end
  return getp_ranks.local_devices(gpus, self.local_rank, self.local_size)
end

-- A rank's share as rank 0 sends it: the seed, the request numbers, the prompts.
local function pack_share(mpi, seed, numbers, prompts)
  return string.pack("<i8", seed) .. mpi.pack_list { mpi.pack_ids(numbers), mpi.pack_list(prompts) }
end

--- Rank 0 reads the prompts and partitions them (run: {model =, tokenizer =, steps =,
-- chat =, seed =}; partition: a name of gptoss.partition.names, default "balanced": by the
-- requests' expected work) over every rank's devices; each rank gets its share and rank
-- 0's seed (a seed chosen from the time differs from rank to rank).
function Ranks:share(prompts, run, devices, part)
  local mpi = self.mpi
  local names = {}
  for k, d in ipairs(devices) do names[k] = tostring(d) end
  local rank_devices = {}
  self.devices_all = {}
  for r, packed in ipairs(mpi.allgather(mpi.pack_list(names))) do
    rank_devices[r] = mpi.unpack_list(packed)
    for k, name in ipairs(rank_devices[r]) do
      rank_devices[r][k] = math.tointeger(tonumber(name)) or name
      self.devices_all[#self.devices_all + 1] = rank_devices[r][k]
    end
  end
  part = part or "balanced"
  local messages = self:agree(function()
    if self.rank ~= 0 then return nil end
    local shares = getp_ranks.assign(getp.requests_of(run, prompts), rank_devices, partition[part])
    local list = {}
    for r, share in ipairs(shares) do
      local texts = {}
      for j, i in ipairs(share) do texts[j] = prompts[i] end
      list[r] = pack_share(mpi, run.seed, share, texts)
    end
    self.shares = shares
    return list
  end)
  local packed = mpi.scatter(messages, 0)
  local seed = string.unpack("<i8", packed)
  local parts = mpi.unpack_list(packed:sub(9))
  return { prompts = mpi.unpack_list(parts[2]), numbers = mpi.unpack_ids(parts[1]), seed = seed, partition = part }
end

function Ranks:timed(fn)
  self.mpi.barrier()
  local t0 = gptoss.realtime_ms()
  local result = self:agree(fn) -- its gather of every rank's status is the barrier after
  return gptoss.realtime_ms() - t0, result
end

function Ranks:collect(result)
  local mpi = self.mpi
  local outputs = {}
  for j, ids in ipairs(result.outputs) do outputs[j] = mpi.pack_ids(ids) end
  local all = mpi.gather(string.pack("<i8i8i8", result.tokens, result.steps, result.prefill_saved)
    .. mpi.pack_list(outputs), 0)
  if not all then return nil end
  local merged = { outputs = {}, tokens = 0, steps = 0, prefill_saved = 0 }
  for r, packed in ipairs(all) do
    local tokens, steps, prefill_saved = string.unpack("<i8i8i8", packed)
    merged.tokens, merged.steps = merged.tokens + tokens, merged.steps + steps
    merged.prefill_saved = merged.prefill_saved + prefill_saved
    for j, ids in ipairs(mpi.unpack_list(packed:sub(25))) do merged.outputs[self.shares[r][j]] = mpi.unpack_ids(ids) end
  end
  return merged
end

function Ranks:gather(s) return self.mpi.gather(s, 0) end

function Ranks:named(k, text)
  local prefix = ("rank %d (%s): "):format(k - 1, self.hosts[k])
  return (text:gsub("[^\n]+", function(line) return prefix .. line end))
end

return getp_ranks
