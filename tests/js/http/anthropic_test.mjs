// The official `@anthropic-ai/sdk` npm client (pinned in tests/js/package.json) against a real
// `strata serve` running the embedded demo model through /v1/messages: the Message shape,
// streaming with the SDK's accumulator, stop sequences, forced tool use and a tool_result turn,
// token counting, and errors surfacing as the SDK's typed errors.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { requirePackages, Server } from "./common.mjs";

requirePackages("@anthropic-ai/sdk");
const {
  default: Anthropic, AuthenticationError, BadRequestError, NotFoundError,
} = await import("@anthropic-ai/sdk");

const KEY = "sk-strata-test";
const MODEL = "strata-demo";
let server;
let client;

before(async () => {
  server = await Server.start(["--api-key", KEY]);
  client = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `strata serve exited with ${code}:\n${server.stderr}`);
});

const hello = [{ role: "user", content: "Tell me about Strata." }];
// The demo model speaks Kimi K3's format, which thinks first unless told not to: tests of the
// text turn thinking off.
const greedy = { model: MODEL, messages: hello, max_tokens: 12, temperature: 0,
                 thinking: { type: "disabled" } };

function textOf(message) {
  return message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
}

test("a message has Anthropic's shape and usage matching count_tokens", async () => {
  const m = await client.messages.create({ ...greedy, system: "Answer briefly." });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.equal(m.model, MODEL);
  assert.match(m.id, /^msg/);
  assert.equal(m.content[0].type, "text");
  assert.ok(["max_tokens", "end_turn"].includes(m.stop_reason));
  if (m.stop_reason === "max_tokens") assert.equal(m.usage.output_tokens, 12);
  assert.equal(m.stop_sequence, null);
  const counted = await client.messages.countTokens({ model: MODEL, messages: hello,
                                                      system: "Answer briefly.",
                                                      thinking: { type: "disabled" } });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, counted.input_tokens);
  // The system prompt is in the prompt (as text blocks too).
  const longer = await client.messages.countTokens({
    model: MODEL, messages: hello, thinking: { type: "disabled" },
    system: [{ type: "text", text: "Answer briefly." }, { type: "text", text: "Use plain words." }],
  });
  assert.ok(longer.input_tokens > counted.input_tokens);
});

test("streaming gives the same text through the SDK's accumulator", async () => {
  const whole = await client.messages.create(greedy);
  const stream = client.messages.stream(greedy);
  const types = [];
  stream.on("streamEvent", (event) => types.push(event.type));
  let deltas = "";
  stream.on("text", (text) => { deltas += text; });
  const final = await stream.finalMessage();
  assert.equal(textOf(final), textOf(whole));
  assert.equal(deltas, textOf(whole));
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(types.at(-2), "message_delta");
  assert.ok(types.includes("content_block_start") && types.includes("content_block_stop"));
});

test("a stop sequence ends the text before it and is reported", async () => {
  const free = textOf(await client.messages.create({ ...greedy, max_tokens: 24 }));
  let stop = null;
  for (let i = 2; i + 2 <= free.length && !stop; ++i) {
    const pair = free.slice(i, i + 2);
    if (/^[\x21-\x7e]{2}$/.test(pair)) stop = pair;
  }
  assert.ok(stop, `no ASCII pair in the greedy output ${JSON.stringify(free)}`);
  const m = await client.messages.create({ ...greedy, max_tokens: 24,
                                           stop_sequences: [stop, "\u0000never"] });
  assert.equal(textOf(m), free.slice(0, free.indexOf(stop)));
  assert.equal(m.stop_reason, "stop_sequence");
  assert.equal(m.stop_sequence, stop);
});

test("tool_choice tool forces a schema-valid tool_use; a tool_result turn continues", async () => {
  const tools = [{
    name: "get_weather", description: "Weather of a city",
    input_schema: { type: "object", properties: { city: { type: "string", maxLength: 10 } },
                     required: ["city"], additionalProperties: false },
  }];
  // Thinking on, capped (budget_tokens), then the forced call: a thinking block, then tool_use.
  const m = await client.messages.create({ model: MODEL, messages: hello, max_tokens: 300, tools,
                                           thinking: { type: "enabled", budget_tokens: 16 },
                                           tool_choice: { type: "tool", name: "get_weather" } });
  assert.equal(m.content[0].type, "thinking", JSON.stringify(m.content));
  assert.ok(m.content[0].thinking.length > 0);
  const uses = m.content.filter((b) => b.type === "tool_use");
  assert.ok(uses.length >= 1, JSON.stringify(m.content));
  assert.equal(m.stop_reason, "tool_use");
  assert.equal(uses[0].name, "get_weather");
  assert.equal(typeof uses[0].input.city, "string");
  // maxLength counts characters (code points); a String's length counts UTF-16 units.
  assert.ok([...uses[0].input.city].length <= 10, JSON.stringify(uses[0].input));
  const next = await client.messages.create({
    model: MODEL, tools, max_tokens: 4, messages: [
      ...hello,
      { role: "assistant", content: m.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id,
                                  content: "sunny" }] }],
  });
  assert.ok(next.usage.input_tokens + next.usage.cache_read_input_tokens >
            m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test("errors are the SDK's typed errors with Anthropic's error types", async () => {
  await assert.rejects(client.messages.create({ model: MODEL, messages: hello }),
                       (e) => e instanceof BadRequestError &&
                              e.error?.error?.type === "invalid_request_error" &&
                              /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create({ ...greedy, model: "no-such-model" }),
                       (e) => e instanceof NotFoundError &&
                              e.error?.error?.type === "not_found_error");
  await assert.rejects(client.messages.create({ ...greedy, messages: [
                         { role: "system", content: "x" }] }),
                       (e) => e instanceof BadRequestError && /role/.test(e.message));
  await assert.rejects(client.messages.create({ ...greedy, tools: [
                         { type: "web_search_20250305", name: "web_search" }] }),
                       (e) => e instanceof BadRequestError && /server tool/.test(e.message));
  const wrongKey = new Anthropic({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrongKey.messages.create(greedy),
                       (e) => e instanceof AuthenticationError &&
                              e.error?.error?.type === "authentication_error");
});

test("thinking: a capped thinking block, then the text; disabled: text only", async () => {
  const ask = { model: MODEL, messages: hello, max_tokens: 40, temperature: 0 };
  const thinking = { type: "enabled", budget_tokens: 6 };
  const m = await client.messages.create({ ...ask, thinking });
  assert.deepEqual(m.content.map((b) => b.type).slice(0, 2), ["thinking", "text"],
                   JSON.stringify(m.content));
  assert.ok(m.content[0].thinking.length > 0 && m.content[1].text.length > 0);
  for (const block of m.content) {
    assert.ok(!/<\|(open|close|sep|end_of_msg)\|>/.test(block.thinking ?? block.text ?? ""));
  }
  // Streamed: thinking deltas, then text deltas, adding up to the same blocks.
  const stream = client.messages.stream({ ...ask, thinking });
  let thought = "";
  let text = "";
  stream.on("thinking", (delta) => { thought += delta; });
  stream.on("text", (delta) => { text += delta; });
  await stream.finalMessage();
  assert.equal(thought, m.content[0].thinking);
  assert.equal(text, textOf(m));
  const off = await client.messages.create({ ...ask, thinking: { type: "disabled" } });
  assert.ok(off.content.every((b) => b.type === "text"), JSON.stringify(off.content));
  await assert.rejects(client.messages.create({ ...ask, thinking: { type: "enabled",
                                                                    budget_tokens: 0 } }),
                       (e) => e instanceof BadRequestError && /budget_tokens/.test(e.message));
});
