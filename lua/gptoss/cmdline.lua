--- gptoss.cmdline: what every command's command line shares (the gptoss program's commands,
-- examples/*.lua and the course's `gptoss run`, whose own syntax is gptoss.cli's): argparse
-- converters whose messages name the flag, how a command exits on an error or a usage
-- mistake, the error message without Lua's position, the benchmarks' prompt ids, and the
-- report lines of a replica's memory and per-kernel profile.
local gptoss = require "gptoss"

local cmdline = {}

--- An argparse converter for an integer flag (at least min and at most max when given): the
-- integer, or nil and a message naming the flag.
function cmdline.integer(flag, min, max)
  local what = max and ("an integer in %d..%d"):format(min, max) or min and ("an integer >= %d"):format(min)
    or "an integer"
  return function(s)
    local v = math.tointeger(tonumber(s))
    if v == nil or (min and v < min) or (max and v > max) then
      return nil, ("%s: '%s' is not %s"):format(flag, s, what)
    end
    return v
  end
end

--- An argparse converter for a number flag (in [min, max] when given): the number, or nil and
-- a message naming the flag.
function cmdline.number(flag, min, max)
  local what = min and ("a number in [%g, %g]"):format(min, max) or "a number"
  return function(s)
    local v = tonumber(s)
    if v == nil or v ~= v or (min and (v < min or v > max)) then
      return nil, ("%s: '%s' is not %s"):format(flag, s, what)
    end
    return v
  end
end

--- The benchmarks' prompt id of slot s at position p (bench_gpu, bench_golden, bench_prefill):
-- spread over the vocabulary, different for every slot, no tokenizer needed.
function cmdline.bench_id(s, p, vocab)
  return (s * 7919 + p * 104729) % vocab
end

--- An argparse converter for a comma-separated list of integers >= min ("1,8,32"): the
-- list, or nil and a message naming the flag, what the integers are and an example.
function cmdline.integer_list(flag, min, what, example)
  return function(s)
    local list = {}
    for item in (s .. ","):gmatch("([^,]*),") do
      local v = math.tointeger(tonumber(item))
      if v == nil or v < min then
        return nil, ("%s: '%s' is not a list of %s >= %d (\"%s\")"):format(flag, s, what, min, example)
      end
      list[#list + 1] = v
    end
    return list
  end
end

--- An argparse converter for tolerances and the like: the number, or nil and a message.
function cmdline.non_negative(s)
  local v = tonumber(s)
  if v == nil or v ~= v or v < 0 then return nil, ("'%s' is not a non-negative number"):format(s) end
  return v
end

--- Writes msg on stderr and ends the script with the given exit status.
function cmdline.exit_with(status, msg)
  io.stderr:write(msg, "\n")
  os.exit(status)
end

--- Ends a script on a usage error: "NAME: message" and where the usage is, on stderr
-- (the usage itself only on --help), then the exit status.
function cmdline.usage_exit(name, msg, status)
  io.stdout:flush()
  io.stderr:write(("%s: %s\nTry '%s --help' for usage.\n"):format(name, msg, name))
  os.exit(status)
end

--- Raises "FLAG: cannot write 'PATH': reason" unless the command will be able to write path, so
-- that a mistyped output path fails before any work rather than after it. An existing file must
-- open for update, which leaves its bytes as they are until the command writes it; else the
-- file is created and removed again (its folder must exist and take it). A named pipe or a
-- device there is written as it is, unopened here (opening a pipe would wait for a reader).
function cmdline.check_writable(flag, path)
  local regular, why = gptoss.regular_file(path)
  if regular == false and not why:find("is a directory", 1, true) then return end
  local exists = regular ~= nil
  local f, msg = io.open(path, exists and "r+b" or "wb")
  if not f then
    local reason = tostring(msg):gsub("^" .. path:gsub("%p", "%%%0") .. ": ", "")
    error(("%s: cannot write '%s': %s"):format(flag, path, reason), 0)
  end
  f:close()
  if not exists then os.remove(path) end
end

-- r.memory's categories in report order: the weights, each format's share, the rest
local MEMORY_ORDER = { "weights" }
for _, name in ipairs(gptoss.weight_format_names()) do MEMORY_ORDER[#MEMORY_ORDER + 1] = "weights_" .. name end
table.move({ "kv", "scratch", "total" }, 1, 3, #MEMORY_ORDER + 1, MEMORY_ORDER)

-- The Lua API's errors that a command's user meets, in the API's words (which the API keeps),
-- and the same in the command line's: the options the user gives rather than the API's fields.
local USER_TERMS = {
  { "session:ask: the conversation is (%d+) tokens with no older turn left to drop, the replica's context (%d+)",
    "your message is %1 tokens; --ctx is %2" },
  { "[%w_]+: device (%-?%d+) is out of range 0%.%.(%d+)", "--device %1: this machine's GPUs are 0..%2" },
  { "[%w_]+: device (%-?%d+): no GPU is available %(gptoss%.devices%(%) is empty%)",
    "--device %1: this build sees no GPU here (--device cpu runs on the CPU)" },
}

--- An error message as a command gives it: without the "file:line: " Lua put in front of it,
-- and a Lua API error of USER_TERMS in the command line's terms.
function cmdline.message(err)
  local msg = tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")
  for _, terms in ipairs(USER_TERMS) do msg = msg:gsub(terms[1], terms[2]) end
  return msg
end

--- "memory, NAME: weights 12.0 MiB, kv 4.0 MiB, ..." from r.memory (bytes by category).
function cmdline.memory_line(name, memory)
  local keys, listed = {}, {}
  for _, k in ipairs(MEMORY_ORDER) do
    if memory[k] then keys[#keys + 1], listed[k] = k, true end
  end
  local others = {}
  for k in pairs(memory) do
    if not listed[k] then others[#others + 1] = k end
  end
  table.sort(others)
  table.move(others, 1, #others, #keys + 1, keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = ("%s %.1f MiB"):format(k, memory[k] / 2 ^ 20) end
  return ("memory, %s: %s"):format(name, table.concat(parts, ", "))
end

--- The per-kernel table of one replica from r:profile() rows {label=, seconds=, calls=},
-- slowest first, with each kernel's share of wall (the inference's seconds). A list of lines;
-- rows nil (a CPU replica, which has no per-kernel timing) gives the one line saying so.
function cmdline.profile_lines(name, rows, wall)
  if rows == nil then return { ("profile, %s: per-kernel timing is for GPU replicas"):format(name) } end
  local sorted = table.move(rows, 1, #rows, 1, {})
  table.sort(sorted, function(x, y) return x.seconds > y.seconds end)
  local total_label = "(all kernels)"
  local width = #total_label
  for _, r in ipairs(sorted) do width = math.max(width, #r.label) end
  local row = "  %-" .. width .. "s %10s %9s %10s %7s"
  local lines = {
    ("profile, %s: %d kernels, %.3f s of inference"):format(name, #sorted, wall),
    row:format("kernel", "total s", "calls", "avg ms", "% wall"),
  }
  local total, calls = 0, 0
  local function line(label, seconds, n)
    return row:format(label, ("%.4f"):format(seconds), n, ("%.4f"):format(n > 0 and 1000 * seconds / n or 0),
      ("%.1f"):format(wall > 0 and 100 * seconds / wall or 0))
  end
  for _, r in ipairs(sorted) do
    lines[#lines + 1] = line(r.label, r.seconds, r.calls)
    total, calls = total + r.seconds, calls + r.calls
  end
  lines[#lines + 1] = line(total_label, total, calls)
  return lines
end

return cmdline
