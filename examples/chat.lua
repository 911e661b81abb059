#!/usr/bin/env lua5.4
-- A chat in the terminal with gptoss.chat (docs/chat.md#exampleschatlua): a line of input
-- is a question (a line ending in \ goes on on the next), the answer's final channel streams
-- to stdout, then "N tokens, X s, Y tok/s" on stderr, notices in one line there too. On a
-- terminal, lines are edited and recalled through libedit when installed. Commands:
-- /reset, /save FILE, /load FILE, /system TEXT, /help, /quit (gptoss.chat_commands). When
-- the context fills, the oldest turns are dropped. Ctrl-C stops a reply; at a prompt where
-- nothing was typed, Ctrl-C or Ctrl-D (end of input) leaves.
--   gptoss chat MODEL [--reasoning none|low|medium|high] [--system TEXT] [--show-analysis]
--              [--json-schema FILE] [--reasoning-budget N]
--              [--temperature 1 --top-p 1 --seed S] [--presence-penalty P --frequency-penalty F]
--              [--device cpu|N] [--ctx N] [--max-tokens N] [--demo-tools]
-- MODEL, --device (default: the first GPU, else cpu), --seed, the penalties (counted per
-- answer) and --max-tokens as every command spells them (gptoss.naming, gptoss.flags): MODEL a course .bin, a
-- checkpoint directory or a synthetic shape (a random model, which does not speak harmony).
-- The tokenizer is gptoss.tokenizer_path()'s: $GPTOSS_TOKENIZER, else build/tokenizer.bin,
-- else the one installed with the rock.
-- Exit status: 0 at the end of input, 1 anything wrong, with one message on stderr (on a
-- terminal, an error of one input is shown and the chat goes on).
local argparse = require "argparse"
local gptoss = require "gptoss"
local chat = require "gptoss.chat"
local chat_commands = require "gptoss.chat_commands"
local files = require "gptoss.files"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local generate = require "gptoss.generate"
local line_input = require "gptoss.line_input"
local naming = require "gptoss.naming"
local script = require "gptoss.script"

local parser = argparse(script.name, "Chat with a gpt-oss model in the harmony format.")
naming.add_model(parser)
parser:option("--reasoning", "Reasoning effort (none: the answer at once).", "medium")
  :choices { "none", "low", "medium", "high" }
parser:option("--json-schema", "Answers are JSON valid under the schema in this file (docs/structured.md).")
parser:option("--reasoning-budget", "Answer after at most this many tokens of reasoning.")
  :convert(cmdline.integer("--reasoning-budget", 0))
parser:option("--system", "Instructions (the developer message).")
parser:flag("--show-analysis", "Show the model's reasoning (the analysis channel) too.")
parser:option("--temperature", "Sampling temperature (0: greedy).", "1")
  :convert(script.named("--temperature", cmdline.non_negative))
parser:option("--top-p", "Nucleus sampling mass (1: off).", "1"):convert(script.named("--top-p", cmdline.non_negative))
flags.add_seed(parser, nil, "random")
flags.add_penalties(parser, "counted per answer")
flags.add_device(parser)
parser:option("--ctx", "Context length of the conversation (default: the model's, at most 8192).")
  :convert(cmdline.integer("--ctx", 2))
flags.add_max_tokens(parser, nil, "until the context is full; per answer")
parser:flag("--demo-tools", "Declare a function tool add(a, b) the model may call.")
local args = script.parse(parser)

-- A small function tool for --demo-tools.
local DEMO_TOOLS = {
  add = {
    description = "Adds two numbers.",
    parameters = { type = "object", required = { "a", "b" }, property_order = { "a", "b" },
      properties = { a = { type = "number" }, b = { type = "number" } } },
    fn = function(a)
      if type(a.a) ~= "number" or type(a.b) ~= "number" then error("a and b must be numbers", 0) end
      return a.a + a.b
    end,
  },
}

-- ANSI dim for the analysis and the figures on a terminal only, so that pipes get plain text.
local function styled(fd)
  if not gptoss.isatty(fd) then return function(s) return s end end
  return function(s) return "\27[2m" .. s .. "\27[0m" end
end
local dim_out, dim_err = styled(1), styled(2)

-- Whether stdout's last line is open (a reply's text without its "\n"): a notice on stderr
-- then starts a line of its own.
local line_open = false
local function say(s)
  io.write(s)
  io.flush()
  line_open = s:sub(-1) ~= "\n"
