// The official `openai` npm client (pinned in tests/js/package.json) against a real
// `strata serve` running the embedded demo model: chat and completions, streaming and not, n,
// logprobs, stop, seed, tools, usage, and errors surfacing as the SDK's typed errors.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { assertServeRefuses, requirePackages, Server, sleep } from "./common.mjs";

requirePackages("openai");
const {
  default: OpenAI, AuthenticationError, BadRequestError, NotFoundError, RateLimitError,
} = await import("openai");

const KEY = "sk-strata-test";
const MODEL = "strata-demo";
let server;
let client;

before(async () => {
  server = await Server.start(["--api-key", KEY]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `strata serve exited with ${code}:\n${server.stderr}`);
});

const hello = [{ role: "user", content: "Tell me about Strata." }];
// The demo model speaks Kimi K3's format, which thinks first by default (the reply opens in the
// think channel, reasoning_content). Tests of the answer's text turn thinking off, as a K3
// client does with reasoning_effort "none" (Responses: reasoning.effort "none").
const OFF = { reasoning_effort: "none" };
const RESPONSES_OFF = { reasoning: { effort: "none" } };

async function streamText(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = "";
  let finish = null;
  let usage = null;
  let role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      if (choice.delta.content) text += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return { text, finish, usage, role };
}

test("models lists the served model with its context length", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, MODEL);
  assert.ok(models.data[0].max_model_len > 1000);
  const one = await client.models.retrieve(MODEL);
  assert.equal(one.id, MODEL);
});

test("chat completion has the OpenAI shape and consistent usage", async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: hello, max_tokens: 8,
                                                   temperature: 0 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 10);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, "number");
});

test("stream equals non-stream for the same seed, with a usage chunk", async () => {
  const params = { model: MODEL, messages: hello, max_tokens: 12, temperature: 0.8, seed: 7,
                   ...OFF };
  const whole = await client.chat.completions.create(params);
  const streamed = await streamText(params);
  assert.equal(streamed.role, "assistant");
  assert.equal(streamed.text, whole.choices[0].message.content);
  assert.equal(streamed.finish, whole.choices[0].finish_reason);
  assert.deepEqual(streamed.usage, whole.usage);
  // The SDK's stream helper assembles the same message.
  const helper = client.chat.completions.stream(params);
  const final = await helper.finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
});

test("the same seed gives the same output; another seed another", async () => {
  const params = { model: MODEL, messages: hello, max_tokens: 12, temperature: 1, ...OFF };
  const a = await client.chat.completions.create({ ...params, seed: 5 });
  const b = await client.chat.completions.create({ ...params, seed: 5 });
  const c = await client.chat.completions.create({ ...params, seed: 6 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
});

test("n choices with logprobs and top_logprobs", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 4, n: 3, seed: 11, logprobs: true,
    top_logprobs: 2, temperature: 1,
  });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  let tokens = 0;
  for (const choice of r.choices) {
    const content = choice.logprobs.content;
    assert.ok(content.length >= 1 && content.length <= 4);
    tokens += content.length;
    for (const entry of content) {
      assert.equal(typeof entry.token, "string");
      assert.ok(entry.logprob <= 0);
      assert.ok(Array.isArray(entry.bytes));
      assert.equal(entry.top_logprobs.length, 2);
      assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob);
      assert.ok(entry.logprob <= entry.top_logprobs[0].logprob + 1e-4);
    }
  }
  assert.equal(r.usage.completion_tokens, tokens);
});

