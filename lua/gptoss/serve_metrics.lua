--- gptoss.serve_metrics (internal, gptoss.serve's): what GET /metrics reports, in
-- Prometheus' text format (version 0.0.4): requests by endpoint and status, prompt and
-- generated tokens, the prompt rows the replicas fed, the queue's length and the slots in
-- use (read from the engine when scraped), histograms of time to first token and time per
-- output token, and per replica histograms of each step's host and waited seconds
-- (serve_engine's header defines them).
local serve_metrics = {}

-- Bucket bounds in seconds: from a fast GPU's decode step to a slow CPU's prefill.
local BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 }
-- ... and for the parts of a step: from a lone request's host work to a stalled step.
local STEP_BUCKETS = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1 }

local Metrics = {}
Metrics.__index = Metrics

local function histogram(buckets)
  local counts = {}
  for i = 1, #buckets do counts[i] = 0 end
  return { buckets = buckets, counts = counts, sum = 0, count = 0 }
end

--- A fresh set of counters.
function serve_metrics.new()
  return setmetatable({ requests = {}, prompt_tokens = 0, generation_tokens = 0, prefill_rows = 0,
    ttft = histogram(BUCKETS), tpot = histogram(BUCKETS), steps = {} }, Metrics)
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
  for i, bound in ipairs(h.buckets) do
    if seconds <= bound then h.counts[i] = h.counts[i] + 1 end
  end
  h.sum, h.count = h.sum + seconds, h.count + 1
end

--- Seconds from a request's arrival to its first generated token.
function Metrics:first_token(seconds) observe(self.ttft, seconds) end

--- Seconds per generated token after the first, averaged over one sequence.
function Metrics:per_token(seconds) observe(self.tpot, seconds) end

--- One step of replica k: its host and waited seconds, the ids it generated and the prompt
-- rows it fed.
function Metrics:step(k, host, waited, generated, prefilled)
  for j = #self.steps + 1, k do
    self.steps[j] = { host = histogram(STEP_BUCKETS), waited = histogram(STEP_BUCKETS), generated = 0 }
  end
  local s = self.steps[k]
  observe(s.host, host)
  observe(s.waited, waited)
  s.generated = s.generated + generated
  self.prefill_rows = self.prefill_rows + prefilled
end

--- A line a replica that stepped: its steps, host and waited ms a step, host µs an id.
function Metrics:step_summary()
  local lines = {}
  for k, s in ipairs(self.steps) do
    local n = math.max(s.host.count, 1)
    lines[#lines + 1] = ("replica %d: %d steps, %d ids; host %.3f ms a step (%.1f µs an id), waited %.3f ms a step")
        :format(k, s.host.count, s.generated, s.host.sum * 1000 / n, s.host.sum * 1e6 / math.max(s.generated, 1),
          s.waited.sum * 1000 / n)
  end
  return lines
end

-- A histogram's lines; label: nil or 'name="value"', which every line carries.
local function histogram_lines(out, name, h, label)
  local prefix = label and label .. "," or ""
  for i, bound in ipairs(h.buckets) do
    out[#out + 1] = ('%s_bucket{%sle="%s"} %d\n'):format(name, prefix, tostring(bound), h.counts[i])
  end
  local tail = label and "{" .. label .. "}" or ""
  out[#out + 1] = ('%s_bucket{%sle="+Inf"} %d\n%s_sum%s %.17g\n%s_count%s %d\n'):format(name, prefix, h.count, name,
    tail, h.sum, name, tail, h.count)
end

local function write_histogram(out, name, help, h)
  out[#out + 1] = ("# HELP %s %s\n# TYPE %s histogram\n"):format(name, help, name)
  histogram_lines(out, name, h)
end

-- The step histograms (part: host or waited), a series a replica.
local function write_steps(out, name, help, steps, part)
  out[#out + 1] = ("# HELP %s %s\n# TYPE %s histogram\n"):format(name, help, name)
  for k, s in ipairs(steps) do histogram_lines(out, name, s[part], ('replica="%d"'):format(k)) end
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
  gauge("gptoss_prefill_rows_total", "counter",
    "Prompt tokens the replicas fed (not those forked from a shared prefix or another choice).", self.prefill_rows)
  gauge("gptoss_queue_length", "gauge", "Sequences waiting for a slot.", waiting)
  gauge("gptoss_slots_in_use", "gauge", "Slots holding a running sequence.", slots_used)
  gauge("gptoss_slots", "gauge", "Slots requests may take.", slots)
  write_histogram(out, "gptoss_time_to_first_token_seconds", "Seconds from arrival to the first generated token.",
    self.ttft)
  write_histogram(out, "gptoss_time_per_output_token_seconds",
    "Seconds per generated token after the first, per sequence.", self.tpot)
  write_steps(out, "gptoss_step_host_seconds", "Seconds of host work a step, by replica.", self.steps, "host")
  write_steps(out, "gptoss_step_waited_seconds", "Seconds a step waited for its replica after the host work.",
    self.steps, "waited")
  return table.concat(out)
end

return serve_metrics
