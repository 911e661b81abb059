-- gptoss.mpi and getp across MPI ranks (docs/getp.md#ranks-under-mpi): the module without a
-- launcher (loads; one rank; or, in a build without MPI, the error saying how to get it),
-- its packing of ids and lists, gptoss.getp_ranks's device shares and request shares, then
-- jobs of three ranks under mpirun on CPU replicas of the synthetic 7m model: outputs equal
-- to one process's byte for byte (greedy and sampled), the course's lines printed once, and
-- every way a rank fails (its model missing, its device bad, its step failing, an abort, a
-- collective given a wrong argument on one rank) ending the whole job within seconds with
-- one message naming the rank, and no output file. Without mpirun or MPI in the build, the
-- jobs are pending.
local mpi = require "gptoss.mpi"
local getp_ranks = require "gptoss.getp_ranks"
local partition = require "gptoss.partition"
local H = require "helpers"
local expect_error, tmp, cleanup, write_file, read_file = H.expect_error, H.tmp, H.cleanup, H.write_file, H.read_file

local TOKENIZER = H.TOKENIZER
local RANKS = 3

-- the repository's ./gptoss with the specs' interpreter and build folder, as words and
-- environment. Under make test-sanitized, without leak detection: Open MPI keeps what it
-- allocates to the end of the process (the sanitizers still watch every access).
local function gptoss_command(pending)
  local tree = H.TREE
  if not (tree.root and tree.build) then pending("gptoss was not loaded from a source tree and a build folder") end
  local asan = os.getenv("ASAN_OPTIONS")
  return tree.root .. "gptoss", { GPTOSS_LUA = tree.lua, GPTOSS_BUILD = tree.build,
    ASAN_OPTIONS = asan and (asan:gsub("detect_leaks=1", "detect_leaks=0")) }
end

-- marks the test pending without MPI in this build or without mpirun
local function need_mpirun(pending)
  if not mpi.available then pending("this build has no MPI (libopenmpi-dev was missing when it was built)") end
  if not os.execute("command -v mpirun >/dev/null 2>&1") then pending("mpirun is not installed (openmpi-bin)") end
end

-- Runs words under `mpirun -np RANKS` (ended after 60 s): exit code, stdout, stderr, seconds.
local function mpirun(pending, words, env)
  need_mpirun(pending)
  local cmd = { "timeout", "60", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", tostring(RANKS) }
  local preload = os.getenv("LD_PRELOAD")
  if H.SANITIZED and preload then -- mpirun is Open MPI's (its 4.1.4 reads freed memory): the ranks alone run sanitized
    cmd = { "timeout", "60", "env", "-u", "LD_PRELOAD", "mpirun", "--allow-run-as-root", "--oversubscribe",
      "-x", "LD_PRELOAD=" .. preload, "-np", tostring(RANKS) }
  end
  table.move(words, 1, #words, #cmd + 1, cmd)
  local t0 = require("gptoss").clock()
  local code, out, err = H.run_in(".", env, cmd)
  return code, out, err, require("gptoss").clock() - t0
end

-- The job ended by itself (not by the 60 s timeout) and soon, as a failure, with one line
-- of ours on stderr that matches pattern.
local function failed_soon(code, err, seconds, pattern)
  assert.are_not.equal(0, code, err)
  assert.are_not.equal(124, code, "the job hung: " .. err)
  assert.is_true(seconds < 30, ("the job took %.1f s"):format(seconds))
  local ours = {}
  for line in err:gmatch("[^\n]+") do
    if line:find("^gptoss run: ") or line:find("^mpi test: ") then ours[#ours + 1] = line end
  end
  assert.are.equal(1, #ours, err)
  assert.truthy(ours[1]:find(pattern), ours[1])
end

describe("gptoss.mpi without a launcher", function()
  after_each(cleanup)

  it("loads without starting MPI, and sees no launcher here", function()
    assert.are.equal("boolean", type(mpi.available))
    assert.is_nil(mpi.launched())
  end)

  it("is a job of one rank, or says how to get MPI in a build without it", function()
    local gptoss_program, env = gptoss_command(pending)
    local script = tmp() .. ".lua"
    write_file(script, [[
      local mpi = require "gptoss.mpi"
      if not mpi.available then
        local ok, err = pcall(mpi.rank)
        print(ok, err)
        return
      end
      print(mpi.launched(), mpi.rank(), mpi.size(), mpi.local_rank(), mpi.local_size())
      mpi.barrier()
      print(mpi.broadcast("b"), table.concat(mpi.gather("g"), ","), table.concat(mpi.allgather("a"), ","),
        mpi.scatter({ "s" }))
    ]])
    local code, out, err = H.run_in("/tmp", env, { gptoss_program, script })
    assert.are.equal(0, code, err)
    if mpi.available then
      assert.are.equal("nil\t0\t1\t0\t1\nb\tg\ta\ts\n", out)
    else
      assert.are.equal("false\tgptoss.mpi: this build has no MPI: install libopenmpi-dev (Debian) and rebuild (make)\n",
        out)
    end
  end)

  it("packs ids and lists of strings into strings and back", function()
    local ids = {}
    for i = 1, 10000 do ids[i] = (i * 7919) % 201088 - (i % 3 == 0 and 1 or 0) end
    ids[5] = -1
    ids[6] = 2147483647
    local packed = mpi.pack_ids(ids)
    assert.are.equal(4 * #ids, #packed)
    assert.are.same(ids, mpi.unpack_ids(packed))
    assert.are.same({}, mpi.unpack_ids(mpi.pack_ids {}))
    local list = { "", "a\0b", ("x"):rep(70000), packed }
    assert.are.same(list, mpi.unpack_list(mpi.pack_list(list)))
    assert.are.same({}, mpi.unpack_list(""))
    expect_error(function() mpi.pack_ids { 1, 2 ^ 31 } end, "mpi.pack_ids: ids[1..2] are not all 32-bit integers")
    expect_error(function() mpi.pack_ids { 1.5 } end, "mpi.pack_ids: ids[1..1] are not all 32-bit integers")
    expect_error(function() mpi.unpack_ids("abcde") end, "mpi.unpack_ids: 5 bytes are no whole number of ids")
    expect_error(function() mpi.unpack_list(mpi.pack_list { "abc" }:sub(1, 5)) end,
      "mpi.unpack_list: the string is cut short at byte 1")
    expect_error(function() mpi.abort(7) end, "mpi.abort: message must be a string (got number)")
  end)
end)

describe("gptoss.getp_ranks", function()
  it("gives each local rank a contiguous share of the host's GPUs", function()
    assert.are.same({ 1, 2, 3, 4 }, getp_ranks.local_devices({ 1, 2, 3, 4 }, 0, 1))
    assert.are.same({ 3, 4 }, getp_ranks.local_devices({ 1, 2, 3, 4 }, 1, 2))
    assert.are.same({ { 1, 2 }, { 3 }, { 4 } },
      { getp_ranks.local_devices({ 1, 2, 3, 4 }, 0, 3), getp_ranks.local_devices({ 1, 2, 3, 4 }, 1, 3),
        getp_ranks.local_devices({ 1, 2, 3, 4 }, 2, 3) })
    expect_error(function() getp_ranks.local_devices({}, 0, 1) end, "this host has no GPU (--device cpu runs on its CPUs)")
    expect_error(function() getp_ranks.local_devices({ 1, 2 }, 2, 3) end,
      "local rank 2 of the 3 on this host has no GPU of its own: the host shows 2 (give --device")
  end)

  it("shares requests out as one process would over every rank's devices", function()
    local requests = {}
    for i = 1, 10 do requests[i] = { index = i, limit = i % 4 == 0 and 100 or 10 } end
    -- ranks of 2, 1 and 1 devices: round robin over the four
    assert.are.same({ { 1, 2, 5, 6, 9, 10 }, { 3, 7 }, { 4, 8 } },
      getp_ranks.assign(requests, { { 1, 2 }, { "cpu" }, { 3 } }, partition.round_robin))
    -- by expected work: a rank of two devices takes twice the work of one of one
    local even = {}
    for i = 1, 9 do even[i] = { index = i, limit = 10 } end
    assert.are.same({ { 1, 2, 4, 5, 7, 8 }, { 3, 6, 9 } }, getp_ranks.assign(even, { { 1, 2 }, { 3 } }, partition.balanced))
    -- and the two heavy requests each on a device of their own, the light ones on the third
    assert.are.same({ { 4, 8 }, { 1, 2, 3, 5, 6, 7, 9, 10 } },
      getp_ranks.assign(requests, { { 1, 2 }, { 3 } }, partition.balanced))
    expect_error(function()
      getp_ranks.assign(requests, { { 1 } }, function() return { { 1, 1 } } end)
    end, "partition: request 1 is assigned twice")
  end)
end)

describe("getp under mpirun", function()
  after_each(cleanup)

  local function request_file(prompts)
    local p = tmp()
    write_file(p, #prompts .. "\n" .. table.concat(prompts, "\n") .. "\n")
    return p
  end
  local INPUT_PROMPTS = { "Hello", "Once upon a time", "The quick brown fox", "A", "Why is the sky blue?",
    "Write a short haiku about the ocean.", "ฉันรักทะเล 🌊 naïve" }

  local function getp_args(model, input, output, ...)
    return { "run", model, "--device", "cpu", "-m", "getp", "-i", input, "-o", output, "-n", "24",
      "-z", TOKENIZER, ... }
  end

  it("writes what one process writes, byte for byte, and prints the course's lines once", function()
    local program, env = gptoss_command(pending)
    local input = request_file(INPUT_PROMPTS)
    for _, extra in ipairs { {}, { "-t", "0.8", "-s", "5" } } do
      local one, ranks = tmp(), tmp()
      local code, _, err = H.run_in(".", env, { program, table.unpack(getp_args("7m", input, one, "--quiet",
        table.unpack(extra))) })
      assert.are.equal(0, code, err)
      local out
      code, out, err = mpirun(pending, { program, table.unpack(getp_args("7m", input, ranks, "--json",
        table.unpack(extra))) }, env)
      assert.are.equal(0, code, err)
      assert.are.equal(read_file(one), read_file(ranks))
      local _, n_elapsed = out:gsub("\nelapsed time%(s%): [%d.]+, achieved throughput TPS %(tok/s%): [%d.]+\n", "")
      assert.are.equal(1, n_elapsed, out)
      assert.truthy(out:find("\nNum requests: 7\n", 1, true), out)
      local figures = require("dkjson").decode(out:match("\n(%b{})\n$"))
      assert.are.same({ RANKS, { "cpu", "cpu", "cpu" }, "balanced", 7 },
        { figures.ranks, figures.devices, figures.partition, figures.requests })
      for r = 0, RANKS - 1 do -- each rank's replicas, named by rank
        assert.truthy(err:find(("gptoss run: rank %d %%([^)]*%%): getp: 1 replica: cpu"):format(r)), err)
      end
    end
  end)

  -- a shell command line under which rank `rank` runs ./gptoss with odd_words, the others with words
  local function one_rank_differs(program, rank, odd_words, words)
    local function line(list)
      local q = { H.shell_quote(program) }
      for i, w in ipairs(list) do q[i + 1] = H.shell_quote(w) end
      return table.concat(q, " ")
    end
    return ('if [ "$OMPI_COMM_WORLD_RANK" = %d ]; then exec %s; else exec %s; fi'):format(rank, line(odd_words),
      line(words))
  end

  it("ends the job with one message when a rank cannot start or its steps fail, writing no output", function()
    local program, env = gptoss_command(pending)
    local input, output = request_file(INPUT_PROMPTS), tmp()
    os.remove(output)
    local broken = tmp()
    H.nan_row_model(require("gptoss").synthetic("7m"), 5):save(broken)
    for _, case in ipairs {
      -- rank 1's host lacks the model file
      { 1, { "/nonexistent/gpt.bin" },
        "^gptoss run: rank 1 of 3 %(.*%): load: cannot open model file '/nonexistent/gpt%.bin': No such file" },
      -- rank 2 is given a GPU this host does not have: its replica cannot be built
      { 2, { "7m", "--device", "99" }, "^gptoss run: rank 2 of 3 %(.*%): getp: building the replica on gpu 99: " },
      -- rank 1's model draws NaN logits: its steps fail mid-run
      { 1, { broken, "-t", "1" }, "^gptoss run: rank 1 of 3 %(.*%): getp: replica 1 %(cpu%): step:tokens: .*NaN" },
    } do
      local odd = getp_args(case[2][1], input, output, "--quiet", table.unpack(case[2], 2))
      local script = one_rank_differs(program, case[1], odd, getp_args("7m", input, output, "--quiet"))
      local code, _, err, seconds = mpirun(pending, { "sh", "-c", script }, env)
      failed_soon(code, err, seconds, case[3])
      assert.is_nil(io.open(output), "an output file was left")
      assert.is_nil(io.open(output .. ".tmp"), "a partial output file was left")
    end
    -- every rank failing: the first named, the others counted
    local code, _, err, seconds = mpirun(pending, { program, table.unpack(getp_args("/nonexistent/gpt.bin", input,
      output, "--quiet")) }, env)
    failed_soon(code, err, seconds, "^gptoss run: rank 0 of 3 %(.*%): load: cannot open model file "
      .. "'/nonexistent/gpt%.bin': [^\n]* %(ranks 1, 2 failed too%)$")
  end)

  it("compares ranks with one process on the same requests (examples/bench_getp_mpi.sh, on CPU replicas)", function()
    local _, env = gptoss_command(pending)
    need_mpirun(pending)
    env.GPTOSS_TOKENIZER = TOKENIZER
    local code, out, err = H.run_in(".", env, { H.TREE.root .. "examples/bench_getp_mpi.sh", "7m", "6", "24", "cpu",
      tostring(RANKS), "--weights", "fp32" })
    assert.are.equal(0, code, err)
    assert.truthy(out:find("\none%-process: [%d.]+ tok/s, output identical to one process's\n"), out)
    assert.truthy(out:find(("\nranks%%-%d: [%%d.]+ tok/s, output identical to one process's\n$"):format(RANKS)), out)
  end)

  it("says once what is wrong with the arguments", function()
    local program, env = gptoss_command(pending)
    local code, _, err, seconds = mpirun(pending, { program, "run", "7m", "-m", "getp", "-i", "in.txt" }, env)
    failed_soon(code, err, seconds, "^gptoss run: %-m getp needs %-i <request file> and %-o <output file>$")
  end)

  it("ends every rank when one aborts, and raises on every rank when one gives a collective a wrong argument",
    function()
      local program, env = gptoss_command(pending)
      local script = tmp() .. ".lua"
      write_file(script, [[
        local mpi = require "gptoss.mpi"
        local rank = mpi.rank()
        for _, case in ipairs {
          function() return mpi.gather(rank == 1 and {} or "x") end,
          function() return mpi.scatter(rank == 0 and { "a", "b" } or nil) end,
          function() return mpi.broadcast(rank == 0 and 5 or "x") end,
        } do
          local ok, err = pcall(case)
          io.stdout:write(rank, " ", tostring(ok), " ", (err:gsub("^[^\n]-:%d+: ", "")), "\n")
        end
        mpi.barrier()
        if rank == 1 then mpi.abort("mpi test: rank 1 gives up", 3) end
        mpi.barrier() -- the others wait here for rank 1, which never comes
        print("passed the barrier")
      ]])
      local code, out, err, seconds = mpirun(pending, { program, script }, env)
      failed_soon(code, err, seconds, "^mpi test: rank 1 gives up$")
      for rank = 0, RANKS - 1 do
        for _, message in ipairs { "mpi.gather: rank 1 gave no string", "mpi.scatter: rank 0's list must hold 3 strings, "
          .. "one a rank", "mpi.broadcast: rank 0 gave no string" } do
          assert.truthy(out:find(("%d false %s\n"):format(rank, message), 1, true), out)
        end
      end
      assert.is_nil(out:find("passed the barrier", 1, true), out)
    end)
end)