test("a stop string ends the text before it", async () => {
  const params = { model: MODEL, messages: hello, max_tokens: 24, temperature: 0, ...OFF };
  const free = (await client.chat.completions.create(params)).choices[0].message.content;
  // An ASCII pair from the middle of the greedy output.
  let stop = null;
  for (let i = 2; i + 2 <= free.length && !stop; ++i) {
    const pair = free.slice(i, i + 2);
    if (/^[\x21-\x7e]{2}$/.test(pair)) stop = pair;
  }
  assert.ok(stop, `no ASCII pair in the greedy output ${JSON.stringify(free)}`);
  const r = await client.chat.completions.create({ ...params, stop: [stop, "\u0000never"] });
  assert.equal(r.choices[0].message.content, free.slice(0, free.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
});

test("completions: string and token-id prompts, echo, stream == non-stream", async () => {
  const params = { model: MODEL, prompt: "Strata serves", max_tokens: 8, temperature: 0.7,
                   seed: 3 };
  const whole = await client.completions.create(params);
  assert.equal(whole.object, "text_completion");
  assert.match(whole.id, /^cmpl-/);
  const stream = await client.completions.create({ ...params, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, whole.choices[0].text);
  const echoed = await client.completions.create({ ...params, echo: true });
  assert.equal(echoed.choices[0].text, "Strata serves" + whole.choices[0].text);
  const ids = await client.completions.create({ model: MODEL, prompt: [1, 2, 3, 4],
                                                max_tokens: 2 });
  assert.equal(ids.usage.prompt_tokens, 4);
  const lp = await client.completions.create({ ...params, logprobs: 2 });
  assert.equal(lp.choices[0].logprobs.tokens.length, lp.usage.completion_tokens);
  assert.equal(Object.keys(lp.choices[0].logprobs.top_logprobs[0]).length >= 1, true);
});

test("scoring as lm-evaluation-harness does: echo + logprobs, max_tokens 0, prompt_logprobs",
     async () => {
  // Two contexts + continuations in one request, as token ids; the continuation's log-likelihood
  // is the sum of its tokens' echoed log-probabilities.
  const prompts = [[11, 12, 13, 14, 15, 16], [21, 22, 23, 24]];
  const scored = await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 1,
                                                   logprobs: 1, echo: true, temperature: 0 });
  assert.equal(scored.choices.length, 2);
  const alone = await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 0,
                                                  logprobs: 1, echo: true });
  const vllm = await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 1,
                                                 prompt_logprobs: 1 });
  for (let i = 0; i < 2; ++i) {
    const lp = scored.choices[i].logprobs;
    assert.equal(lp.tokens.length, prompts[i].length + 1);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    const only = alone.choices[i];
    assert.equal(only.finish_reason, "length");
    assert.equal(only.logprobs.tokens.length, prompts[i].length);
    const entries = vllm.choices[i].prompt_logprobs;
    assert.equal(entries.length, prompts[i].length);
    assert.equal(entries[0], null);
    for (let t = 1; t < prompts[i].length; ++t) {
      assert.ok(lp.token_logprobs[t] <= 0);
      assert.ok(Math.abs(lp.token_logprobs[t] - only.logprobs.token_logprobs[t]) < 1e-4);
      const mine = entries[t][String(prompts[i][t])];
      assert.ok(Math.abs(mine.logprob - lp.token_logprobs[t]) < 1e-4);
      assert.ok(mine.rank >= 1);
      // is_greedy as the harness computes it: the token's logprob is the top one's.
      const best = Math.max(...Object.values(lp.top_logprobs[t]));
      assert.equal(mine.rank === 1, lp.token_logprobs[t] === best);
    }
  }
  assert.equal(alone.usage.completion_tokens, 0);
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: "x", prompt_logprobs: 1, stream: true }),
    (e) => e instanceof BadRequestError && e.param === "prompt_logprobs");
});

