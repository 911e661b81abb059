--- gptoss.cli: the course's command line (docs/course.md#the-command-line) for
-- examples/run.lua (installed as gptoss-run): argument parsing, the course's post-processing of the values, and the
-- text the command prints besides the course's timing lines.
--
-- Syntax: `run <checkpoint.bin> [-x value]...` as the course's; the model may also be a
-- checkpoint directory or a synthetic shape (gptoss.naming's MODEL). Course flags are "-" and
-- one letter and always take the next argument as their value, whatever it looks like
-- (`-t -1`, `-i "-a prompt"`, `-i ""`):
-- cli.parse rewrites each such pair as `--long=value` before argparse sees it, since
-- argparse would take a value starting with "-" for an option. A flag given twice keeps
-- its last value, as in the course. Our own options are all "--" long names, so none can
-- collide with a course flag (the long names the pairs become are hidden from the help).
--
-- Values, strict where the course's atoi/atof are lax: -t and -p must be numbers and -s
-- and -n integers (the course reads "abc" as 0). Then the course's rules (cli.normalize):
--   -t  rounded to float as the course stores it; below 0 -> 0
--   -p  rounded to float; outside [0, 1] -> 0.9
--   -s  0 -> the time in seconds (the course's (unsigned) time(NULL))
--   -n  below 0 -> 0; once the model is loaded, 0 or above its seq_len -> seq_len
--       (getp.clamp_steps)
--   -z  default tokenizer.bin as the course's; when that file does not exist and -z is
--       not given, gptoss.tokenizer_path()'s: $GPTOSS_TOKENIZER, build/tokenizer.bin, the
--       installed copy (cli.tokenizer_path)
--
-- Beyond the course: --top-k and --min-p (sampling filters of the default-mode sampler,
-- which generate then uses instead of the course's), --presence-penalty and
-- --frequency-penalty (gptoss.flags'; the default-mode sampler's too, even with -t 0),
-- --max-tokens and --stop (generate only), --threads (CPU replicas), --device (gptoss.flags',
-- as every command spells it); cli.parse refuses what does not apply to the mode given. -s,
-- -n and the other course flags keep the course's spelling and meaning: they are the one
-- exception to gptoss.flags.
local argparse = require "argparse"
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local partition = require "gptoss.partition"
local scheduler = require "gptoss.scheduler"

local cli = {}

-- course flag -> the long alias it is rewritten to
local COURSE_FLAGS = {
  ["-t"] = "--temperature", ["-p"] = "--top-p", ["-s"] = "--seed", ["-n"] = "--steps",
  ["-i"] = "--input", ["-o"] = "--output", ["-z"] = "--tokenizer", ["-m"] = "--mode",
  ["-y"] = "--system-prompt",
}
local MODES = { "generate", "getp", "chat" }
local COURSE_TOKENIZER = "tokenizer.bin"

-- A course flag with its hidden long alias (what cli.rewrite turns "-t value" into); the
-- option's field is the alias without dashes (a.temperature, a.top_p, ...).
local function course(p, flag, ...)
  local long = COURSE_FLAGS[flag]
  return p:option(flag, ...):hidden_name(long):target((long:sub(3):gsub("-", "_")))
end

--- The argparse parser (name: the command's name in messages).
function cli.parser(name)
  local p = argparse(name, "gpt-oss inference with the course's command line (docs/course.md).")
    :help_max_width(100)
    :epilog(table.concat({
      "The course's flags are one dash and one letter and take the next argument as their value;",
      "ours are long names. Examples:",
      "  " .. name .. " model.bin -m getp -i in.txt -o out.txt",
      "  " .. name .. " model.bin -n 256 -i \"Once upon a time\"",
      "  " .. name .. " 7m --device cpu -m getp -i in.txt -o out.txt -n 64 --json",
    }, "\n"))
  naming.add_model(p)
  course(p, "-t", "Temperature; 0 is greedy (below 0 means 0). generate samples with the course's sampler, "
    .. "or with the default-mode one when --top-k, --min-p or a penalty is given.", "0"):argname("<float>")
    :convert(cmdline.number("-t"))
  course(p, "-p", "Top-p of sampling (outside [0, 1] means 0.9).", "0.9"):argname("<float>")
    :convert(cmdline.number("-p"))
  course(p, "-s", "Sampling seed (0: the time in seconds).", "0"):argname("<int>"):convert(cmdline.integer("-s"))
  course(p, "-n", "Prompt + generated tokens a request may reach (0: the model's max_seq_len).",
    "1024"):argname("<int>"):convert(cmdline.integer("-n"))
  course(p, "-i", "The request file (getp) or the prompt (generate)."):argname("<string>")
  course(p, "-o", "The output file (getp)."):argname("<path>")
  course(p, "-z", ("tokenizer.bin path (default %s, else $GPTOSS_TOKENIZER, build/tokenizer.bin or the "
    .. "installed copy).")
    :format(COURSE_TOKENIZER)):argname("<path>")
  course(p, "-m", "generate | getp | chat (chat is not supported).", "generate"):argname("<string>")
  course(p, "-y", "The course's chat system prompt (accepted, unused)."):argname("<string>")
  p:option("--top-k", "Sample among the K most likely tokens only (with -t > 0; 0: all). generate then uses "
    .. "the default-mode sampler (docs/api.md#default-mode) instead of the course's, seeded with -s.")
    :argname("<int>"):convert(cmdline.integer("--top-k", 0))
  p:option("--min-p", "Sample among tokens at least P times as likely as the most likely one only (with -t > 0; "
    .. "0: all); as --top-k, the default-mode sampler.")
    :argname("<float>"):convert(cmdline.number("--min-p", 0, 1))
  flags.add_penalties(p, "with -t 0 too; as --top-k, the default-mode sampler")
  flags.add_max_tokens(p, nil, "none; -n still bounds prompt + generated; -m generate only", 0)
  flags.retire(p, "--max-new")
  p:option("--stop", "generate: stop where the generated text contains TEXT, which is not printed (repeatable).")
    :argname("<text>"):count("*")
  p:option("--threads", "Threads of a CPU replica (0: all CPUs).")
    :argname("<int>"):convert(cmdline.integer("--threads", 0))
  flags.add_device(p, true, "every GPU, else cpu; -m generate uses the first")
  p:option("--weights", "Weight format (default: fp32 on the CPU; on GPUs the smallest the experts are "
    .. "exactly in, mxfp4 for a checkpoint, else bf16)."):choices(gptoss.weight_format_names())
  p:option("--kv", "KV cache precision (default: fp32 with fp32 weights, else bf16)."):choices(gptoss.kv_formats())
  p:option("--slots", "Sequences a replica runs at once (default: getp's choice, see its describe line).")
    :argname("<int>"):convert(cmdline.integer("--slots", 1))
  p:option("--scheduler", "getp scheduler.", "continuous"):choices(scheduler.names)
  p:option("--partition", "How getp spreads the requests over the replicas (default: round_robin; "
    .. "under mpirun or srun balanced, by the work each request may take: docs/getp.md#ranks-under-mpi).")
    :choices(partition.names)
  p:flag("--chat", "getp: each request as a harmony user turn after the default system message, ending "
    .. "<|start|>assistant, as gpt-oss is meant to be prompted (default: the course's raw prompt).")
  p:flag("--no-share-prefix", "getp: prefill every prompt whole (default: where a replica's prompts begin alike, "
    .. "as --chat's do, the shared beginning is prefilled once and forked into each slot: docs/getp.md#shared-prefixes).")
  p:flag("--profile", "Time every kernel of GPU replicas with device events (each step then waits "
    .. "for the device, so the run is slower) and print a table per replica, with its memory.")
  p:flag("--quiet", "No progress lines, replica description or tokenizer note on stderr (warnings stay).")
  p:flag("--json", "Print one JSON line with the run's figures after the course's lines.")
  return p
end

--- Course flag pairs rewritten as --long=value (see the header); the rest as given.
function cli.rewrite(argv)
  local out, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    if COURSE_FLAGS[a] and i < #argv then
      out[#out + 1] = COURSE_FLAGS[a] .. "=" .. argv[i + 1]
      i = i + 2
    else
      out[#out + 1] = a
      i = i + 1
    end
  end
  return out
end

-- float as the course's C variables hold it; +-inf beyond float's range
local function f32(x)
  if math.abs(x) > 0x1.fffffep127 then return x > 0 and math.huge or -math.huge end
  return (string.unpack("<f", string.pack("<f", x)))
end

--- The course's post-processing of -t, -p, -s, -n (docs/course.md#the-command-line),
-- before the model is known: returns {temperature=, top_p=, seed=, steps=}. now: the time in seconds for -s 0.
function cli.normalize(values, now)
  local t, p = f32(values.temperature), f32(values.top_p)
  if t < 0 then t = 0.0 end
  if p < 0 or p > 1 then p = f32(0.9) end
  local seed = values.seed
  if seed == 0 then seed = now end
  local steps = values.steps
  if steps < 0 then steps = 0 end
  return { temperature = t, top_p = p, seed = seed, steps = steps }
end

--- Parses the command line: returns the options (course values normalised; device a
-- list or nil), or nil and a message for the user. now: for -s 0.
function cli.parse(argv, name, now)
  local parser = cli.parser(name)
  local ok, a = parser:pparse(cli.rewrite(argv))
  if not ok then return nil, a end
  local known = false
  for _, m in ipairs(MODES) do known = known or m == a.mode end
  if not known then
    return nil, ("-m: unknown mode '%s' (known: generate, getp; the course's chat is not supported)"):format(a.mode)
  end
  for _, stop in ipairs(a.stop) do
    if stop == "" then return nil, "--stop: an empty stop string would stop before the first token" end
  end
  if a.mode == "getp" and (a.max_tokens or #a.stop > 0) then
    return nil, ("%s is for -m generate: getp's requests end at -n positions or a stop id, as the course's")
      :format(a.max_tokens and "--max-tokens" or "--stop")
  end
  local v = cli.normalize(a, now)
  a.temperature, a.top_p, a.seed, a.steps = v.temperature, v.top_p, v.seed, v.steps
  return a
end

--- The sampling parameters of the options: nil when greedy (-t 0) without penalties; else
-- {temperature=, top_p=, seed=} plus top_k, min_p and the penalties when given. The second
-- value says whether the default-mode sampler must draw them (--top-k, --min-p or a penalty
-- given: the course's sampler has none of them).
function cli.sampling(a)
  local penalized = flags.penalized(a)
  if a.temperature <= 0 and not penalized then return nil, false end
  return flags.with_penalties(a, { temperature = a.temperature, top_p = a.top_p, top_k = a.top_k, min_p = a.min_p,
    seed = a.seed }), a.top_k ~= nil or a.min_p ~= nil or penalized
end

--- The course's default tokenizer path unless -z is given or the file is missing, then
-- gptoss.tokenizer_path()'s (--json names the one used); or nil and why none was found.
-- exists(path) -> boolean.
function cli.tokenizer_path(given, exists)
  if given then return given end
  if exists(COURSE_TOKENIZER) then return COURSE_TOKENIZER end
  local fallback, missing = gptoss.tokenizer_path()
  if not fallback then return nil, ("%s is not in the current directory and %s (-z PATH to choose)")
    :format(COURSE_TOKENIZER, missing:gsub("^no tokenizer.bin found: ", "")) end
  return fallback
end

--- The 15 lines run.cpp prints when it opens a model (docs/course.md#header), "\n" ended.
function cli.header(config)
  local c = config
  return table.concat({
    ("vocab_size: %d"):format(c.vocab_size),
    ("hidden_dim: %d"):format(c.hidden_dim),
    ("n_experts: %d"):format(c.n_experts),
    ("experts_per_token: %d"):format(c.experts_per_token),
    ("intermediate_dim: %d"):format(c.intermediate_dim),
    ("n_layers: %d"):format(c.n_layers),
    ("head_dim: %d"):format(c.head_dim),
    ("n_attn_heads: %d"):format(c.n_attn_heads),
    ("n_kv_heads: %d"):format(c.n_kv_heads),
    ("max_seq_len: %d"):format(c.seq_len),
    ("init context len: %d"):format(c.initial_context_length),
    ("rope theta: %f"):format(c.rope_theta),
    ("rope_scaling_factor: %f"):format(c.rope_scaling_factor),
    ("sliding window: %d"):format(c.sliding_window),
    ("swiglu_limit: %f"):format(c.swiglu_limit),
  }, "\n") .. "\n"
end

--- Tokens per second as the course computes it from whole milliseconds (tokens / ms *
-- 1000), a run under one millisecond counting as one (the course would divide by zero).
function cli.tps(tokens, ms)
  return tokens / math.max(ms, 1) * 1000
end

return cli
