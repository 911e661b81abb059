--- gptoss.progress: one status line of a long getp run, rewritten in place ("\r") on a
-- terminal: requests done of all, tokens generated, tokens per second so far, and the
-- time left at the rate requests have been finishing.
--
--   local bar = progress.new { write = function(s) io.stderr:write(s) end }
--   getp.new { ..., on_progress = function(p) bar:update(p) end }
--   ... bar:close()   -- ends the line if the run stopped before its last request
--
-- update(p) takes getp's report p = {done=, total=, tokens=, elapsed= seconds} and draws
-- at most once per `interval` seconds of p.elapsed (default 0.25), so that a run of many
-- short steps does not spend its time writing; the report with done == total is always
-- drawn, followed by "\n". A shorter line is padded with spaces over the longer one it
-- replaces. The caller decides whether to show it at all (only on a terminal).
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

--- The text of one report: "12/32 requests, 3456 tokens, 1234.5 tok/s, ETA 0:07".
-- The ETA assumes the requests left finish at the rate of those done ("--" before any).
function progress.format(p)
  local rate = p.elapsed > 0 and p.tokens / p.elapsed or 0
  local eta = "--"
  if p.done >= p.total then
    eta = "0:00"
  elseif p.done > 0 then
    eta = progress.duration((p.total - p.done) * p.elapsed / p.done)
  end
  return ("%d/%d requests, %d tokens, %.1f tok/s, ETA %s"):format(p.done, p.total, p.tokens, rate, eta)
end

--- opts.write(s) receives the text; opts.interval (seconds, default 0.25).
function progress.new(opts)
  if type(opts) ~= "table" or type(opts.write) ~= "function" then
    error("progress.new: opts.write must be a function(text)", 2)
  end
  util.check_known("progress.new", opts, { "write", "interval" }, "option", 2)
  local interval = opts.interval or 0.25
  if type(interval) ~= "number" or interval < 0 then
    error(("progress.new: interval must be a non-negative number of seconds (got %s)"):format(tostring(interval)), 2)
  end
  return setmetatable({ write = opts.write, interval = interval, last = nil, width = 0, open = false }, Bar)
end

--- Draws the report when it is due (see the header).
function Bar:update(p)
  local final = p.done >= p.total
  if not final and self.last and p.elapsed - self.last < self.interval then return end
  self.last = p.elapsed
  local text = progress.format(p)
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