test("tools are declared to the model and the reply has a valid shape", async () => {
  const tools = [{ type: "function", function: {
    name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const plain = await client.chat.completions.create({ model: MODEL, messages: hello,
                                                       max_tokens: 4 });
  const r = await client.chat.completions.create({ model: MODEL, messages: hello, tools,
                                                   tool_choice: "auto", max_tokens: 4 });
  assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens);
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
  for (const call of r.choices[0].message.tool_calls ?? []) {
    assert.equal(call.type, "function");
    assert.equal(typeof call.function.arguments, "string");
  }
  // A tool result turn is accepted.
  const followUp = await client.chat.completions.create({
    model: MODEL, tools, max_tokens: 2, messages: [
      ...hello,
      { role: "assistant", content: null, tool_calls: [{ id: "functions.get_weather:0",
        type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
      { role: "tool", tool_call_id: "functions.get_weather:0", content: "sunny" }],
  });
  assert.ok(followUp.usage.prompt_tokens > r.usage.prompt_tokens);
});

test("thinking: reasoning_content first, then the constrained answer", async () => {
  // K3 thinks by default: the JSON constraint applies only after the think channel closes
  // (`<|close|>think<|sep|>`), which thinking_token_budget forces after 24 tokens here (the
  // random weights would reason until max_tokens).
  const params = { model: MODEL, messages: hello, max_tokens: 1000, temperature: 1, seed: 8,
                   thinking_token_budget: 24, response_format: personFormat };
  // Seeded draws repeat for the same cache state: a prefix hit reads the prompt's latent rows
  // back from the bf16 cache, which moves the logits in their last bits, and this flat random
  // model's draws at temperature 1 can follow. A first request caches the prompt for both.
  await client.chat.completions.create({ ...params, max_tokens: 1 });
  const reply = await client.chat.completions.create(params);
  const message = reply.choices[0].message;
  assert.equal(reply.choices[0].finish_reason, "stop");
  checkPerson(message.content);
  assert.ok(message.reasoning_content.length > 0);
  for (const text of [message.content, message.reasoning_content]) {
    assert.ok(!/<\|(open|close|sep|end_of_msg)\|>/.test(text), text);
  }
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let reasoning = "";
  let content = "";
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      reasoning += choice.delta.reasoning_content ?? "";
      content += choice.delta.content ?? "";
    }
  }
  assert.equal(content, message.content);
  assert.equal(reasoning, message.reasoning_content);
  // A budget of 0 closes the reasoning at once.
  const none = await client.chat.completions.create({ ...params, thinking_token_budget: 0 });
  assert.equal(none.choices[0].message.reasoning_content ?? "", "");
  checkPerson(none.choices[0].message.content);
  await assert.rejects(
    client.chat.completions.create({ ...params, thinking_token_budget: -1 }),
    (e) => e instanceof BadRequestError && e.param === "thinking_token_budget");
});

test("min_tokens keeps the end of turn out until that many tokens", async () => {
  // A strong bias makes the end of turn the first choice; min_tokens holds it back.
  const r = await fetch(`${server.url}/tokenize`, {
    method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: MODEL, prompt: "<|end_of_msg|>", add_special_tokens: false }) });
  const [endOfMessage] = (await r.json()).tokens;
  const params = { model: MODEL, messages: hello, max_tokens: 50, temperature: 0,
                   logit_bias: { [endOfMessage]: 100 }, ...OFF };
  const quick = await client.chat.completions.create(params);
  assert.equal(quick.choices[0].finish_reason, "stop");
  assert.ok(quick.usage.completion_tokens <= 1, JSON.stringify(quick.usage));
  const held = await client.chat.completions.create({ ...params, min_tokens: 12 });
  assert.equal(held.choices[0].finish_reason, "stop");
  assert.ok(held.usage.completion_tokens >= 12, JSON.stringify(held.usage));
  assert.ok(held.usage.completion_tokens <= 13, JSON.stringify(held.usage));
});

test("tool_choice required and named force schema-valid tool calls", async () => {
  // The random weights call tools only because the constraint makes them.
  const tools = [
    { type: "function", function: { name: "get_weather", parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 10 },
                                    unit: { enum: ["celsius", "fahrenheit"] } },
      required: ["city"], additionalProperties: false } } },
    { type: "function", function: { name: "add", parameters: {
      type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } },
      required: ["a", "b"], additionalProperties: false } } },
  ];
  const check = (call) => {
    assert.equal(call.type, "function");
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === "get_weather") {
      assert.equal(typeof args.city, "string");
      assert.ok([...args.city].length <= 10);
      if ("unit" in args) assert.ok(["celsius", "fahrenheit"].includes(args.unit));
    } else {
      assert.equal(call.function.name, "add");
      assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), call.function.arguments);
    }
  };
  // Thinking on (K3's default): the reasoning, capped, then the forced tools channel.
  const required = await client.chat.completions.create({
    model: MODEL, messages: hello, tools, tool_choice: "required", max_tokens: 1500,
    temperature: 1, seed: 3, n: 3, thinking_token_budget: 16 });
  for (const choice of required.choices) {
    assert.equal(choice.finish_reason, "tool_calls");
    assert.ok(choice.message.tool_calls.length >= 1);
    assert.ok(choice.message.reasoning_content.length > 0);
    choice.message.tool_calls.forEach(check);
  }
  const named = await client.chat.completions.create({
    model: MODEL, messages: hello, tools, max_tokens: 1500, temperature: 1, seed: 4, ...OFF,
    tool_choice: { type: "function", function: { name: "add" } } });
  const calls = named.choices[0].message.tool_calls;
  assert.equal(named.choices[0].finish_reason, "tool_calls");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, "add");
  assert.match(calls[0].id, /^chatcmpl-tool-[0-9a-f]{32}$/);  // vLLM's kimi_k3 ids
  check(calls[0]);
  // Streaming: the same call arrives as tool-call deltas.
  const stream = await client.chat.completions.create({
    model: MODEL, messages: hello, tools, max_tokens: 1500, temperature: 1, seed: 4, ...OFF,
    tool_choice: { type: "function", function: { name: "add" } }, stream: true });
  let args = "";
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      for (const d of choice.delta.tool_calls ?? []) args += d.function?.arguments ?? "";
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(finish, "tool_calls");
  assert.equal(args, calls[0].function.arguments);
});

