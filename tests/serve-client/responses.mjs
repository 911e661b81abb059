// The official openai client's Responses API against gptoss serve: the ops client.mjs runs
// for tests/serve_responses_spec.lua (node client.mjs BASE_URL API_KEY responses_OP 'JSON').

// client: an OpenAI client; collect(stream): the events of a stream, in a list.
export function responsesOps(client, collect) {
  // The client's stream helper: every event it emits, and the response it puts together.
  async function helperStream(p) {
    const stream = client.responses.stream(p);
    const events = await collect(stream);
    return { events, final: await stream.finalResponse() };
  }

  // A tool loop: the model calls the tool, its output goes back (chained by
  // previous_response_id, or with the whole conversation as input when p.chain is false).
  async function toolLoop({ chain, ...p }) {
    const first = await client.responses.create(p);
    const call = first.output.find((item) => item.type === "function_call");
    const args = JSON.parse(call.arguments);
    const result = { type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ sky: "sunny" }) };
    const input = typeof p.input === "string" ? [{ role: "user", content: p.input }] : p.input;
    const second = await client.responses.create(chain === false
      ? { ...p, input: [...input, ...first.output, result] }
      : { ...p, previous_response_id: first.id, input: [result] });
    return { first, args, second };
  }

  return {
    responses_create: (p) => client.responses.create(p),
    responses_parse: (p) => client.responses.parse(p), // output_parsed from a json_schema text.format
    responses_create_stream: (p) => client.responses.create({ ...p, stream: true }).then(collect),
    responses_helper_stream: helperStream,
    responses_retrieve: (p) => client.responses.retrieve(p.id),
    responses_tool_loop: toolLoop,
  };
}
