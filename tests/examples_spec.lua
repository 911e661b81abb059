-- The example scripts on bad input (gptoss.script), each as a child process: a usage error
-- is one line first, the script's name and the message naming the option, then the usage;
-- bad input found while running (a missing file, an unknown model shape) is one line, with
-- no usage; either way no traceback, no Lua source position, no prefix said twice, nothing
-- on stdout, and the exit status the script documents (parity.lua: 2, the others 1).
local H = require "helpers"

-- script, its exit status on bad input, a usage error {args, first line}, a bad input found
-- while running {args, first line} where it reads any
local CASES = {
  { "demo.lua", 1,
    { { "--temperature", "abc" }, "demo.lua: --temperature: 'abc' is not a non-negative number" },
    { { "missing/model.bin" }, "demo.lua: load: cannot open model file 'missing/model.bin': " } },
  { "parity.lua", 2,
    { { "7m", "--tokens", "1", "--rtol=-1" }, "parity.lua: --rtol: '-1' is not a non-negative number" },
    { { "9m", "--tokens", "1" }, "parity.lua: '9m' is neither a file, a directory nor a synthetic shape" } },
  { "chat.lua", 1,
    { { "7m", "--top-p", "x" }, "chat.lua: --top-p: 'x' is not a non-negative number" },
    { { "missing.bin" }, "chat.lua: load: cannot open model file 'missing.bin': " } },
  { "custom_scheduler.lua", 1,
    { { "--slots", "0" }, "custom_scheduler.lua: --slots: '0' is not an integer >= 1" },
    { { "9m" }, "custom_scheduler.lua: '9m' is neither a file, a directory nor a synthetic shape" } },
  { "bench_golden.lua", 1,
    { { "--weights", "fp16" }, "bench_golden.lua: argument for option '--weights' must be one of 'fp32', 'bf16'" },
    { { "9m" }, "bench_golden.lua: '9m' is neither a file, a directory nor a synthetic shape" } },
  { "bench_gpu.lua", 1,
    { { "--batches", "1,x" }, "bench_gpu.lua: --batches: '1,x' is not a list of batch sizes >= 1" },
    { { "9m" }, "bench_gpu.lua: '9m' is neither a file, a directory nor a synthetic shape" } },
  { "bench_prefill.lua", 1,
    { { "--lengths", "512,0" }, "bench_prefill.lua: --lengths: '512,0' is not a list of prompt lengths >= 1" },
    { { "9m" }, "bench_prefill.lua: '9m' is neither a file, a directory nor a synthetic shape" } },
  { "bench_getp.lua", 1,
    { { "--requests", "0" }, "bench_getp.lua: --requests: '0' is not an integer >= 1" },
    { { "--tokenizer", "/missing/tokenizer.bin" }, "bench_getp.lua: cannot open tokenizer file '/missing/tokenizer.bin'" } },
  { "bench_sampler.lua", 1,
    { { "--sharpen", "x" }, "bench_sampler.lua: --sharpen: 'x' is not a non-negative number" } }, -- reads no input
  { "bench_grammar.lua", 1,
    { { "--walks", "0" }, "bench_grammar.lua: --walks: '0' is not an integer >= 1" },
    { { "--tokenizer", "/missing/tokenizer.bin" }, "bench_grammar.lua: cannot open tokenizer file '/missing/tokenizer.bin'" } },
  { "bench_tokenizer.lua", 1,
    { { "--mb", "lots" }, "bench_tokenizer.lua: --mb: 'lots' is not a non-negative number" },
    { { "--text", "/missing/text" }, "bench_tokenizer.lua: --text: cannot open '/missing/text': " } },
  { "results.lua", 1,
    { { "--frobnicate" }, "results.lua: unknown option '--frobnicate'" },
    { { "--root", "/missing" }, "results.lua: results.read: cannot open '/missing/examples/results.jsonl': " } },
}

describe("the examples on bad input", function()
  after_each(H.cleanup)

  local function check(run, status, args, first, usage)
    local code, out, err = run(args)
    local where = table.concat(args, " ") .. "\n" .. err
    assert.are.same({ status, "" }, { code, out }, where)
    local line, rest = err:match("^([^\n]*)\n(.*)$")
    assert.truthy(line, where)
    assert.are.equal(first, line:sub(1, #first), where)
    assert.falsy(err:find("traceback", 1, true), where)
    assert.falsy(err:find("%.lua:%d+:"), where)
    assert.falsy(line:find("^([%w_.-]+: )%1"), where)
    if usage then
      assert.truthy(rest:find("^Usage: "), where)
    else
      assert.falsy(err:find("Usage:", 1, true), where)
    end
  end

  for _, case in ipairs(CASES) do
    local script, status, usage_error, bad_input = table.unpack(case)
    it(("%s: a usage error first, then the usage; bad input in one line; exit %d"):format(script, status), function()
      local run = H.runner("examples/" .. script, pending)
      check(run, status, usage_error[1], usage_error[2], true)
      if bad_input then check(run, status, bad_input[1], bad_input[2], false) end
    end)
  end

  it("bench_gpu.lua: a prompt that leaves no position to decode is a usage error", function()
    check(H.runner("examples/bench_gpu.lua", pending), 1, { "--prompt", "1024" },
      "bench_gpu.lua: --prompt (1024) must be less than --ctx (1024): decoding starts after it", true)
  end)

  it("demo.lua: --presence-penalty and --frequency-penalty reach the sampler (negative: greedy repeats its id)",
    function()
      local run = H.runner("examples/demo.lua", pending)
      local code, plain, err = run { "7m", "--device", "cpu", "--max-tokens", "6" }
      assert.are.equal(0, code, err)
      local out
      code, out, err = run { "7m", "--device", "cpu", "--max-tokens", "6", "--presence-penalty=-2",
        "--frequency-penalty=-2" }
      assert.are.equal(0, code, err)
      local first = plain:match("\ngenerated: (%d+)")
      assert.truthy(first, plain)
      assert.truthy(out:find(("\ngenerated: %s\n"):format((first .. " "):rep(6):sub(1, -2)), 1, true), out)
      assert.is_nil(plain:find(("\ngenerated: %s %s"):format(first, first), 1, true), plain)
    end)

  it("--help prints the usage and the options, exit 0", function()
    local run = H.runner("examples/demo.lua", pending)
    local code, out, err = run { "--help" }
    assert.are.same({ 0, "" }, { code, err })
    assert.truthy(out:find("^Usage: demo.lua"), out)
    assert.truthy(out:find("--temperature", 1, true), out)
  end)
end)