test("a repeated long prompt reports cached tokens", async () => {
  const long = Array.from({ length: 150 }, (_, i) => `item${i}`).join(" ");
  const messages = [{ role: "user", content: long }];
  const first = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1 });
  const second = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1 });
  assert.ok(first.usage.prompt_tokens > 128);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 64,
            JSON.stringify(second.usage));
});

test("errors surface as the SDK's typed errors with code and param", async () => {
  const expectError = async (promise, Type, status, code, param) => {
    await assert.rejects(promise, (e) => {
      assert.ok(e instanceof Type, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, status);
      assert.equal(e.code, code);
      assert.equal(e.param, param);
      assert.equal(e.type, status === 429 ? "rate_limit_error" : "invalid_request_error");
      return true;
    });
  };
  await expectError(client.chat.completions.create({ model: MODEL, messages: hello,
                                                     temperature: 5 }),
                    BadRequestError, 400, "invalid_value", "temperature");
  await expectError(client.chat.completions.create({ model: MODEL, messages: [] }),
                    BadRequestError, 400, "invalid_value", "messages");
  await expectError(client.chat.completions.create({ model: MODEL, messages: hello,
                                                     max_tokens: 100000000 }),
                    BadRequestError, 400, "context_length_exceeded", "max_tokens");
  await expectError(client.chat.completions.create({ model: MODEL, messages: hello,
                                                     response_format: { type: "json_schema",
                                                       json_schema: { name: "p", schema: {
                                                         type: "string", pattern: "(?=a)" } } } }),
                    BadRequestError, 400, "invalid_value", "response_format.json_schema.schema");
  await expectError(client.chat.completions.create({ model: "gpt-4o", messages: hello }),
                    NotFoundError, 404, "model_not_found", "model");
  const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong", maxRetries: 0 });
  await expectError(stranger.models.list(), AuthenticationError, 401, "invalid_api_key", null);
});

// Structured output: the demo model's weights are random, so only the constraint makes its
// replies JSON. The schema bounds every part (strings, numbers, arrays; whitespace is bounded
// by the matcher), so 1000 tokens always reach the end.
const personFormat = {
  type: "json_schema",
  json_schema: {
    name: "person", strict: true,
    schema: {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 12 },
        age: { type: "integer" },
        tags: { type: "array", items: { enum: ["red", "green"] }, maxItems: 3 },
        pet: { anyOf: [{ type: "null" }, { type: "object", properties: { kind: { const: "cat" } },
                                             required: ["kind"], additionalProperties: false }] },
        ok: { type: "boolean" },
      },
      required: ["name", "age", "ok"], additionalProperties: false,
    },
  },
};

function checkPerson(text) {
  const p = JSON.parse(text);
  assert.equal(typeof p, "object", text);
  for (const key of Object.keys(p)) {
    assert.ok(["name", "age", "tags", "pet", "ok"].includes(key), `unexpected key ${key}: ${text}`);
  }
  assert.equal(typeof p.name, "string", text);
  assert.ok([...p.name].length <= 12, text);
  assert.ok(Number.isInteger(p.age), text);
  assert.equal(typeof p.ok, "boolean", text);
  if ("tags" in p) {
    assert.ok(p.tags.length <= 3 && p.tags.every((t) => t === "red" || t === "green"), text);
  }
  if ("pet" in p && p.pet !== null) assert.deepEqual(p.pet, { kind: "cat" }, text);
}

test("response_format json_schema: every choice is JSON that fits the schema", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 1000, temperature: 1, seed: 5, n: 4, ...OFF,
    response_format: personFormat });
  assert.equal(r.choices.length, 4);
  for (const choice of r.choices) {
    assert.equal(choice.finish_reason, "stop", choice.message.content);
    checkPerson(choice.message.content);
  }
  // Streaming gives the same text for the same seed.
  const streamed = await streamText({ model: MODEL, messages: hello, max_tokens: 1000, ...OFF,
                                      temperature: 1, seed: 5, response_format: personFormat });
  assert.equal(streamed.finish, "stop");
  checkPerson(streamed.text);
  assert.equal(streamed.text, r.choices[0].message.content);
  // Without the constraint the same request is not JSON (the weights are random).
  const free = await client.chat.completions.create({ model: MODEL, messages: hello, ...OFF,
                                                      max_tokens: 40, temperature: 1, seed: 5 });
  assert.throws(() => JSON.parse(free.choices[0].message.content));
});

