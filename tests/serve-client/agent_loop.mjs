// An agent's tool loop over the official openai client, in the request shapes OpenAI's Agents
// SDK sends (openai/gpt-oss's compatibility test runs its cases through it): the ops client.mjs
// runs for tests/serve_conformance_spec.lua (node client.mjs BASE_URL API_KEY agent_OP 'JSON').
// p: {model, input (the user's text), tool: {name, description, parameters}, output (the tool's
// result), stream, sampling (fields added to every request: temperature, seed, ...), limit (the
// second turn's max tokens)}. The first turn requires the call, the second is the model's own.

// A streamed chat answer put together as the SDK does: each delta's text appended, a tool
// call's id, name and arguments appended by its index.
function assembleChat(chunks) {
  const message = { role: "assistant", reasoning: "", content: "" };
  const calls = [];
  for (const chunk of chunks) {
    const delta = chunk.choices[0]?.delta ?? {};
    message.reasoning += delta.reasoning ?? "";
    message.content += delta.content ?? "";
    for (const d of delta.tool_calls ?? []) {
      calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
      calls[d.index].id += d.id ?? "";
      calls[d.index].function.name += d.function?.name ?? "";
      calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
  }
  return { ...message, tool_calls: calls };
}

// The stream's events and the response its response.completed carries, the one the SDK reads.
function completedOf(events) {
  return events.findLast((e) => e.type === "response.completed")?.response;
}

export function agentOps(client, collect) {
  async function chatTurn(body, stream) {
    if (!stream) return { answer: await client.chat.completions.create(body) };
    const chunks = await client.chat.completions.create({ ...body, stream: true }).then(collect);
    return { chunks, message: assembleChat(chunks) };
  }

  // Chat: the call's turn, then the call and its output sent back as the SDK sends them (the
  // assistant message carries its reasoning and calls and no content).
  async function agentChat({ model, input, tool, output, stream, sampling, limit }) {
    const user = { role: "user", content: input };
    const tools = [{ type: "function", function: { ...tool, strict: true } }];
    const shared = { model, tools, response_format: { type: "text" }, ...sampling };
    const first = await chatTurn({ ...shared, messages: [user], tool_choice: "required" }, stream);
    const message = first.message ?? first.answer.choices[0].message;
    const calls = message.tool_calls.map(({ id, type, function: f }) => ({ id, type, function: f }));
    const messages = [user, { role: "assistant", tool_calls: calls, reasoning: message.reasoning },
      { role: "tool", tool_call_id: calls[0].id, content: output }];
    const second = await client.chat.completions.create({ ...shared, messages, tool_choice: "auto",
      max_tokens: limit });
    return { ...first, second };
  }

  async function responsesTurn(body, stream) {
    if (!stream) return { answer: await client.responses.create(body) };
    const events = await client.responses.create({ ...body, stream: true }).then(collect);
    return { events, answer: completedOf(events) };
  }

  // Responses: the whole conversation sent again, the first answer's output items as they came
  // and the call's output after them (no previous_response_id), as the SDK does.
  async function agentResponses({ model, input, tool, output, stream, sampling, limit }) {
    const user = { role: "user", content: input };
    const shared = { model, tools: [{ type: "function", ...tool, strict: true }], include: [],
      text: { format: { type: "text" } }, ...sampling };
    const first = await responsesTurn({ ...shared, input: [user], tool_choice: "required" }, stream);
    const call = first.answer.output.find((item) => item.type === "function_call");
    const result = { type: "function_call_output", call_id: call.call_id, output, status: "completed" };
    const second = await client.responses.create({ ...shared, input: [user, ...first.answer.output, result],
      tool_choice: "auto", max_output_tokens: limit });
    return { ...first, second };
  }

  return { agent_chat: agentChat, agent_responses: agentResponses };
}
