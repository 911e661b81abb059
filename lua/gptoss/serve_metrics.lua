--- gptoss.serve_metrics (internal, gptoss.serve's): what GET /metrics reports, in
-- Prometheus' text format (version 0.0.4): requests by endpoint and status, prompt and
-- generated tokens, the queue's length and the slots in use (read from the engine when
-- scraped), and histograms of time to first token and time per output token.
local serve_metrics = {}

-- Bucket bounds in seconds: from a fast GPU's decode step to a slow CPU's prefill.
local BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 }

local Metrics = {}
Metrics.__index = Metrics

local function histogram()
  local counts = {}
  for i = 1, #BUCKETS do counts[i] = 0 end
  return { counts = counts, sum = 0, count = 0 }
end

--- A fresh set of counters.
function serve_metrics.new()
  return setmetatable({ requests = {}, prompt_tokens = 0, generation_tokens = 0, ttft = histogram(),
    tpot = histogram() }, Metrics)
end

--- One request answered on endpoint (its path) with HTTP status.
function Metrics:request(endpoint, status)
  local key = endpoint .. "\0" .. status
  self.requests[key] = (self.requests[key] or 0) + 1
end

function Metrics:tokens(prompt, generated)
  self.prompt_tokens = self.prompt_tokens + prompt
  self.generation_tokens = self.generation_tokens + generated
end

local function observe(h, seconds)
  for i, bound in ipairs(BUCKETS) do
    if seconds <= bound then h.counts[i] = h.counts[i] + 1 end
  end
  h.sum, h.count = h.sum + seconds, h.count + 1
end

--- Seconds from a request's arrival to its first generated token.
function Metrics:first_token(seconds) observe(self.ttft, seconds) end

--- Seconds per generated token after the first, averaged over one sequence.
function Metrics:per_token(seconds) observe(self.tpot, seconds) end

local function write_histogram(out, name, help, h)
  out[#out + 1] = ("# HELP %s %s\n# TYPE %s histogram\n"):format(name, help, name)
  for i, bound in ipairs(BUCKETS) do
    out[#out + 1] = ('%s_bucket{le="%s"} %d\n'):format(name, tostring(bound), h.counts[i])
  end
  out[#out + 1] = ('%s_bucket{le="+Inf"} %d\n%s_sum %.17g\n%s_count %d\n'):format(name, h.count, name, h.sum, name,
    h.count)
end

--- The exposition text; waiting, slots_used, slots: the engine's now.
function Metrics:text(waiting, slots_used, slots)
  local out = { "# HELP gptoss_requests_total HTTP requests answered, by endpoint and status.\n",
    "# TYPE gptoss_requests_total counter\n" }
  local keys = {}
  for key in pairs(self.requests) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local endpoint, status = key:match("^(.*)%z(.*)$")
    out[#out + 1] = ('gptoss_requests_total{endpoint="%s",status="%s"} %d\n'):format(endpoint, status,
      self.requests[key])
  end
  local function gauge(name, kind, help, value)
    out[#out + 1] = ("# HELP %s %s\n# TYPE %s %s\n%s %d\n"):format(name, help, name, kind, name, value)
  end
  gauge("gptoss_prompt_tokens_total", "counter", "Prompt tokens of the requests admitted.", self.prompt_tokens)
  gauge("gptoss_generation_tokens_total", "counter", "Tokens generated.", self.generation_tokens)
  gauge("gptoss_queue_length", "gauge", "Sequences waiting for a slot.", waiting)
  gauge("gptoss_slots_in_use", "gauge", "Slots holding a running sequence.", slots_used)
  gauge("gptoss_slots", "gauge", "Slots requests may take.", slots)
  write_histogram(out, "gptoss_time_to_first_token_seconds", "Seconds from arrival to the first generated token.",
    self.ttft)
  write_histogram(out, "gptoss_time_per_output_token_seconds",
    "Seconds per generated token after the first, per sequence.", self.tpot)
  return table.concat(out)
end

return serve_metrics
