--- gptoss.lengths: the prompt and output lengths a serving benchmark draws, as vLLM's
-- ShareGPT benchmark has them (ShareGPT_V3's conversations as it samples them: input about
-- 220 tokens, output about 200), from lognormal distributions of those means, sigma 0.8 for
-- input and 0.7 for output. gptoss bench_serve's requests and tests/serve_host_bench.lua's
-- draw them here, so that both load a server alike. Draws use math.random (seed it first).
local lengths = {}

--- The distributions: {mean =, sigma =} of the input and of the output.
lengths.sharegpt = { input = { mean = 220, sigma = 0.8 }, output = { mean = 200, sigma = 0.7 } }

--- A lognormal draw of distribution d's mean (mu = log(mean) - sigma^2 / 2), as a token
-- count in 4..max_len.
function lengths.lognormal(d, max_len)
  local z = math.sqrt(-2 * math.log(1 - math.random())) * math.cos(2 * math.pi * math.random())
  local v = math.exp(math.log(d.mean) - d.sigma ^ 2 / 2 + d.sigma * z)
  return math.max(4, math.min(max_len, math.floor(v + 0.5)))
end

--- A request's input and output lengths drawn as ShareGPT's (input first), each in 4..max_len.
function lengths.draw_sharegpt(max_len)
  local input = lengths.lognormal(lengths.sharegpt.input, max_len)
  return input, lengths.lognormal(lengths.sharegpt.output, max_len)
end

return lengths
