-- The loop examples as child processes on the synthetic 7m model on the CPU:
-- examples/speculative.lua (greedy: the same ids as plain decoding, its JSON line's
-- figures consistent), examples/beam_search.lua and examples/best_of_n.lua (their lines),
-- examples/bench_getp.lua (replicas, request files, prompts of a given length, output
-- tokens, the step split, --profile on the CPU), and bad arguments: exit status 1 and one
-- message.
local json = require "dkjson"
local H = require "helpers"

describe("examples/speculative.lua", function()
  it("reports rounds, accepted ids and tokens per target step in one JSON line", function()
    H.need_tokenizer(pending)
    local run = H.runner("examples/speculative.lua", pending)
    for _, case in ipairs { { "1", false }, { "0", true } } do
      local code, out, err = run { "--max-tokens", "10", "--k", "3", "--draft-layers", case[1], "--runs", "1",
        "--device", "cpu" }
      assert.are.equal(0, code, err)
      local figures = json.decode(out:match("\n({[^\n]*})\n$"))
      assert.are.same({ "7m", 10, 10, true, 3 }, { figures.model, figures.tokens, figures.plain_tokens,
        figures.same_ids, figures.k })
      assert.is_true(math.abs(figures.tokens / figures.rounds - figures.tokens_per_target_step) < 1e-12) -- JSON: 14 digits
      assert.are.equal(figures.tokens, figures.rounds + figures.accepted) -- a round adds its accepted ids and one
      assert.are.equal(case[2], figures.accepted == figures.proposed) -- the target as its own draft: all accepted
      assert.is_true(figures.speculative_s > 0 and figures.plain_s > 0)
    end
    local code, out, err = run { "--max-tokens", "6", "--temperature", "1", "--seed", "3", "--runs", "1", "--device", "cpu" }
    assert.are.equal(0, code, err)
    assert.are.equal(6, json.decode(out:match("\n({[^\n]*})\n$")).tokens)
  end)

  it("exits 1 with a message on bad arguments", function()
    local run = H.runner("examples/speculative.lua", pending)
    H.expect_exits(run, 1, {
      { { "--draft-layers", "2" }, "speculative.lua: --draft-layers: 2 is not fewer than the target's 2" },
      { { "--device=-1" }, "--device: '-1' is not \"cpu\" or a GPU number from 0" },
      { { "--k", "0" }, "--k: '0' is not an integer >= 1" },
      -- a path-like name that is not there is a missing file, not an unknown shape
      { { "nope.bin" }, "speculative.lua: load: cannot open model file 'nope.bin'" },
      { { "9m" }, "speculative.lua: '9m' is neither a file, a directory nor a synthetic shape" },
    })
  end)
end)

