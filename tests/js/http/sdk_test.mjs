// The official `openai` npm client (pinned in tests/js/package.json) against a real
// `strata serve` running the embedded demo model: chat and completions, streaming and not, n,
// logprobs, stop, seed, tools, usage, and errors surfacing as the SDK's typed errors.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { requirePackages, Server, sleep } from "./common.mjs";

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
  const params = { model: MODEL, messages: hello, max_tokens: 12, temperature: 0.8, seed: 7 };
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
  const params = { model: MODEL, messages: hello, max_tokens: 12, temperature: 1 };
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
  const params = { model: MODEL, messages: hello, max_tokens: 24, temperature: 0 };
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
                                                     response_format: { type: "json_object" } }),
                    BadRequestError, 400, "unsupported_value", "response_format");
  await expectError(client.chat.completions.create({ model: "gpt-4o", messages: hello }),
                    NotFoundError, 404, "model_not_found", "model");
  const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong", maxRetries: 0 });
  await expectError(stranger.models.list(), AuthenticationError, 401, "invalid_api_key", null);
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
