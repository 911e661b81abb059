--- gptoss.progress: one status line of a long task, rewritten in place ("\r") on a
-- terminal. Two texts are provided: progress.format, getp's (tokens generated of the most
-- the run can generate, requests finished, tokens per second, the time left at that
-- rate), and progress.weights, a CPU replica's weights being materialised.
--
--   local bar = progress.new { write = function(s) io.stderr:write(s) end }
--   getp.new { ..., on_progress = function(p) bar:update(p) end }
--   ... bar:close()   -- ends the line if the run stopped before its last request
--
-- update(p) takes a report p = {done=, total=, elapsed= seconds, ...} (getp's, or what the
-- format given reads) and draws at most once per `interval` seconds of p.elapsed (default
-- 0.25), so that a run of many short steps does not spend its time writing; the report
-- with done >= total is always drawn, followed by "\n". A shorter line is padded with
-- spaces over the longer one it replaces. The caller decides whether to show it at all
-- (only on a terminal).
local util = require "gptoss.util"

local progress = {}

local Bar = {}
Bar.__index = Bar

--- "0:07", "12:34", "1:02:03"
function progress.duration(seconds)
  local s = math.floor(seconds + 0.5)
  if s >= 3600 then
    return ("%d:%02d:%02d"):format(s // 3600, s % 3600 // 60, s % 60)
  end
  return ("%d:%02d"):format(s // 60, s % 60)
end

--- getp's line from its report {done=, total=, tokens=, max_tokens=, elapsed=}:
-- "3456/16384 tokens, 12/32 requests, 1234.5 tok/s, ETA 0:10". The ETA is the time the
-- tokens still possible (max_tokens - tokens) take at the rate so far ("--" before the
-- first token): an upper bound when requests stop early, which max_tokens then shows.
function progress.format(p)
  local rate = p.elapsed > 0 and p.tokens / p.elapsed or 0
  local eta = "--"
  if p.done >= p.total then
    eta = "0:00"
  elseif rate > 0 then
    eta = progress.duration((p.max_tokens - p.tokens) / rate)
  end
  return ("%d/%d tokens, %d/%d requests, %.1f tok/s, ETA %s")
    :format(p.tokens, p.max_tokens, p.done, p.total, rate, eta)
end

--- A CPU replica's weights being materialised, from {done=, total= (weight values),
-- elapsed=}: "materialising the weights: 37% of 2.80e+09 values, ETA 0:52", the ETA at
-- the rate so far ("--" before any value); once done, "materialised the weights: 2.80e+09
-- values in 1:23".
function progress.weights(p)
  if p.done >= p.total then
    return ("materialised the weights: %.2e values in %s"):format(p.total, progress.duration(p.elapsed))
  end
  local eta = p.done > 0 and progress.duration((p.total - p.done) * p.elapsed / p.done) or "--"
  return ("materialising the weights: %d%% of %.2e values, ETA %s"):format(100 * p.done // p.total, p.total, eta)
end

--- opts.write(s) receives the text; opts.interval (seconds, default 0.25); opts.format
-- (function(report) -> text, default progress.format).
function progress.new(opts)
  if type(opts) ~= "table" or type(opts.write) ~= "function" then
    error("progress.new: opts.write must be a function(text)", 2)
  end
  util.check_known("progress.new", opts, { "write", "interval", "format" }, "option", 2)
  local interval = opts.interval or 0.25
  if type(interval) ~= "number" or interval < 0 then
    error(("progress.new: interval must be a non-negative number of seconds (got %s)"):format(tostring(interval)), 2)
  end
  local format = opts.format or progress.format
  if type(format) ~= "function" then
    error(("progress.new: format must be a function(report) -> text (got %s)"):format(type(format)), 2)
  end
  return setmetatable({ write = opts.write, interval = interval, format = format, last = nil, width = 0,
    open = false }, Bar)
end

--- Draws the report when it is due (see the header).
function Bar:update(p)
  local final = p.done >= p.total
  if not final and self.last and p.elapsed - self.last < self.interval then return end
  self.last = p.elapsed
  local text = self.format(p)
  local pad = math.max(0, self.width - #text)
  self.width = #text
  self.write("\r" .. text .. (" "):rep(pad) .. (final and "\n" or ""))
  self.open = not final
end

--- Ends a line left open (a run that failed or stopped early).
function Bar:close()
  if self.open then
    self.write("\n")
    self.open = false
  end
end

return progress