test("response_format and guided_choice on completions", async () => {
  // Any object: nothing bounds its size, so logit_bias on the closing bytes helps the random
  // weights end it (the constraint still decides what is allowed).
  const ids = async (text) => {
    const r = await fetch(`${server.url}/tokenize`, {
      method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: MODEL, prompt: text, add_special_tokens: false }) });
    return (await r.json()).tokens;
  };
  const [quote] = await ids("\"");
  const [close] = await ids("}");
  const r = await client.completions.create({
    model: MODEL, prompt: "JSON:", max_tokens: 300, temperature: 1, seed: 9, n: 3,
    logit_bias: { [quote]: 6, [close]: 6 }, response_format: { type: "json_object" } });
  for (const choice of r.choices) {
    assert.equal(choice.finish_reason, "stop", choice.text);
    const value = JSON.parse(choice.text);
    assert.ok(value !== null && typeof value === "object" && !Array.isArray(value), choice.text);
  }
  // vLLM's guided_choice (an extra body field): the text is one of the choices.
  const choice = await client.completions.create({
    model: MODEL, prompt: "Answer:", max_tokens: 20, temperature: 1, seed: 4, n: 4,
    guided_choice: ["yes", "no", "not sure"] });
  for (const c of choice.choices) {
    assert.ok(["yes", "no", "not sure"].includes(c.text), c.text);
    assert.equal(c.finish_reason, "stop");
  }
  const p = await client.completions.create({ model: MODEL, prompt: "Person:", max_tokens: 1000,
                                              temperature: 1, seed: 2, response_format: personFormat });
  assert.equal(p.choices[0].finish_reason, "stop");
  checkPerson(p.choices[0].text);
});

test("patterns, formats, number bounds and guided_regex hold on every choice", async () => {
  const checked = {
    type: "object", additionalProperties: false, required: ["id", "when", "score", "count"],
    properties: {
      id: { type: "string", pattern: "^[A-Z]{2}-\\d{3}$" },
      when: { type: "string", format: "date" },
      score: { type: "number", minimum: 0, maximum: 1 },
      count: { type: "integer", minimum: 1, exclusiveMaximum: 10 },
    },
  };
  const r = await client.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 300, temperature: 1, seed: 3, n: 3, ...OFF,
    response_format: { type: "json_schema", json_schema: { name: "checked", schema: checked } } });
  for (const choice of r.choices) {
    const text = choice.message.content;
    assert.equal(choice.finish_reason, "stop", text);
    const v = JSON.parse(text);
    assert.match(v.id, /^[A-Z]{2}-\d{3}$/, text);
    assert.match(v.when, /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/, text);
    assert.ok(typeof v.score === "number" && v.score >= 0 && v.score <= 1, text);
    assert.ok(Number.isInteger(v.count) && v.count >= 1 && v.count < 10, text);
  }
  // vLLM's guided_regex (an extra body field): the whole text matches.
  const g = await client.completions.create({
    model: MODEL, prompt: "Verdict:", max_tokens: 30, temperature: 1, seed: 6, n: 4,
    guided_regex: "(yes|no), [0-9]{1,3} (items|points)" });
  for (const c of g.choices) {
    assert.match(c.text, /^(yes|no), [0-9]{1,3} (items|points)$/);
    assert.equal(c.finish_reason, "stop");
  }
});

test("GBNF grammars: vLLM's guided_grammar, llama.cpp's grammar, SGLang's ebnf", async () => {
  const grammar = String.raw`root ::= answer ("; " answer){0,2}
answer ::= ("yes" | "no") " (" [0-9]{1,2} "%)"`;
  const whole = /^(yes|no) \([0-9]{1,2}%\)(; (yes|no) \([0-9]{1,2}%\)){0,2}$/;
  for (const field of ["guided_grammar", "grammar", "ebnf"]) {
    const r = await client.completions.create({
      model: MODEL, prompt: "Verdicts:", max_tokens: 60, temperature: 1, seed: 5, n: 3,
      [field]: grammar });
    for (const c of r.choices) {
      assert.match(c.text, whole, field);
      assert.equal(c.finish_reason, "stop");
    }
  }
  // Chat, streamed, through structured_outputs: the deltas add up to a whole `root`.
  const stream = await client.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 60, temperature: 1, seed: 7, stream: true, ...OFF,
    structured_outputs: { grammar } });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  assert.match(text, whole);
  // A grammar the server cannot use is a 400 naming the field, the line and the column.
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: "x", max_tokens: 4,
                                guided_grammar: "root ::= answer\n" }),
    (e) => e.status === 400 && e.error.param === "guided_grammar" &&
           /line 1, column 10: rule 'answer' is used but not defined/.test(e.error.message));
});

