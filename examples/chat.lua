#!/usr/bin/env lua5.4
-- A chat in the terminal with gptoss.chat (docs/chat.md): one line from stdin is one
-- question, the answer's final channel streams to stdout, then "N tokens, X s, Y tok/s" on
-- stderr; Ctrl-D (end of input) leaves.
--   gptoss chat MODEL [--reasoning low|medium|high] [--system TEXT] [--show-analysis]
--              [--temperature 1 --top-p 1 --seed S] [--device cpu|N] [--ctx N]
--              [--max-tokens N] [--demo-tools]
-- MODEL and --device as every command names them (gptoss.naming): a course .bin, a
-- checkpoint directory or a synthetic shape (a random model, which does not speak harmony).
-- The tokenizer is gptoss.tokenizer_path()'s: $GPTOSS_TOKENIZER, else build/tokenizer.bin,
-- else the one installed with the rock.
-- Exit status: 0 at the end of input, 1 anything wrong, with one message on stderr.
local argparse = require "argparse"
local gptoss = require "gptoss"
local chat = require "gptoss.chat"
local cli = require "gptoss.cli"
local naming = require "gptoss.naming"
local script = require "gptoss.script"

local parser = argparse(script.name, "Chat with a gpt-oss model in the harmony format.")
naming.add_model(parser)
parser:option("--reasoning", "Reasoning effort.", "medium"):choices { "low", "medium", "high" }
parser:option("--system", "Instructions (the developer message).")
parser:flag("--show-analysis", "Show the model's reasoning (the analysis channel) too.")
parser:option("--temperature", "Sampling temperature (0: greedy).", "1")
  :convert(script.named("--temperature", cli.non_negative))
parser:option("--top-p", "Nucleus sampling mass (1: off).", "1"):convert(script.named("--top-p", cli.non_negative))
parser:option("--seed", "Seed of the sampler's draws (default: random)."):convert(cli.integer("--seed"))
naming.add_device(parser, nil, "the first GPU, else cpu")
parser:option("--ctx", "Context length of the conversation (default: the model's, at most 8192).")
  :convert(cli.integer("--ctx", 2))
parser:option("--max-tokens", "Tokens generated per answer at most (default: until the context is full).")
  :convert(cli.integer("--max-tokens", 1))
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

script.run(function()
  local model = naming.open(args.model, args.seed_weights)
  local tok = gptoss.tokenizer(nil, { vocab_size = model.config.vocab_size })
  local device = args.device or gptoss.default_devices()[1]
  local r <close> = model:replica { device = device, slots = 1, ctx = args.ctx or math.min(model.config.seq_len, 8192) }
  io.stderr:write(dim_err(tostring(r)), "\n")
  local session = chat.new {
    replica = r, tokenizer = tok, max_tokens = args.max_tokens,
    system = { reasoning = args.reasoning },
    developer = args.system and { instructions = args.system },
    sampling = { temperature = args.temperature, top_p = args.top_p, seed = args.seed },
    tools = args.demo_tools and DEMO_TOOLS or nil,
  }
  local interactive = gptoss.isatty(0)
  while true do
    if interactive then io.write("> ") io.flush() end
    local line = io.read("l")
    if not line then break end
    if line:find("%S") then
      local channel -- of the text written last, to start a new line when it changes
      local _, stats = session:ask(line, {
        on_text = function(delta, ch)
          if ch == "analysis" and not args.show_analysis then return end
          if channel and ch ~= channel then io.write("\n") end
          channel = ch
          io.write(ch == "analysis" and dim_out(delta) or delta)
          io.flush()
        end,
        on_tool = function(recipient, arguments, result)
          io.stderr:write(dim_err(("[%s(%s) -> %s]"):format(recipient, arguments, result)), "\n")
        end,
      })
      io.write("\n")
      io.stderr:write(dim_err(("%d tokens, %.2f s, %.1f tok/s (%s)"):format(stats.tokens, stats.seconds,
        stats.tok_per_s, stats.finish)), "\n")
    end
  end
end)