describe("examples/beam_search.lua and examples/best_of_n.lua", function()
  it("print the hypotheses best first, and the samples with the best marked", function()
    H.need_tokenizer(pending)
    local code, out, err = H.runner("examples/beam_search.lua", pending) { "--width", "3", "--max-tokens", "4", "--device", "cpu" }
    assert.are.equal(0, code, err)
    assert.truthy(out:find("beam search, width 3, alpha 1: %d+ hypotheses, %d+ steps"), out)
    local scores = {}
    for score in out:gmatch("\n%s*%d+  score%s+(%S+)") do scores[#scores + 1] = tonumber(score) end
    assert.is_true(#scores >= 3, out)
    for i = 2, #scores do assert.is_true(scores[i] <= scores[i - 1], out) end
    code, out, err = H.runner("examples/best_of_n.lua", pending) { "--n", "3", "--max-tokens", "5", "--device", "cpu" }
    assert.are.equal(0, code, err)
    local _, marked = out:gsub("\n%*%s+%d+  seed", "")
    assert.are.equal(1, marked, out)
    assert.truthy(out:find("; 9 prompt rows stepped, where 3 separate prefills would step 21\n", 1, true), out)
    local penalized
    code, penalized, err = H.runner("examples/best_of_n.lua", pending) { "--n", "3", "--max-tokens", "5",
      "--device", "cpu", "--presence-penalty=-2", "--frequency-penalty=-2" }
    assert.are.equal(0, code, err)
    assert.are_not.equal(out, penalized) -- the penalties reach the samples' sampling
    H.expect_exits(H.runner("examples/beam_search.lua", pending), 1,
      { { { "--width", "21" }, "beam_search.lua: beam.search: each beam offers its top" } })
  end)
end)

describe("examples/bench_getp.lua", function()
  it("puts --replicas-per-device replicas on a device and reports each one's host and wait per step", function()
    H.need_tokenizer(pending)
    local run = H.runner("examples/bench_getp.lua", pending)
    local code, out, err = run { "7m", "--device", "cpu", "--weights", "fp32", "--requests", "6",
      "--steps", "24", "--replicas-per-device", "3" }
    assert.are.equal(0, code, err)
    local figures = json.decode(out:match("\n({[^\n]*})\n$"))
    assert.are.same({ 3, 3, 3 }, { #figures.slots, #figures.host_ms_per_step, #figures.waited_ms_per_step })
    for k = 1, 3 do
      assert.is_true(figures.host_ms_per_step[k] > 0 and figures.waited_ms_per_step[k] >= 0)
      assert.truthy(out:find(("\n%%s+%d%%s+cpu%%s+%%d+%%s+[%%d.]+%%s+[%%d.]+\n"):format(k)), out)
    end
    H.expect_exits(run, 1, { { { "--replicas-per-device", "0" },
      "bench_getp.lua: --replicas-per-device: '0' is not an integer >= 1" } })
  end)

  it("writes its requests as a course request file with --write-requests, running nothing", function()
    H.need_tokenizer(pending)
    local run = H.runner("examples/bench_getp.lua", pending)
    local path = H.tmp()
    local code, out, err = run { "7m", "--requests", "6", "--write-requests", path }
    assert.are.equal(0, code, err)
    assert.are.equal("", out)
    local prompts = require("gptoss.requests").read(path)
    assert.are.equal(6, #prompts)
    local seen = {}
    for i, prompt in ipairs(prompts) do -- questions, none twice
      assert.truthy(prompt:find("^%u[%a ,]+[.?]$"), prompt)
      assert.is_nil(seen[prompt], prompt)
      seen[prompt] = i
    end
    H.cleanup()
  end)

  it("writes prompts of exactly --prompt-tokens tokens of the course's encode, each a different text", function()
    local tok = require("gptoss").tokenizer(H.need_tokenizer(pending))
    local run = H.runner("examples/bench_getp.lua", pending)
    local path = H.tmp()
    -- 1024-token windows of README.md's text, the last ones going round its end to its start
    local code, out, err = run { "7m", "--requests", "5", "--prompt-tokens", "1024", "--steps", "2048",
      "--write-requests", path }
    assert.are.equal(0, code, err)
    assert.are.equal("", out)
    local prompts = require("gptoss.requests").read(path, { steps = 2048 })
    assert.are.equal(5, #prompts)
    local seen = {}
    for i, prompt in ipairs(prompts) do
      assert.are.equal(1024, #tok:encode(prompt), "request " .. i)
      assert.is_nil(seen[prompt], "request " .. i)
      seen[prompt] = i
    end
    H.cleanup()
  end)

  it("reports output tokens, the prompt tokens prefilled and each kind of step; --profile on the CPU says "
    .. "it has no per-kernel timing", function()
    H.need_tokenizer(pending)
    local run = H.runner("examples/bench_getp.lua", pending)
    local requests, prompt, steps = 3, 32, 40
    local code, out, err = run { "7m", "--device", "cpu", "--weights", "fp32", "--requests", tostring(requests),
      "--prompt-tokens", tostring(prompt), "--steps", tostring(steps), "--profile" }
    assert.are.equal(0, code, err)
    local f = json.decode(out:match("\n({[^\n]*})\n$"))
    assert.are.same({ prompt, requests * prompt }, { f.prompt_length, f.prompt_tokens })
    assert.are.equal(f.tokens, f.output_tokens) -- the course's count is the generated ids
    assert.is_true(f.output_tokens > 0 and f.output_tokens <= requests * (steps - prompt))
    assert.is_true(math.abs(f.output_tok_per_s - f.output_tokens / f.seconds) <= 1e-12 * f.output_tok_per_s)
    assert.are.equal(f.prompt_tokens - f.prefill_saved, f.prompt_tokens_prefilled)
    local split = f.step_split[1]
    assert.are.equal(f.engine_steps, split.prefill_steps + split.decode_steps)
    assert.are.equal(f.prompt_tokens_prefilled, split.prefill_rows)
    assert.is_true(split.prefill_step_rows >= split.prefill_rows and split.decode_step_rows >= split.decode_steps)
    -- each request's first id is its last prompt row's, every later one a decode row's (rows built
    -- ahead for a request that stopped yield none)
    assert.is_true(f.output_tokens
      <= split.decode_step_rows + split.prefill_step_rows - split.prefill_rows + requests)
    assert.truthy(out:find(("\n%%s+1%%s+%d%%s+%d%%s+%d%%s+%d%%s+%d\n"):format(split.prefill_steps,
      split.prefill_step_rows, split.prefill_rows, split.decode_steps, split.decode_step_rows)), out)
    assert.truthy(out:find("\nprofile, replica 1 (cpu): per-kernel timing is for GPU replicas\n", 1, true), out)
    assert.are.same({ { prefill = {}, decode = {} } }, f.profile)
  end)

  it("refuses a --prompt-tokens that leaves nothing to generate, is cut by the course or meets --chat", function()
    H.need_tokenizer(pending)
    local run = H.runner("examples/bench_getp.lua", pending)
    -- a model whose initial_context_length (where the course cuts prompts) is below its seq_len
    local path = H.tmp()
    require("gptoss").synthetic({ initial_context_length = 210 }, { seed = 1 }):save(path)
    H.expect_exits(run, 1, {
      { { "--prompt-tokens", "0" }, "bench_getp.lua: --prompt-tokens: '0' is not an integer >= 1" },
      { { "7m", "--prompt-tokens", "40", "--steps", "40" }, "bench_getp.lua: --prompt-tokens 40 leaves nothing to "
        .. "generate: --steps 40 counts prompt + generated tokens (1k in / 1k out: --prompt-tokens 1024 --steps 2048)" },
      { { "7m", "--prompt-tokens", "2048", "--steps", "4096" }, "bench_getp.lua: --prompt-tokens 2048 leaves "
        .. "nothing to generate: --steps 2048 (the model's seq_len) counts" },
      { { path, "--prompt-tokens", "211", "--steps", "300" }, "bench_getp.lua: --prompt-tokens 211 is more than "
        .. "the model's initial_context_length 210, where getp cuts a prompt" },
      { { "7m", "--prompt-tokens", "8", "--chat" }, "bench_getp.lua: --prompt-tokens and --chat: harmony's system "
        .. "message and turn would add their own tokens to the N" },
    })
    H.cleanup()
  end)
end)
