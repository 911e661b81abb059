// The official openai client against gptoss serve, for tests/serve_spec.lua:
//   node client.mjs BASE_URL API_KEY OP 'JSON'
// prints one JSON line: the result of OP, or {"error": {status, type, param, code, message}}
// when the server answered with an error (the client's APIError).
import OpenAI from "openai";
import { agentOps } from "./agent_loop.mjs";
import { responsesOps } from "./responses.mjs";

const [baseURL, apiKey, op, json] = process.argv.slice(2);
const params = JSON.parse(json || "{}");
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// A chat that calls a tool, then answers: the tool's result goes back as a tool message.
async function toolRoundTrip(p) {
  const first = await client.chat.completions.create(p);
  const message = first.choices[0].message;
  const call = message.tool_calls[0];
  const args = JSON.parse(call.function.arguments);
  const second = await client.chat.completions.create({
    ...p,
    messages: [...p.messages, message,
      { role: "tool", tool_call_id: call.id, content: JSON.stringify({ city: args.city, sky: "sunny" }) }],
  });
  return { first, args, second };
}

const ops = {
  ...responsesOps(client, collect), // responses_create, responses_tool_loop, ...
  ...agentOps(client, collect), // agent_chat, agent_responses: an Agents SDK tool loop
  models: () => client.models.list().then((page) => page.data),
  chat: (p) => client.chat.completions.create(p),
  chat_stream: (p) => client.chat.completions.create({ ...p, stream: true }).then(collect),
  // structured outputs: message.parsed from a json_schema response_format, a strict tool's
  // calls' parsed_arguments
  chat_parse: (p) => client.chat.completions.parse(p),
  completion: (p) => client.completions.create(p),
  completion_stream: (p) => client.completions.create({ ...p, stream: true }).then(collect),
  // many completions at once: p.requests is a list of bodies
  concurrent_completions: (p) => Promise.all(p.requests.map((r) => client.completions.create(r))),
  tool_round_trip: toolRoundTrip,
  model: (p) => client.models.retrieve(p.id),
  // a stream left after p.chunks chunks, its connection aborted: the chunks read
  chat_stream_abort: async (p) => {
    const { chunks, ...body } = p;
    const stream = await client.chat.completions.create({ ...body, stream: true });
    const read = [];
    for await (const chunk of stream) {
      read.push(chunk);
      if (read.length >= chunks) break; // leaving the loop aborts the request
    }
    return read;
  },
};

try {
  console.log(JSON.stringify(await ops[op](params)));
} catch (e) {
  if (!(e instanceof OpenAI.APIError)) throw e;
  console.log(JSON.stringify({ error: { status: e.status, type: e.type, param: e.param, code: e.code,
    message: e.message } }));
}
