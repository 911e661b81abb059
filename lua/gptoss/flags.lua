--- gptoss.flags: the options every command spells the same way (README.md#the-gptoss-command),
-- added to each command's argparse parser from here so that they cannot drift apart:
--   --device cpu|N|N,M,...  where it runs, GPUs numbered from 0 as nvidia-smi and CUDA count
--                           them; a list only where a command runs a replica per device
--   --max-tokens N          tokens generated at most (the prompt not counted)
--   --seed N                seed of the sampler's draws
--   --presence-penalty P    the sampler's penalties of the ids drawn before (docs/api.md#penalties),
--   --frequency-penalty F   each in [-2, 2]; none when left out (the commands that sample)
-- (MODEL and --seed-weights are gptoss.naming's.) Default device: the GPUs when there are
-- any (all of them where a command runs several replicas, the first where it runs one), else
-- the CPU. The spellings these replace are refused with a message naming the new one
-- (flags.retire), rather than taken for something else or offered in the help.
local gptoss = require "gptoss"
local cmdline = require "gptoss.cmdline"

local flags = {}

--- Spellings no command offers any more, each with the one that replaces it.
flags.RETIRED = { ["--devices"] = "--device", ["--sample-seed"] = "--seed", ["--max-new"] = "--max-tokens" }

local ONE = "\"cpu\" or a GPU number from 0"
local SEVERAL = "\"cpu\" or GPU numbers from 0, \"0,1\", a replica each"

--- An argparse converter for --device where a command runs a replica per device: "cpu" ->
-- {"cpu"}; "0,1" -> {0, 1} (distinct GPU numbers from 0); else nil and a message.
function flags.device_list(s)
  if s == "cpu" then return { "cpu" } end
  local list, seen = {}, {}
  for item in (s .. ","):gmatch("([^,]*),") do
    local id = math.tointeger(tonumber(item:match("^%s*(.-)%s*$")))
    if id == nil or id < 0 or seen[id] then
      return nil, ("--device: '%s' is not \"cpu\" or distinct GPU numbers from 0 (\"0,1\")"):format(s)
    end
    seen[id] = true
    list[#list + 1] = id
  end
  return list
end

--- An argparse converter for --device where a command runs one replica: "cpu" or a GPU
-- number from 0; a list is refused, saying so.
function flags.device(s)
  local list = flags.device_list(s)
  if list and #list == 1 then return list[1] end
  if list then return nil, ("--device: '%s': this command runs one replica, on %s"):format(s, ONE) end
  return nil, ("--device: '%s' is not %s"):format(s, ONE)
end

--- Adds a hidden option to p that refuses any value of the retired spelling `old`, naming
-- the one that replaces it: `new`, else flags.RETIRED's.
function flags.retire(p, old, new)
  new = new or flags.RETIRED[old]
  p:option(old):hidden(true):convert(function(s) return nil, ("%s %s is now written %s %s"):format(old, s, new, s) end)
end

--- Adds --device to p: one GPU or the CPU, or (several = true) a list of them, a replica
-- each; and the refusal of --devices. what: the help's words for the default, where the
-- command says more than flags.one_device's or flags.devices'.
function flags.add_device(p, several, what)
  local help = ("%s (default: %s)."):format(several and SEVERAL or ONE,
    what or several and "every GPU, else cpu" or "the first GPU, else cpu")
  flags.retire(p, "--devices")
  return p:option("--device", help):argname(several and "<cpu|N,M,...>" or "<cpu|N>")
    :convert(several and flags.device_list or flags.device)
end

--- The device of a one-replica command: --device's value, else the first GPU, else "cpu".
function flags.one_device(given)
  return given or gptoss.default_devices()[1]
end

--- The devices of a command that runs a replica each: --device's list, else every GPU, else {"cpu"}.
function flags.devices(given)
  return given or gptoss.default_devices()
end

-- An option of p with help `text`, its default `default` (nil: none) shown as argparse
-- shows one, or in the words of `what` when given.
local function option(p, name, text, default, what)
  local o = p:option(name, text .. (what and (" (default: %s)."):format(what) or "."), default and tostring(default))
  return o:argname("<int>"):show_default(what == nil)
end

--- Adds --max-tokens to p: tokens generated at most, default `default` (a number, or nil),
-- what: the default in words; min: the least value (default 1).
function flags.add_max_tokens(p, default, what, min)
  return option(p, "--max-tokens", "Tokens generated at most, the prompt not counted", default, what)
    :convert(cmdline.integer("--max-tokens", min or 1))
end

--- Adds --steps to p for the commands that run getp as the course does (bench_getp,
-- custom_scheduler): the course's -n, prompt + generated tokens, not --max-tokens' count.
function flags.add_course_steps(p, default)
  return option(p, "--steps", "Prompt + generated tokens a request may reach: the course's -n, as its getp "
    .. "counts them (--max-tokens, elsewhere, counts generated tokens only)", default)
    :convert(cmdline.integer("--steps", 1))
end

--- Adds --seed to p: the sampler's seed, default `default` (nil: none), what: the default in words.
function flags.add_seed(p, default, what)
  return option(p, "--seed", "Seed of the sampler's draws", default, what):convert(cmdline.integer("--seed"))
end

-- Each penalty's flag, the sampler's option it sets and what it does to a token drawn before.
local PENALTIES = {
  { "--presence-penalty", "presence_penalty", "its logit lowered by the value" },
  { "--frequency-penalty", "frequency_penalty", "its logit lowered by the value times its count" },
}

--- Adds --presence-penalty and --frequency-penalty to p: the sampler's penalties, each in
-- [-2, 2] as OpenAI's API takes them; none when left out. what: the help's words on where they
-- apply, where the command says more.
function flags.add_penalties(p, what)
  for _, penalty in ipairs(PENALTIES) do
    local flag = penalty[1]
    local help = ("In [-2, 2]: a token drawn before has %s (negative: raised; default 0, none%s; "
      .. "docs/api.md#penalties)."):format(penalty[3], what and "; " .. what or "")
    p:option(flag, help):argname("<float>"):convert(cmdline.number(flag, -2, 2))
  end
end

--- Whether a, a command's parsed options, set a penalty other than 0.
function flags.penalized(a)
  return (a.presence_penalty or 0) ~= 0 or (a.frequency_penalty or 0) ~= 0
end

--- sampling (a table of the sampler's options) with the penalties of a, a command's parsed
-- options, set; returned.
function flags.with_penalties(a, sampling)
  for _, penalty in ipairs(PENALTIES) do sampling[penalty[2]] = a[penalty[2]] end
  return sampling
end

return flags