test("responses API: output_text, stream events, text.format and function calls", async () => {
  const ask = { model: MODEL, input: "Say hello", instructions: "Be brief", max_output_tokens: 16,
                temperature: 1, seed: 4, ...RESPONSES_OFF };
  const r = await client.responses.create(ask);
  assert.equal(r.object, "response");
  assert.ok(["completed", "incomplete"].includes(r.status), r.status);
  assert.equal(r.instructions, "Be brief");
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, JSON.stringify(r.usage));
  assert.equal(typeof r.output_text, "string");
  // Streamed with the same seed: the deltas add up to the same text and the same usage.
  const stream = await client.responses.create({ ...ask, stream: true });
  let text = "";
  let last;
  const types = [];
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") {
      text += event.delta;
      assert.deepEqual(event.logprobs, []);  // required by the SDK's type; none asked for
    }
    last = event;
  }
  // Log probabilities of the message's text, with alternatives.
  const scored = await client.responses.create({ ...ask, top_logprobs: 2,
                                                 include: ["message.output_text.logprobs"] });
  const part = scored.output.find((item) => item.type === "message").content[0];
  assert.ok(part.logprobs.length > 0);
  for (const entry of part.logprobs) {
    assert.equal(typeof entry.token, "string");
    assert.ok(entry.logprob <= 0);
    assert.equal(entry.top_logprobs.length, 2);
  }
  assert.equal(types[0], "response.created");
  assert.ok(["response.completed", "response.incomplete"].includes(last.type), last.type);
  assert.equal(text, r.output_text);
  assert.deepEqual(last.response.usage, r.usage);
  // text.format json_schema: the message is JSON that fits.
  const order = await client.responses.create({
    model: MODEL, input: "An order", max_output_tokens: 300, temperature: 1, seed: 2,
    ...RESPONSES_OFF,
    text: { format: { type: "json_schema", name: "order", strict: true, schema: {
      type: "object", additionalProperties: false, required: ["size", "count"],
      properties: { size: { enum: ["S", "M", "L"] }, count: { type: "integer", minimum: 1, maximum: 9 } } } } } });
  assert.equal(order.status, "completed", JSON.stringify(order.output));
  const value = JSON.parse(order.output_text);
  assert.ok(["S", "M", "L"].includes(value.size) && value.count >= 1 && value.count <= 9,
            order.output_text);
  // Function tools with tool_choice required: function_call items whose arguments fit.
  const weather = { type: "function", name: "get_weather", strict: true, parameters: {
    type: "object", additionalProperties: false, required: ["city"],
    properties: { city: { type: "string", maxLength: 12 } } } };
  const call = await client.responses.create({ model: MODEL, input: "Weather in Paris?",
    tools: [weather], tool_choice: "required", max_output_tokens: 300, temperature: 1, seed: 1,
    ...RESPONSES_OFF });
  const calls = call.output.filter((item) => item.type === "function_call");
  assert.ok(calls.length >= 1, JSON.stringify(call.output));
  for (const c of calls) {
    assert.equal(c.name, "get_weather");
    assert.equal(typeof JSON.parse(c.arguments).city, "string", c.arguments);
  }
  // The call and its output sent back as input items are a valid next turn.
  const next = await client.responses.create({ model: MODEL, max_output_tokens: 8, tools: [weather],
    input: [{ role: "user", content: "Weather in Paris?" },
            { type: "function_call", call_id: calls[0].call_id, name: "get_weather",
              arguments: calls[0].arguments },
            { type: "function_call_output", call_id: calls[0].call_id, output: "sunny" }] });
  assert.ok(next.usage.input_tokens > call.usage.input_tokens, JSON.stringify(next.usage));
});

