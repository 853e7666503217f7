// Black-box invariants of `strata serve` with the demo model: 64 parallel requests all finish
// and the cache returns to empty; a client that goes away mid-stream or mid-prefill cancels its
// request and its pages and slot are freed (observable in /server_info).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { cacheIsEmpty, parseSse, Server } from "./common.mjs";

let server;

before(async () => {
  // A small step budget so that a long prompt takes many steps to prefill.
  server = await Server.start(["--max-num-batched-tokens", "256", "--max-num-seqs", "64"]);
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

const post = (path, body, signal) => fetch(`${server.url}${path}`, {
  method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  signal,
});

test("64 parallel requests all complete and the cache returns to empty", async () => {
  const before = await server.info();
  const requests = Array.from({ length: 64 }, async (_, i) => {
    const stream = i % 2 === 1;
    const chat = i % 4 < 2;
    const body = chat
      ? { messages: [{ role: "user", content: `request number ${i}` }], max_tokens: 6, stream,
          seed: i }
      : { prompt: `prompt number ${i}`, max_tokens: 6, stream, seed: i };
    const r = await post(chat ? "/v1/chat/completions" : "/v1/completions", body);
    assert.equal(r.status, 200);
    const text = await r.text();
    if (!stream) {
      const j = JSON.parse(text);
      assert.ok(["stop", "length"].includes(j.choices[0].finish_reason));
      return j.usage.completion_tokens;
    }
    const events = parseSse(text);
    assert.equal(events.at(-1).data, "[DONE]");
    for (const e of events) if (e.comment !== undefined) assert.equal(e.comment, "ping");
    const finishes = events.slice(0, -1).filter((e) => e.data).map((e) => JSON.parse(e.data))
      .filter((c) => c.choices[0]?.finish_reason);
    assert.equal(finishes.length, 1);
    return 1;
  });
  const results = await Promise.all(requests);
  assert.equal(results.length, 64);
  // A response object lives until its last bytes are written, which the client may read
  // first: wait for the in-flight count too.
  const info = await server.waitInfo((i) => cacheIsEmpty(i) && i.num_requests_in_flight === 0);
  assert.ok(cacheIsEmpty(info), JSON.stringify(info.engine));
  assert.equal(info.engine.num_finished_total - before.engine.num_finished_total, 64);
  assert.equal(info.num_requests_in_flight, 0);
});

test("a conversation sent back keeps its reply's own tokens and hits the cache past them", async () => {
  // Ids below the demo tokenizer's special tokens: a reply whose text shows every token. (Thinking
  // off: K3 drops a reply's reasoning from the history when thinking is off, so the whole reply
  // is the content sent back.)
  const ordinary = Array.from({ length: 7936 }, (_, i) => i);
  const user = { role: "user", content: "Tell me about the harbour and the ships in it." };
  const first = await (await post("/v1/chat/completions", {
    messages: [user], max_tokens: 80, temperature: 0, ignore_eos: true,
    allowed_token_ids: ordinary, return_token_ids: true, reasoning_effort: "none",
  })).json();
  const reply = first.choices[0];
  assert.equal(reply.token_ids.length, 80);
  const second = await (await post("/v1/chat/completions", {
    messages: [user, { role: "assistant", content: reply.message.content },
      { role: "user", content: "And then?" }],
    max_tokens: 2, return_token_ids: true, reasoning_effort: "none",
  })).json();
  const prompt = second.prompt_token_ids;
  const at = prompt.findIndex((_, i) => reply.token_ids.every((id, k) => prompt[i + k] === id));
  assert.ok(at >= 0, "the reply's generated ids are in the next prompt, in order");
  assert.equal(at, first.usage.prompt_tokens);
  // 80 generated tokens cross a 64-token block boundary: the hit reaches into the reply.
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > first.usage.prompt_tokens,
    JSON.stringify(second.usage));
  const memory = (await server.info()).reply_token_memory;
  assert.ok(memory.num_replies >= 1 && memory.num_tokens >= 80, JSON.stringify(memory));
});

test("/server_info reports where the weights live", async () => {
  const { model } = await server.info();
  assert.ok(model.weight_bytes > 0, JSON.stringify(model));
  // The CPU default copies them to huge pages (the demo model always fits in memory here).
  assert.equal(model.weights_memory, "huge_pages", JSON.stringify(model));
  assert.ok(model.weight_copy_bytes > 0, JSON.stringify(model));
});

// Reads SSE chunks until `enough(events)`, then aborts the request.
async function readThenAbort(body, enough) {
  const controller = new AbortController();
  const r = await post("/v1/chat/completions", { ...body, stream: true }, controller.signal);
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!enough(text)) {
    const { value, done } = await reader.read();
    assert.ok(!done, "the stream ended before the client went away");
    text += decoder.decode(value, { stream: true });
  }
  controller.abort();
  await reader.cancel().catch(() => {});
  return text;
}

test("a client that goes away mid-stream frees its pages and slot", async () => {
  const start = await server.info();
  const text = await readThenAbort(
    { messages: [{ role: "user", content: "go on forever" }], max_tokens: 4000,
      ignore_eos: true },
    // (A reply that opens <think> streams reasoning_content instead.)
    (t) => (t.match(/"(reasoning_)?content":/g) ?? []).length >= 4);
  assert.ok(text.includes("\"role\":\"assistant\""));
  const info = await server.waitInfo(
    (i) => cacheIsEmpty(i) && i.engine.num_aborted_total > start.engine.num_aborted_total, 10000);
  assert.ok(cacheIsEmpty(info), JSON.stringify(info.engine));
  assert.equal(info.engine.num_aborted_total, start.engine.num_aborted_total + 1);
  assert.equal(info.http.num_cancelled_total, start.http.num_cancelled_total + 1);
});

test("a client that goes away mid-prefill frees its pages and slot", async () => {
  const start = await server.info();
  const long = Array.from({ length: 1500 }, (_, i) => `w${i}`).join(" ");  // ~3000 tokens
  const controller = new AbortController();
  const pending = post("/v1/chat/completions",
                       { messages: [{ role: "user", content: long }], max_tokens: 4 },
                       controller.signal).catch((e) => e);
  // Running and holding pages, but no token yet: the prefill is in progress.
  const during = await server.waitInfo((i) => i.engine.num_running === 1 &&
                                             i.engine.num_free_blocks < i.engine.num_blocks);
  assert.equal(during.engine.num_running, 1, JSON.stringify(during.engine));
  controller.abort();
  const outcome = await pending;
  assert.equal(outcome.name, "AbortError");
  const info = await server.waitInfo(
    (i) => cacheIsEmpty(i) && i.engine.num_aborted_total > start.engine.num_aborted_total, 10000);
  assert.ok(cacheIsEmpty(info), JSON.stringify(info.engine));
  assert.equal(info.engine.num_aborted_total, start.engine.num_aborted_total + 1);
  assert.equal(info.engine.num_finished_total, start.engine.num_finished_total);
});
