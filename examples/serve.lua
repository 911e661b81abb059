#!/usr/bin/env lua5.4
-- An OpenAI-compatible HTTP server (gptoss.serve, docs/serve.md):
--   gptoss serve MODEL [--host 127.0.0.1] [--port 8000] [--device cpu|N,M,...]
--                [--slots N] [--ctx N] [--scheduler continuous|static|FILE.lua]
--                [--api-key KEY] [--model-name NAME] [--max-queue N] [--max-body BYTES]
--                [--header-timeout SECONDS] [--body-timeout SECONDS] [--max-connections N]
--                [--cors-origin ORIGIN] [--quiet] [--stored-responses N]
-- MODEL and --device (default: every GPU, else cpu) as every command names them
-- (gptoss.naming, gptoss.flags). --api-key defaults to
-- $GPTOSS_API_KEY; an empty key (an unset variable's) is refused rather than read as none.
-- A scheduler file is a Lua chunk that returns a scheduler object
-- (gptoss.scheduler's hooks, plus on_arrival). SIGTERM or Ctrl-C stops admitting requests
-- (503), finishes those in flight, then exits 0. Exit status 1 on anything wrong, one message on stderr.
local argparse = require "argparse"
local cmdline = require "gptoss.cmdline"
local flags = require "gptoss.flags"
local naming = require "gptoss.naming"
local scheduler = require "gptoss.scheduler"
local script = require "gptoss.script"
local util = require "gptoss.util"

-- An argparse converter for seconds > 0, naming the flag.
local function seconds(flag)
  return function(s)
    local v = tonumber(s)
    if not v or not (v > 0 and v < math.huge) then
      return nil, ("%s: '%s' is not a number of seconds > 0"):format(flag, s)
    end
    return v
  end
end

local parser = argparse(script.name, "Serve a model over HTTP with OpenAI's API (docs/serve.md).")
naming.add_model(parser)
parser:option("--host", "Address to listen on (another than loopback opens the server to the network).",
  "127.0.0.1")
parser:option("--port", "Port to listen on (0: any free port, which the log line names).", "8000")
  :convert(cmdline.integer("--port", 0, 65535))
flags.add_device(parser, true)
parser:option("--slots", "Slots a replica gives requests (default: 16 on the CPU, what memory holds on a GPU).")
  :convert(cmdline.integer("--slots", 1))
parser:option("--ctx", "Positions of a slot, prompt and output (default: the model's, at most 8192).")
  :convert(cmdline.integer("--ctx", 2))
parser:option("--scheduler", ("The batching policy: %s, or a Lua file returning a scheduler object.")
  :format(table.concat(scheduler.names, ", ")), "continuous")
parser:option("--api-key", "Key every /v1/ request must send as 'Authorization: Bearer KEY' (default: $GPTOSS_API_KEY).")
parser:option("--model-name", "The model's name in requests and /v1/models (default: MODEL's file name).")
parser:option("--max-queue", "Requests that may wait for a slot (none free) before 429.", "256")
  :convert(cmdline.integer("--max-queue", 1))
parser:option("--max-body", "The largest request body in bytes before 413.", tostring(4 * 1024 * 1024))
  :convert(cmdline.integer("--max-body", 1))
parser:option("--header-timeout",
  "Seconds a request's headers may take before 408, and a connection may stay idle.", "10")
  :convert(seconds("--header-timeout"))
parser:option("--body-timeout", "Seconds a request's body may take before 408.", "60")
  :convert(seconds("--body-timeout"))
parser:option("--max-connections", "Connections open at once; more wait to be accepted.", "1024")
  :convert(cmdline.integer("--max-connections", 1))
parser:option("--cors-origin", "Let browsers of this origin ('*': any) call the server (CORS headers, preflights).")
parser:option("--stored-responses", "Responses kept for previous_response_id, the oldest evicted first (default 1024).")
  :convert(cmdline.integer("--stored-responses", 1))
parser:flag("--quiet", "No access-log line a request on stderr.")
local args = script.parse(parser)

-- A scheduler's name, or the object a Lua file returns.
local function load_scheduler(spec)
  if spec:find("%.lua$") or spec:find("/") then
    local chunk, err = loadfile(spec)
    if not chunk then error("--scheduler: " .. err, 0) end
    local ok, policy = pcall(chunk)
    if not ok then error(("--scheduler: %s raised: %s"):format(spec, util.bare(policy)), 0) end
    return policy
  end
  return spec
end

-- The API key: --api-key's, else $GPTOSS_API_KEY's, else nil; an empty one is an error (an
-- unset variable must not open the server).
local function api_key_of()
  for _, source in ipairs { { args.api_key, "--api-key" }, { os.getenv("GPTOSS_API_KEY"), "GPTOSS_API_KEY" } } do
    local key, name = source[1], source[2]
    if key == "" then
      error(("%s is empty (an unset variable?): give a key, or leave it out to serve without one"):format(name), 0)
    end
    if key then return key end
  end
end

-- MODEL's file name, without a trailing / or .bin: "gpt-oss-20b", "7m".
local function default_name(model)
  return (model:gsub("/+$", ""):match("[^/]*$"):gsub("%.bin$", ""))
end

script.run(function()
  local api_key = api_key_of()
  local model = naming.open(args.model, args.seed_weights)
  local ctx = assert(naming.context(model, args.ctx, "--ctx"))
  local server = require("gptoss.serve").new {
    model = model, model_name = args.model_name or default_name(args.model),
    devices = args.device, slots = args.slots, ctx = ctx, scheduler = load_scheduler(args.scheduler),
    host = args.host, port = args.port, api_key = api_key, max_queue = args.max_queue, max_body = args.max_body,
    header_timeout = args.header_timeout, body_timeout = args.body_timeout, max_connections = args.max_connections,
    cors_origin = args.cors_origin, access_log = not args.quiet, stored_responses = args.stored_responses,
    signals = true,
  }
  server:start()
  server:run()
end)
