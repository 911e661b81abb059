--- gptoss.partition: which replica runs which request.
--
-- A partition is a function(requests, replicas) -> assignment:
--   requests[i]    {index = i, text = prompt text, tokens = prompt ids,
--                   limit = most ids it may generate (steps - #tokens, at least 0)}
--   replicas[k]    the replica objects (r.slots, r.device, ...)
--   assignment[k]  the list of request indices replica k runs, in the order its scheduler
--                  admits them; a missing or empty list leaves replica k idle.
-- Every request must appear exactly once; partition.check says otherwise.
local partition = {}

local function check_args(fn, requests, replicas)
  if type(requests) ~= "table" then
    error(("partition.%s: requests must be a list (got %s)"):format(fn, type(requests)), 3)
  end
  if type(replicas) ~= "table" or #replicas == 0 then
    error(("partition.%s: no replicas to assign requests to"):format(fn), 3)
  end
end

local function empty_lists(n)
  local assignment = {}
  for k = 1, n do assignment[k] = {} end
  return assignment
end

--- The built-in partitions' names, in definition order (below): what getp and the command
-- line accept as a partition's name.
partition.names = {}

-- Defines built-in partition `name`: partition[name](requests, replicas), its arguments
-- checked, returns assign's assignment.
local function builtin(name, assign)
  partition[name] = function(requests, replicas)
    check_args(name, requests, replicas)
    return assign(requests, replicas)
  end
  partition.names[#partition.names + 1] = name
end

--- Request i goes to replica (i - 1) % #replicas + 1.
builtin("round_robin", function(requests, replicas)
  local assignment = empty_lists(#replicas)
  for i = 1, #requests do
    local list = assignment[(i - 1) % #replicas + 1]
    list[#list + 1] = i
  end
  return assignment
end)

--- Contiguous runs of requests, of sizes that differ by one at most (the first
-- #requests % #replicas replicas take one more).
builtin("blocks", function(requests, replicas)
  local n, k = #requests, #replicas
  local assignment, first = {}, 1
  for r = 1, k do
    local size = n // k + (r <= n % k and 1 or 0)
    local list = {}
    for i = first, first + size - 1 do list[#list + 1] = i end
    assignment[r], first = list, first + size
  end
  return assignment
end)

--- Length-balanced: requests by expected work (request.limit, the decode steps it may
-- take), heaviest first (ties: lower index first), each to the replica with the least
-- work so far (ties: fewer requests, then the lower replica number); each replica then
-- runs its requests in index order.
builtin("balanced", function(requests, replicas)
  local order = {}
  for i = 1, #requests do order[i] = i end
  table.sort(order, function(a, b)
    local wa, wb = requests[a].limit, requests[b].limit
    if wa ~= wb then return wa > wb end
    return a < b
  end)
  local assignment, load = empty_lists(#replicas), {}
  for k = 1, #replicas do load[k] = 0 end
  for _, i in ipairs(order) do
    local best = 1
    for k = 2, #replicas do
      if load[k] < load[best] or (load[k] == load[best] and #assignment[k] < #assignment[best]) then
        best = k
      end
    end
    local list = assignment[best]
    list[#list + 1] = i
    load[best] = load[best] + requests[i].limit
  end
  for _, list in ipairs(assignment) do table.sort(list) end
  return assignment
end)

--- Raises a "partition:" error unless assignment gives each of n_requests requests to
-- exactly one of n_replicas replicas (missing lists count as empty).
function partition.check(assignment, n_requests, n_replicas)
  if type(assignment) ~= "table" then
    error(("partition: the partition must return a table of request lists, one per replica "
      .. "(got %s)"):format(type(assignment)), 0)
  end
  for k in pairs(assignment) do
    if math.type(k) ~= "integer" or k < 1 or k > n_replicas then
      error(("partition: assignment[%s] names no replica (there %s %d: 1..%d)")
        :format(tostring(k), n_replicas == 1 and "is" or "are", n_replicas, n_replicas), 0)
    end
  end
  local owner = {}
  for k = 1, n_replicas do
    local list = assignment[k]
    if list ~= nil and type(list) ~= "table" then
      error(("partition: assignment[%d] must be a list of request indices (got %s)"):format(k, type(list)), 0)
    end
    for j, i in ipairs(list or {}) do
      if math.type(i) ~= "integer" or i < 1 or i > n_requests then
        error(("partition: assignment[%d][%d] = %s is not a request index (1..%d)")
          :format(k, j, tostring(i), n_requests), 0)
      end
      if owner[i] then
        error(("partition: request %d is assigned twice (replica %d and replica %d)"):format(i, owner[i], k), 0)
      end
      owner[i] = k
    end
  end
  local missing, first = 0, nil
  for i = 1, n_requests do
    if not owner[i] then
      missing, first = missing + 1, first or i
    end
  end
  if missing > 0 then
    error(("partition: request %d is assigned to no replica (%d %s missing in all)")
      :format(first, missing, missing == 1 and "request" or "requests"), 0)
  end
end

return partition