test("responses: stored, continued with previous_response_id, retrieved and deleted", async () => {
  const first = await client.responses.create({ model: MODEL, input: "Say hello",
    max_output_tokens: 8 });
  assert.equal(first.store, true);
  const again = await client.responses.retrieve(first.id);
  assert.equal(again.id, first.id);
  assert.deepEqual(again.output, first.output);
  // The continuation's input is the first turn, its reply and the new message.
  const next = await client.responses.create({ model: MODEL, input: "Again",
    previous_response_id: first.id, max_output_tokens: 8 });
  assert.equal(next.previous_response_id, first.id);
  assert.ok(next.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens,
    JSON.stringify([first.usage, next.usage]));
  // Its input items, as the SDK pages through them (newest first; 2 a page here).
  const turn = await client.responses.create({ model: MODEL, max_output_tokens: 4, input: [
    { role: "user", content: "one" }, { role: "assistant", content: "two" },
    { role: "user", content: [{ type: "input_text", text: "three" }] }] });
  const listed = [];
  for await (const item of client.responses.inputItems.list(turn.id, { limit: 2 })) {
    listed.push(item);
  }
  assert.deepEqual(listed.map((i) => [i.role, i.content[0].type, i.content[0].text]),
                   [["user", "input_text", "three"], ["assistant", "output_text", "two"],
                    ["user", "input_text", "one"]]);
  assert.equal(new Set(listed.map((i) => i.id)).size, 3);
  const page = await client.responses.inputItems.list(first.id, { order: "asc" });
  assert.deepEqual(page.data.map((i) => i.content[0].text), ["Say hello"]);
  await client.responses.delete(first.id);
  await assert.rejects(client.responses.retrieve(first.id), (e) => e instanceof NotFoundError);
  await assert.rejects(client.responses.inputItems.list(first.id),
                       (e) => e instanceof NotFoundError);
  await assert.rejects(
    client.responses.create({ model: MODEL, input: "x", previous_response_id: first.id }),
    (e) => e instanceof BadRequestError && e.param === "previous_response_id" &&
           e.code === "previous_response_not_found");
});

test("responses in background mode: queued at once, polled to completion, cancelled", async () => {
  const ask = { model: MODEL, input: "Say hello", max_output_tokens: 8, temperature: 0,
                ...RESPONSES_OFF };
  const direct = await client.responses.create(ask);
  let r = await client.responses.create({ ...ask, background: true });
  assert.equal(r.status, "queued");
  assert.equal(r.background, true);
  assert.deepEqual(r.output, []);
  while (r.status === "queued" || r.status === "in_progress") {
    await new Promise((resolve) => setTimeout(resolve, 20));
    r = await client.responses.retrieve(r.id);
  }
  assert.equal(r.status, direct.status);  // "incomplete": cut by max_output_tokens
  assert.equal(r.output_text, direct.output_text);  // the SDK's convenience field
  assert.equal((await client.responses.cancel(r.id)).status, r.status);  // already ended
  // A long one cancelled while it runs.
  let long = await client.responses.create({ model: MODEL, input: "Write a long story.",
    max_output_tokens: 4000, background: true, ignore_eos: true });
  const cancelled = await client.responses.cancel(long.id);
  assert.equal(cancelled.status, "cancelled");
  long = await client.responses.retrieve(long.id);
  assert.equal(long.status, "cancelled");
  await assert.rejects(client.responses.create({ ...ask, background: true, store: false }),
    (e) => e instanceof BadRequestError && e.param === "background");
  await assert.rejects(client.responses.cancel(direct.id),
    (e) => e instanceof BadRequestError && /only background responses/.test(e.message));
  // Streamed too: a client that drops the stream resumes it after the last event it saw.
  const stream = await client.responses.create({ ...ask, background: true, stream: true });
  const seen = [];
  for await (const event of stream) {
    seen.push(event);
    if (seen.length === 4) break;  // the connection drops
  }
  const id = seen[0].response.id;
  const rest = [];
  for await (const event of await client.responses.retrieve(id, { stream: true,
                                                                  starting_after: 3 })) {
    rest.push(event);
  }
  assert.equal(rest[0].sequence_number, 4);
  rest.forEach((e, i) => assert.equal(e.sequence_number, 4 + i));
  const last = rest[rest.length - 1];
  assert.equal(last.type, "response.incomplete");  // cut by max_output_tokens, as `direct`
  assert.equal(last.response.output[0].content[0].text,
               direct.output[0].content[0].text);
  const text = [...seen, ...rest].filter((e) => e.type === "response.output_text.delta")
    .map((e) => e.delta).join("");
  assert.equal(text, direct.output_text);
});

