--- gptoss.getp: the course's "getp" batch workload (docs/course.md#the-getp-workload) on one
-- or more replicas.
--
-- getp.new{...} is the course's warm_up: it builds one replica per device (or takes the
-- replicas given) and runs nothing. g:run(prompts) is its inference(): it tokenizes,
-- partitions the requests over the replicas, and steps every replica from one Lua thread
-- (a replica's next step is enqueued before its running one is read, so GPU steps overlap
-- across devices and with the Lua work). g:close() is its finish. getp.run{..., requests =
-- prompts} does all three.
--
-- Options of getp.new (any other is an error that lists these):
--   model        from gptoss.load or gptoss.synthetic (default: the given replicas' model)
--   tokenizer    from gptoss.tokenizer, required; its vocab_size must be the model's
--   devices      "cpu" or GPU numbers, one replica each (default: every GPU, else {"cpu"})
--   replicas     existing replicas to use instead, each once; they stay the caller's (g:close() leaves
--                them open) and need ctx >= steps - 1
--   replica      options of the replicas getp builds: weights, kv, slots, threads (CPU),
--                rows, chunk (GPU), on_progress; ctx is steps
--   steps        the course's -n: prompt + generated tokens (default 1024; 0 or more than the
--                model's seq_len mean seq_len, as the course clamps it)
--   sampling     nil (greedy) or {temperature=, top_p=, top_k=, min_p=, seed=, presence_penalty=,
--                frequency_penalty=}
--   partition    a name of gptoss.partition.names (default "round_robin") or a function
--                (gptoss.partition)
--   scheduler    a name of gptoss.scheduler.names (default "continuous") or a scheduler
--                object (gptoss.scheduler)
--   on_progress  function(p) before the first step and after each round: p = {done = requests
--                finished, total = requests, tokens = generated so far, max_tokens = the most
--                the run can generate (tokens + what the running requests may still add:
--                it falls as requests stop early), steps =, elapsed = seconds}
--   on_step      function(k, step) before each step getp enqueues on replica k, the shared
--                prefix's included: step = {rows =, prefill_rows = the rows of them feeding
--                a prompt token} (a replica's cumulative r:profile() read there holds every
--                step enqueued before: gptoss.step_profile)
--   requests     the prompts, when known before warm-up (the course reads its file first):
--                they size the slots and are what g:run() runs when given no prompts
--   chat         true: each prompt is a harmony user turn after harmony's default system
--                message, ending <|start|>assistant (gptoss.harmony), as gpt-oss is meant to
--                be prompted; default false: the course's raw prompt
--   share_prefix true (default): prompts of a replica that begin alike (notably chat's
--                system message) have their shared beginning prefilled once, into a slot of
--                its own, and forked into each request's slot (below); false: every prompt
--                is prefilled whole
--   request_numbers  the numbers the prompts run have in a larger run, one a prompt (default
--                1, 2, ...): request j samples with seed + request_numbers[j] - 1 and errors
--                name that number, so that a share of a run (a rank's, gptoss.getp_ranks)
--                draws what the whole run would
-- g.replicas, g.model, g.tokenizer, g.steps (clamped), g.sampling (nil when greedy, else
-- the parameters with the seed chosen), g.share_prefix, g:describe() (one line: replicas,
-- slots, ctx, modes, steps, sampling, partition, scheduler, chat, prefix sharing when off).
--
-- g:run(prompts) returns {outputs = {ids of request 1, ...}, tokens = the course's count,
-- steps = engine steps of all replicas, prefill_saved = prompt rows not stepped thanks to
-- shared prefixes, per_replica = {{requests = assigned, tokens =, steps =, shared_prefix =
-- the prefix length its requests shared (0: none), prefill_saved =, host = seconds of Lua
-- work on its steps, waited = seconds in h:tokens(), prefill_steps = steps feeding a prompt
-- token (the shared prefix's included), prefill_step_rows = all their rows, prefill_rows =
-- the prompt tokens fed, decode_steps = the other steps, decode_step_rows = their rows},
-- ...}, elapsed = seconds}.
--
-- Per request i (docs/course.md#generation-rule-and-token-count):
--   prompt   tok:encode(text, max_tokens = initial_context_length), no BOS/EOS; the text
--            ends at its first NUL byte, as the course's C string does. A prompt of no
--            tokens is an error naming the request (the course's getp exits there). With
--            chat, harmony.render_ids of the turn; one longer than initial_context_length
--            is an error naming the request (a cut would lose <|start|>assistant).
--   feeding  the prompt's L tokens at positions 0..L-1; the id sampled after position p is
--            the next token to feed once p + 1 >= L, and is appended to the output.
--   end      after appending 199999 (<|endoftext|>) or 200002 (<|return|>), which stay in
--            the output and count, or when L + #output = steps (no position above steps - 2
--            is ever fed). A prompt of L >= steps tokens generates nothing and never runs.
--   count    result.tokens, the sum of the outputs' lengths: what the course's inference()
--            returns and divides by the elapsed time.
--
-- Sampling: greedy (the course default) unless sampling.temperature > 0 or a penalty is set. Request i's slot
-- then samples with r:sampling(slot, {..., seed = seed + i - 1}), the seed being chosen at
-- random and kept in g.sampling.seed when none is given. Each draw is keyed by its seed and
-- position only (docs/api.md#default-mode), so a request's output does not depend on the
-- replica, slot, partition, scheduler or batch it runs in. The course's own sampler is one
-- xorshift stream shared by the requests in order (docs/course.md#the-sampler); its draws depend on
-- everything sampled before, which batched generation cannot reproduce.
--
-- Slots: replicas getp builds hold ctx = steps positions and, unless replica.slots says
-- otherwise, min(#requests, 16) slots on the CPU, and on a GPU as many as its free memory
-- holds, at most #requests (getp.gpu_slots, from the replica's memory plan; the request
-- count is known when getp.new is given requests). A step carries at most r.rows rows on a
-- GPU (r.chunk of one slot) and max(64, slots) on the CPU, whose step scratch grows with its
-- rows times the context (only the rows whose ids are read compute logits). GPU replicas getp builds get,
-- unless replica.rows says otherwise, rows = slots + a quarter of them (at least 128) for
-- prefill, and at least 2048: with rows = slots, a step whose slots all decode has no row left
-- for a newly admitted prompt, and the last prompts of a full start wait many steps; steps of
-- fewer rows prefill long prompts in many steps where the experts' GEMMs are least efficient
-- (docs/getp.md#slots-and-rows).
--
-- Shared prefixes (share_prefix): for each replica, P is the length of the longest common
-- beginning of its queued prompts, at most the shortest one's length - 1 (the last prompt
-- row yields the first id). The replica's last slot then holds those P ids, prefilled before
-- the first step and never offered to requests, and each admitted request's slot gets them
-- by r:fork, its prompt fed from position P: (requests - 1) * P prompt rows saved. Forks are
-- bit-identical to prefills, so the outputs are the same either way. A slot is worth that
-- when the replica has one to spare (more slots than queued requests) or P is at least
-- SHARED_PREFIX_MIN ids (getp_run.lua; chat's system message is longer); it takes P >= 1,
-- two requests and two slots at least. With chat, replicas getp builds get one slot more
-- for it (when two requests or more are known at getp.new).
--
-- Partitions: gptoss.partition; schedulers: gptoss.scheduler (whose header describes the
-- hooks, the state they see and the sequence objects). getp's pieces: getp_options.lua
-- (getp.new's options checked), getp_replicas.lua (the replicas built or given: slots,
-- rows), getp_run.lua (g:run: requests, shared prefixes, the step loop) and runner.lua (one
-- replica's steps under a scheduler).
local getp_options = require "gptoss.getp_options"
local getp_replicas = require "gptoss.getp_replicas"
local getp_run = require "gptoss.getp_run"

local getp = {}

-- Helpers of getp's pieces that callers use too; each is documented where it is defined.
getp.gpu_slots = getp_replicas.gpu_slots     -- the slots a GPU replica's free memory holds
getp.device_name = getp_replicas.device_name -- "cpu" or "gpu N", as messages name a device
getp.clamp_steps = getp_options.clamp_steps  -- the course's -n once the model is known
getp.prompt_ids = getp_run.prompt_ids        -- a request's prompt ids

--- The requests a partition sees for prompts (docs/getp.md#partitions), as g:run makes
-- them: run = {model =, tokenizer =, steps = (clamped), chat =}; numbers as request_numbers.
function getp.requests_of(run, prompts, numbers)
  return getp_run.requests_of(run, prompts, numbers, 2)
end

local Getp = {}
Getp.__index = Getp

--- Builds (or takes) the replicas; runs nothing. See the header for the options.
function getp.new(opts)
  return getp_options.create(opts, 3, Getp)
end

--- Runs the prompts (a list of strings; default: the requests given to getp.new).
-- Returns {outputs = {ids of request i, ...}, tokens = the course's count, steps = engine
-- steps, per_replica = {{requests=, tokens=, steps=, host=, waited=, ...}, ...}, elapsed =
-- seconds} (the header says each field).
function Getp:run(prompts)
  return getp_run.run(self, prompts, 3)
end

--- One line: the replicas (device, slots, ctx, modes), steps, sampling, partition, scheduler,
-- chat, and prefix sharing when it is off.
function Getp:describe()
  local parts = {}
  for k, r in ipairs(self.replicas) do
    if r.closed then
      parts[k] = "closed"
    else
      local rows, chunk = getp_replicas.bounds(r)
      parts[k] = ("%s (%d %s, ctx %d, weights %s, kv %s, %d rows a step%s)"):format(getp.device_name(r.device),
        r.slots, r.slots == 1 and "slot" or "slots", r.ctx, r.weights, r.kv, rows,
        chunk < rows and (", %d of one slot"):format(chunk) or "")
    end
  end
  local s = self.sampling
  local penalties = s and (s.presence_penalty or s.frequency_penalty)
      and (", presence_penalty %g, frequency_penalty %g"):format(s.presence_penalty or 0, s.frequency_penalty or 0) or ""
  local sampling = s and ("temperature %g, top_p %g, top_k %d, min_p %g%s, seed %d + request - 1")
      :format(s.temperature, s.top_p or 1, s.top_k or 0, s.min_p or 0, penalties, s.seed) or "greedy"
  return ("getp: %d %s: %s; steps %d; %s; partition %s; scheduler %s%s%s"):format(#self.replicas,
    #self.replicas == 1 and "replica" or "replicas", table.concat(parts, ", "), self.steps, sampling,
    self.partition_name, self.scheduler.name or "custom", self.chat and "; prompts as harmony user turns" or "",
    self.share_prefix and "" or "; prompt prefixes not shared")
end

--- Closes the replicas getp built (not the ones it was given). Idempotent.
function Getp:close()
  if self.closed then return end
  self.closed = true
  if self.owned then getp_replicas.close_all(self.replicas) end
end

Getp.__close = Getp.close
Getp.__tostring = Getp.describe

--- new + run + close: getp.run{..., requests = prompts} returns run's result.
function getp.run(opts)
  local g <close> = getp_options.create(opts, 3, Getp)
  return getp_run.run(g, opts.requests, 3)
end

return getp
