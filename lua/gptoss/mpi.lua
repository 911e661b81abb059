--- gptoss.mpi: the ranks of a job started by mpirun or srun (Open MPI), for running getp on
-- several processes and hosts (docs/getp.md#ranks-under-mpi).
--
-- Ranks count from 0, as MPI's do. MPI starts on the first call that needs it (requiring
-- this module starts nothing) and is finalized when the process exits. Run without a
-- launcher, the process is a job of one rank. A build without MPI (no libopenmpi-dev when
-- it was built) loads this module too: mpi.available is false and every call but
-- mpi.launched and the packing functions raises saying how to get MPI.
--
--   mpi.available            whether this build has MPI
--   mpi.launched()           the rank a launcher gave this process, from its environment
--                            (no MPI call), or nil when none started it
--   mpi.rank(), mpi.size()   this process's rank, the job's ranks
--   mpi.local_rank(), mpi.local_size()   the same among the ranks on this host
--   mpi.host()               this host's name, as MPI gives it
--   mpi.barrier()
--   mpi.broadcast(s [, root = 0])  root's string, on every rank (the others' s is not read)
--   mpi.scatter(list [, root = 0]) rank r's string of root's list (list[r + 1]; one a rank)
--   mpi.gather(s [, root = 0])     on root, every rank's string (rank r's at r + 1); nil elsewhere
--   mpi.allgather(s)               that list on every rank
--   mpi.abort(message [, code = 1])  message on stderr, then every rank of the job ends
--   mpi.finalize()           ends MPI before the exit does (no MPI call may follow)
--   mpi.pack_ids(ids), mpi.unpack_ids(s)       a list of token ids as a string and back
--   mpi.pack_list(strings), mpi.unpack_list(s) a list of strings as one string and back
-- A collective's strings are bytes, up to 2^31 - 1 of them all ranks together; an argument
-- one rank gets wrong is an error on every rank, so that none waits for ever.
local core = require "gptoss.core"

local mpi = { available = core.mpi_available }

-- Where launchers put the rank: Open MPI's mpirun, PMIx (srun --mpi=pmix), PMI (srun
-- --mpi=pmi2, MPICH's launchers).
local LAUNCHER_RANK = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK" }

function mpi.launched()
  for _, name in ipairs(LAUNCHER_RANK) do
    local rank = math.tointeger(tonumber(os.getenv(name) or ""))
    if rank then return rank end
  end
  return nil
end

mpi.rank, mpi.size = core.mpi_rank, core.mpi_size
mpi.local_rank, mpi.local_size = core.mpi_local_rank, core.mpi_local_size
mpi.host, mpi.barrier, mpi.finalize, mpi.abort = core.mpi_host, core.mpi_barrier, core.mpi_finalize, core.mpi_abort
mpi.broadcast, mpi.scatter = core.mpi_broadcast, core.mpi_scatter
mpi.gather, mpi.allgather = core.mpi_gather, core.mpi_allgather

-- ids packed this many at a time (table.unpack's results are bounded by the C stack)
local PACK_CHUNK = 4096

--- ids (a list of integers that fit 32 bits) as a string of little-endian int32s.
function mpi.pack_ids(ids)
  local parts = {}
  for first = 1, #ids, PACK_CHUNK do
    local last = math.min(#ids, first + PACK_CHUNK - 1)
    local ok, packed = pcall(string.pack, "<" .. ("i4"):rep(last - first + 1), table.unpack(ids, first, last))
    if not ok then
      error(("mpi.pack_ids: ids[%d..%d] are not all 32-bit integers (%s)"):format(first, last, packed), 2)
    end
    parts[#parts + 1] = packed
  end
  return table.concat(parts)
end

--- The ids of a string from pack_ids.
function mpi.unpack_ids(s)
  if #s % 4 ~= 0 then error(("mpi.unpack_ids: %d bytes are no whole number of ids"):format(#s), 2) end
  local ids = {}
  for first = 1, #s // 4, PACK_CHUNK do
    local n = math.min(#s // 4 - first + 1, PACK_CHUNK)
    table.move({ string.unpack("<" .. ("i4"):rep(n), s, 4 * first - 3) }, 1, n, first, ids)
  end
  return ids
end

--- strings as one string: each one's length (4 bytes), then its bytes.
function mpi.pack_list(strings)
  local parts = {}
  for i, s in ipairs(strings) do parts[i] = string.pack("<s4", s) end
  return table.concat(parts)
end

--- The strings of a string from pack_list.
function mpi.unpack_list(s)
  local list, at = {}, 1
  while at <= #s do
    local ok, item, next_at = pcall(string.unpack, "<s4", s, at)
    if not ok then error(("mpi.unpack_list: the string is cut short at byte %d"):format(at), 2) end
    list[#list + 1], at = item, next_at
  end
  return list
end

return mpi