test("with --responses-dir stored and background responses outlive a crash", async () => {
  const dir = mkdtempSync(join(tmpdir(), "strata-responses-"));
  const flags = ["--api-key", KEY, "--responses-dir", dir];
  let kept = await Server.start(flags);
  try {
    let c = new OpenAI({ baseURL: `${kept.url}/v1`, apiKey: KEY, maxRetries: 0 });
    const first = await c.responses.create({ model: MODEL, input: "Say hello",
                                             max_output_tokens: 8, temperature: 0 });
    const ask = { model: MODEL, input: "Write a long story.", previous_response_id: first.id,
                  max_output_tokens: 400, ignore_eos: true, temperature: 0, ...RESPONSES_OFF };
    let long = await c.responses.create({ ...ask, background: true });
    while (long.status === "queued") {
      await sleep(10);
      long = await c.responses.retrieve(long.id);
    }
    assert.equal(long.status, "in_progress");
    // A sampled one streamed: the client sees its first words, then the server dies.
    const sampled = await c.responses.create({ model: MODEL, input: "Tell me anything.",
      max_output_tokens: 400, ignore_eos: true, temperature: 1, background: true, stream: true,
      ...RESPONSES_OFF });
    const before = [];
    for await (const event of sampled) {
      before.push(event);
      if (before.filter((e) => e.type === "response.output_text.delta").length === 6) break;
    }
    kept.child.kill("SIGKILL");  // no drain, no goodbye
    await kept.exit;
    kept = await Server.start(flags);
    c = new OpenAI({ baseURL: `${kept.url}/v1`, apiKey: KEY, maxRetries: 0 });
    // The stored one as it was; the background one ran again under its id (else it would stay
    // in_progress), from the conversation it continued, to the answer a direct request gets.
    assert.deepEqual(await c.responses.retrieve(first.id), first);
    for (let i = 0; i < 3000 && (long.status === "queued" || long.status === "in_progress"); ++i) {
      await sleep(20);
      long = await c.responses.retrieve(long.id);
    }
    assert.equal(long.status, "incomplete", JSON.stringify(long));  // cut by max_output_tokens
    assert.equal(long.previous_response_id, first.id);
    const direct = await c.responses.create(ask);
    assert.equal(long.output_text, direct.output_text);
    assert.equal(long.usage.input_tokens, direct.usage.input_tokens);
    // The sampled one drew the same words again (its seed was kept with it): a client resuming
    // its stream across the restart reads on where it was.
    const after = [];
    for await (const event of await c.responses.retrieve(before[0].response.id,
                                                         { stream: true })) {
      after.push(event);
    }
    const deltas = (events) => events.filter((e) => e.type === "response.output_text.delta")
      .map((e) => e.delta);
    assert.deepEqual(deltas(after).slice(0, 6), deltas(before));
    assert.equal(after[after.length - 1].type, "response.incomplete");
    assert.equal(after[after.length - 1].response.usage.output_tokens, 400);
    const metrics = await (await fetch(`${kept.url}/metrics`)).text();
    assert.match(metrics, /^strata:stored_responses [1-9]/m);  // loaded from the directory
    assert.match(metrics, /^strata:background_responses_running 0$/m);
    const next = await c.responses.create({ model: MODEL, input: "Go on.",
                                            previous_response_id: long.id, max_output_tokens: 4 });
    assert.equal(next.usage.input_tokens > long.usage.input_tokens + 400, true);
    // One server per directory; the directory needs a store.
    await assertServeRefuses(["--port", "0", "--grpc-port", "0", "--responses-dir", dir],
                             /--responses-dir .* is in use by another process/);
    await assertServeRefuses(["--responses-dir", dir, "--responses-store-memory", "0"],
                             /--responses-store-memory 0 turns off/, (code) => code === 2);
  } finally {
    const { code } = await kept.stop();
    assert.equal(code, 0, kept.stderr);
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a full queue is a RateLimitError with Retry-After", async () => {
  const small = await Server.start(["--max-queued-requests", "1"]);
  try {
    const c = new OpenAI({ baseURL: `${small.url}/v1`, apiKey: "none", maxRetries: 0 });
    const busy = new AbortController();
    const long = fetch(`${small.url}/v1/chat/completions`, {
      method: "POST", signal: busy.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: hello, max_tokens: 2000, stream: true, ignore_eos: true }),
    });
    await small.waitInfo((i) => i.engine.num_unfinished === 1 || i.num_requests_in_flight === 1);
    await assert.rejects(c.chat.completions.create({ model: MODEL, messages: hello }), (e) => {
      assert.ok(e instanceof RateLimitError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 429);
      assert.equal(e.code, "rate_limit_exceeded");
      assert.equal(e.headers.get("retry-after"), "1");
      return true;
    });
    busy.abort();
    await long.catch(() => {});
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});