end
local function notice(s)
  if line_open then say("\n") end
  io.stderr:write(dim_err(s), "\n")
end

-- One question: the reply streamed, what happened on the way told in a line each.
local function answer(session, question)
  local channel -- of the text written last, to start a new line when it changes
  local told_not_harmony = false
  gptoss.interrupted() -- a Ctrl-C that came before this reply is not for it
  local _, stats = session:ask(question, {
    on_text = function(delta, ch)
      if ch == "analysis" and not args.show_analysis then return end
      if channel and ch ~= channel then say("\n") end
      channel = ch
      say(ch == "analysis" and dim_out(delta) or delta)
    end,
    on_tool = function(recipient, arguments, result)
      notice(("[%s(%s) -> %s]"):format(recipient, arguments, result))
    end,
    on_drop = function(turns, ids)
      notice(("[the context is full: %s dropped, the conversation is now %d tokens]"):format(
        turns == 1 and "the oldest turn is" or ("the %d oldest turns are"):format(turns), ids))
    end,
    on_not_harmony = function()
      if not told_not_harmony then notice("[the model's output is not harmony: shown as it comes]") end
      told_not_harmony = true
    end,
    cancel = gptoss.interrupted,
  })
  if line_open then say("\n") end
  if stats.finish == "context" then
    notice("[the reply reached the end of the context and stops there]")
  elseif stats.finish == "cancelled" then
    notice("[stopped by Ctrl-C: the reply so far stays in the conversation]")
  end
  notice(("%d tokens, %.2f s, %.1f tok/s (%s)"):format(stats.tokens, stats.seconds, stats.tok_per_s, stats.finish))
end

-- The chat until the end of input, Ctrl-C at an empty prompt or /quit. An error of one
-- input ends it unless input is a terminal, where it is shown and the chat goes on.
local function converse(session, input)
  while true do
    local text = input:read()
    if not text then
      if input.terminal then say("\n") end -- Ctrl-D at the prompt: the shell's next line a line of its own
      return
    end
    if text:find("%S") then
      local question = chat_commands.question(text)
      local ok, said, quit = pcall(function()
        if question then return answer(session, question) end
        return chat_commands.run(session, text)
      end)
      if not ok then
        if not input.terminal then error(said, 0) end
        said = "error: " .. cmdline.message(said)
      end
      if said then notice(said) end
      if quit then return end
    end
  end
end

script.run(function()
  local model = naming.open(args.model, args.seed_weights)
  local tok = gptoss.tokenizer(nil, { vocab_size = model.config.vocab_size })
  local device = flags.one_device(args.device)
  local opts = { device = device, slots = 1, ctx = assert(naming.context(model, args.ctx, "--ctx")) }
  if device ~= "cpu" then opts.rows = math.min(opts.ctx, generate.LONE_PROMPT_ROWS); opts.chunk = opts.rows end
  local r <close> = model:replica(opts)
  io.stderr:write(dim_err(tostring(r)), "\n")
  local session = chat.new {
    replica = r, tokenizer = tok, max_tokens = args.max_tokens, on_overflow = "drop_oldest",
    system = { reasoning = args.reasoning },
    developer = args.system and { instructions = args.system },
    sampling = flags.with_penalties(args, { temperature = args.temperature, top_p = args.top_p, seed = args.seed }),
    tools = args.demo_tools and DEMO_TOOLS or nil,
    format = args.json_schema and files.read("--json-schema", args.json_schema),
    max_reasoning_tokens = args.reasoning_budget,
  }
  local input = line_input.new { prompt = "> ", continuation = "... " }
  if input.terminal then
    if not input.editing then notice("[no line editing: " .. input.plain .. "]") end
    notice("/help lists the commands; Ctrl-C stops a reply; Ctrl-D or Ctrl-C at an empty prompt leaves.")
  end
  gptoss.catch_interrupts(true)
  local ok, err = pcall(converse, session, input)
  gptoss.catch_interrupts(false)
  local saved, why = input:close()
  if not saved then notice("[the history was not saved: " .. why .. "]") end
  if not ok then error(err, 0) end
end)
