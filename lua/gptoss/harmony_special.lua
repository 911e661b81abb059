--- gptoss.harmony_special (internal, gptoss.harmony's): the special ids of o200k_harmony that
-- the format uses, and those that end sampling, read by the renderer (harmony.lua) and the
-- streaming parser (harmony_parser.lua) alike; gptoss.harmony exports both.
local special = {
  startoftext = 199998, endoftext = 199999, ["return"] = 200002, constrain = 200003,
  channel = 200005, start = 200006, ["end"] = 200007, message = 200008, call = 200012,
}

return {
  special = special,
  -- <|return|> (answer done), <|call|> (a tool call), <|endoftext|>
  stop_ids = { special["return"], special.call, special.endoftext },
}
