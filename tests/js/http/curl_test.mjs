// Transcripts of `curl` against `strata serve`: SSE framing checked structurally, the printed
// curl line works, and every error reaches the wire as OpenAI's error object with the right
// status, type, code and param; plus HTTP-level behaviour (pipelining, keep-alive, body limit,
// malformed requests, slow headers) over raw sockets.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { parseSse, Server, sleep } from "./common.mjs";

const run = promisify(execFile);
const KEY = "sk-curl";
let server;

before(async () => {
  server = await Server.start(["--api-key", KEY, "--max-model-len", "512", "--max-body-bytes",
                               "8192", "--request-timeout", "1"]);
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

// curl with the key; returns {status, headers, body}.
async function curl(path, { data, method, auth = true, headers = [] } = {}) {
  const args = ["-s", "-S", "-N", "-D", "-", `${server.url}${path}`];
  if (auth) args.push("-H", `Authorization: Bearer ${KEY}`);
  for (const h of headers) args.push("-H", h);
  if (data !== undefined) args.push("-H", "Content-Type: application/json", "--data-binary", data);
  if (method) args.push("-X", method);
  const { stdout } = await run("curl", args, { maxBuffer: 1 << 24, encoding: "latin1" });
  const split = stdout.indexOf("\r\n\r\n");
  const head = stdout.slice(0, split).split("\r\n");
  const status = Number(head[0].split(" ")[1]);
  const hdrs = Object.fromEntries(head.slice(1).map((l) => {
    const i = l.indexOf(":");
    return [l.slice(0, i).toLowerCase(), l.slice(i + 1).trim()];
  }));
  return { status, headers: hdrs, body: Buffer.from(stdout.slice(split + 4), "latin1").toString() };
}

function expectError(r, status, code, param) {
  assert.equal(r.status, status, r.body);
  assert.match(r.headers["content-type"], /application\/json/);
  const e = JSON.parse(r.body).error;
  assert.deepEqual(Object.keys(e).sort(), ["code", "message", "param", "type"]);
  assert.equal(e.code, code, r.body);
  assert.equal(e.param, param, r.body);
  assert.equal(e.type, status === 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error" : "invalid_request_error");
  assert.ok(e.message.length > 10);
  return e;
}

const chat = (extra = {}) => JSON.stringify({
  model: "strata-demo", messages: [{ role: "user", content: "Hello!" }], max_tokens: 5, ...extra,
});

test("the curl line printed at start-up works", async () => {
  const line = server.curlLine();
  assert.ok(line, server.stdout);
  assert.ok(line.includes(`Authorization: Bearer ${KEY}`));
  const { stdout } = await run("bash", ["-c", line]);
  const j = JSON.parse(stdout);
  assert.equal(j.object, "chat.completion");
  assert.equal(j.choices[0].message.role, "assistant");
});

test("chat SSE transcript has the documented shape", async () => {
  const r = await curl("/v1/chat/completions",
                       { data: chat({ n: 2, stream: true, logprobs: true,
                                      stream_options: { include_usage: true } }) });
  assert.equal(r.status, 200);
  assert.match(r.headers["content-type"], /^text\/event-stream/);
  assert.equal(r.headers["transfer-encoding"], "chunked");
  assert.equal(r.headers["cache-control"], "no-cache");
  const events = parseSse(r.body).filter((e) => e.comment === undefined);
  assert.equal(events.at(-1).data, "[DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.total_tokens, usage.usage.prompt_tokens + usage.usage.completion_tokens);
  for (const index of [0, 1]) {
    const mine = chunks.slice(0, -1).filter((c) => c.choices[0].index === index);
    assert.deepEqual(mine[0].choices[0].delta, { role: "assistant", content: "" });
    const finishes = mine.filter((c) => c.choices[0].finish_reason !== null);
    assert.equal(finishes.length, 1);
    assert.equal(finishes[0], mine.at(-1), "finish_reason only on the choice's last chunk");
    for (const c of mine.slice(1, -1)) {
      // The demo model thinks first (Kimi K3's default): reasoning deltas, then content ones.
      const delta = c.choices[0].delta;
      assert.equal(typeof (delta.reasoning_content ?? delta.content), "string");
      assert.ok(Array.isArray(c.choices[0].logprobs.content));
    }
  }
  for (const c of chunks) {
    assert.equal(c.id, chunks[0].id);
    assert.equal(c.created, chunks[0].created);
    assert.equal(c.model, "strata-demo");
    assert.equal(c.object, "chat.completion.chunk");
  }
});

test("completions SSE transcript has the documented shape", async () => {
  const r = await curl("/v1/completions", { data: JSON.stringify({
    prompt: "Once", max_tokens: 4, stream: true, echo: true }) });
  const events = parseSse(r.body).filter((e) => e.comment === undefined);
  assert.equal(events.at(-1).data, "[DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
  assert.equal(chunks[0].choices[0].text, "Once");
  assert.ok(chunks.every((c) => c.object === "text_completion" && c.id === chunks[0].id));
  assert.equal(chunks.filter((c) => c.choices[0].finish_reason).length, 1);
  assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
});

test("request errors: status, type, code and param on the wire", async () => {
  expectError(await curl("/v1/chat/completions", { data: "{\"messages\": [" }),
              400, "invalid_json", null);
  const dir = mkdtempSync(join(tmpdir(), "strata-curl-"));
  const invalid = join(dir, "invalid.json");
  writeFileSync(invalid, Buffer.from([...Buffer.from("{\"messages\": \""), 0xff, 0x22, 0x7d]));
  const utf8 = expectError(await curl("/v1/chat/completions", { data: `@${invalid}` }),
                           400, "invalid_utf8", null);
  assert.match(utf8.message, /offset 14/);
  rmSync(dir, { recursive: true });
  expectError(await curl("/v1/chat/completions", { data: "[]" }), 400, "invalid_type", null);
  expectError(await curl("/v1/chat/completions", { data: JSON.stringify({ messages: [] }) }),
              400, "invalid_value", "messages");
  expectError(await curl("/v1/chat/completions", { data: JSON.stringify({
    messages: [{ role: "user", content: [{ type: "video", url: "x" }] }] }) }),
              400, "invalid_value", "messages[0].content[0].type");
  expectError(await curl("/v1/chat/completions", { data: chat({ max_tokens: "5" }) }),
              400, "invalid_type", "max_tokens");
  expectError(await curl("/v1/chat/completions", { data: chat({ top_p: 1.5 }) }),
              400, "invalid_value", "top_p");
  expectError(await curl("/v1/chat/completions", { data: chat({ n: 0 }) }),
              400, "invalid_value", "n");
  const schema = expectError(await curl("/v1/chat/completions", { data: chat({
    response_format: { type: "json_schema", json_schema: { name: "x", schema: {
      type: "object", properties: { age: { type: "integer", not: { const: 2 } } } } } } }) }),
              400, "invalid_value", "response_format.json_schema.schema");
  assert.match(schema.message, /'#\/properties\/age': keyword 'not' is not supported/);
  const context = expectError(
    await curl("/v1/chat/completions", { data: JSON.stringify({
      messages: [{ role: "user", content: "a ".repeat(600) }] }) }),
    400, "context_length_exceeded", "messages");
  assert.match(context.message, /maximum context length is 512 tokens.*prompt has \d+ tokens/);
  const budget = expectError(
    await curl("/v1/completions", { data: JSON.stringify({ prompt: "hi", max_tokens: 600 }) }),
    400, "context_length_exceeded", "max_tokens");
  assert.match(budget.message, /600 > 512 - \d+/);
});

test("auth, routing and limits errors on the wire", async () => {
  expectError(await curl("/v1/models", { auth: false }), 401, "invalid_api_key", null);
  expectError(await curl("/v1/models", { auth: false, headers: ["Authorization: Bearer x"] }),
              401, "invalid_api_key", null);
  for (const open of ["/health", "/ready", "/metrics"]) {
    assert.equal((await curl(open, { auth: false })).status, 200, open);
  }
  expectError(await curl("/v1/embeddings", { data: "{}" }), 404, "unknown_url", null);
  expectError(await curl("/v1/chat/completions", { data: chat({ model: "llama" }) }),
              404, "model_not_found", "model");
  const wrong = expectError(await curl("/v1/chat/completions"), 405, "method_not_allowed", null);
  assert.ok(wrong.message.includes("GET"));
  assert.equal((await curl("/v1/chat/completions")).headers.allow, "POST");
  const big = await curl("/v1/completions", { data: JSON.stringify({ prompt: "x".repeat(9000) }) });
  expectError(big, 413, "request_too_large", null);
  assert.match(JSON.parse(big.body).error.message, /8192 bytes/);
});

test("metrics are Prometheus text", async () => {
  assert.equal((await curl("/v1/models")).status, 200);
  const r = await curl("/metrics", { auth: false });
  assert.match(r.headers["content-type"], /^text\/plain; version=0\.0\.4/);
  assert.match(r.body, /^# (HELP|TYPE) strata:/m);
  // vLLM's HTTP series: the requests the tests above sent, turned away ones included, by route
  // template and status class; unknown paths grouped as "none".
  const count = (labels) => {
    const m = r.body.match(new RegExp(`^http_requests_total\\{${labels}\\} (\\d+)$`, "m"));
    return m ? Number(m[1]) : 0;
  };
  assert.ok(count('handler="/v1/models",method="GET",status="4xx"') >= 2, "the 401s");
  assert.ok(count('handler="/v1/models",method="GET",status="2xx"') >= 1);
  assert.ok(count('handler="/v1/chat/completions",method="POST",status="2xx"') >= 1);
  assert.ok(count('handler="/v1/chat/completions",method="POST",status="4xx"') >= 2);
  assert.ok(count('handler="/v1/completions",method="POST",status="4xx"') >= 1, "the 413 is 4xx");
  assert.ok(count('handler="none",method="POST",status="4xx"') >= 1, "/v1/embeddings");
  assert.ok(!r.body.includes('handler="/v1/embeddings"'));
  assert.match(r.body, /^http_request_duration_seconds_count\{handler="\/v1\/chat\/completions",method="POST"\} \d+$/m);
});

// Raw socket exchanges (what curl hides).
function exchange(payload, { waitMs = 5000, until } = {}) {
  return new Promise((resolve) => {
    const socket = net.connect(server.port, "127.0.0.1");
    let data = "";
    const started = Date.now();
    const done = (closed) => { socket.destroy(); resolve({ data, closed, ms: Date.now() - started }); };
    const timer = setTimeout(() => done(false), waitMs);
    socket.on("data", (d) => {
      data += d;
      if (until && until(data)) { clearTimeout(timer); done(false); }
    });
    socket.on("close", () => { clearTimeout(timer); done(true); });
    socket.on("error", () => {});
    socket.write(payload);
  });
}

test("pipelined requests are answered in order on one connection", async () => {
  const get = (path) => `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n\r\n`;
  const r = await exchange(get("/health") + get("/v1/models") + get("/nope") + get("/ready"),
                           { until: (d) => (d.match(/HTTP\/1\.1 /g) ?? []).length === 4 &&
                                           d.endsWith("}") });
  const statuses = [...r.data.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => Number(m[1]));
  assert.deepEqual(statuses, [200, 200, 404, 200]);
  assert.ok(r.data.indexOf("\"object\":\"list\"") < r.data.indexOf("unknown_url"));
});

test("malformed HTTP is a 400 and slow headers time out with 408", async () => {
  const bad = await exchange("HELLO\r\n\r\n");
  assert.match(bad.data, /^HTTP\/1\.1 400/);
  assert.match(bad.data, /"code":"malformed_request"/);
  assert.ok(bad.closed);
  const slow = await exchange("GET /health HTTP/1.1\r\nHost: x\r\n", { waitMs: 6000 });
  assert.match(slow.data, /^HTTP\/1\.1 408/);
  assert.match(slow.data, /"code":"request_timeout"/);
  assert.ok(slow.closed);
  assert.ok(slow.ms >= 900 && slow.ms < 4000, `${slow.ms} ms`);
});

test("a full queue is 429 with Retry-After", async () => {
  const small = await Server.start(["--max-queued-requests", "1"]);
  try {
    const busy = new AbortController();
    const long = fetch(`${small.url}/v1/completions`, {
      method: "POST", signal: busy.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "x", max_tokens: 3000, ignore_eos: true, stream: true }),
    });
    await small.waitInfo((i) => i.num_requests_in_flight === 1);
    const { stdout } = await run("curl", ["-s", "-D", "-", `${small.url}/v1/completions`, "-H",
                                          "Content-Type: application/json", "-d",
                                          "{\"prompt\": \"y\"}"]);
    assert.match(stdout, /^HTTP\/1\.1 429/);
    assert.match(stdout, /\r\nRetry-After: 1\r\n/i);
    const e = JSON.parse(stdout.slice(stdout.indexOf("\r\n\r\n") + 4)).error;
    assert.equal(e.code, "rate_limit_exceeded");
    assert.equal(e.type, "rate_limit_error");
    assert.equal(e.param, null);
    busy.abort();
    await long.catch(() => {});
    await sleep(10);
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});

test("--generation-config, --chat-template and --max-logprobs, as vLLM's", async () => {
  const dir = mkdtempSync(join(tmpdir(), "strata-genconfig-"));
  writeFileSync(join(dir, "generation_config.json"),
                JSON.stringify({ temperature: 0.0, max_new_tokens: 4, top_k: 50 }));
  const template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}";
  const custom = await Server.start(["--generation-config", dir, "--chat-template", template,
                                     "--max-logprobs", "30"]);
  try {
    const post = async (path, body) => {
      const r = await fetch(`${custom.url}${path}`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: r.status, json: await r.json() };
    };
    // Greedy and 4 tokens unless the request says otherwise (top_k 50 is transformers' own
    // default, so it is not one).
    const a = await post("/v1/completions", { prompt: "Strata", ignore_eos: true });
    const b = await post("/v1/completions", { prompt: "Strata", ignore_eos: true });
    assert.equal(a.json.usage.completion_tokens, 4);
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
    const longer = await post("/v1/completions", { prompt: "Strata", max_tokens: 7,
                                                   ignore_eos: true });
    assert.equal(longer.json.usage.completion_tokens, 7);
    const info = await custom.info();
    assert.equal(info.model.generation_config, "temperature 0, max_tokens 4");
    // The chat template given on the command line renders the prompt.
    const t = await post("/tokenize", { messages: [{ role: "user", content: "hi" }],
                                        return_token_strs: true });
    assert.equal(t.json.token_strs.join(""), "[user]hi");
    // --max-logprobs 30: 30 alternatives are allowed, 31 is a 400 naming the limit.
    const many = await post("/v1/chat/completions", {
      messages: [{ role: "user", content: "hi" }], max_tokens: 1, logprobs: true,
      top_logprobs: 30 });
    assert.equal(many.status, 200);
    assert.equal(many.json.choices[0].logprobs.content[0].top_logprobs.length, 30);
    const tooMany = await post("/v1/completions", { prompt: "x", max_tokens: 1, logprobs: 31 });
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.json.error.param, "logprobs");
    assert.match(tooMany.json.error.message, /\[0, 30\]/);
  } finally {
    assert.equal((await custom.stop()).code, 0);
    rmSync(dir, { recursive: true, force: true });
  }
  // Bad values stop the start-up with one line naming the flag.
  for (const [flags, message] of [
    [["--generation-config", "/nonexistent-dir"], /--generation-config: no generation_config\.json/],
    [["--chat-template", "/nonexistent.jinja"], /--chat-template: cannot open/],
    [["--chat-template", "{% if %}"], /--chat-template: /],
  ]) {
    await assert.rejects(
      run(process.env.STRATA_BIN, ["serve", "--port", "0", "--log-level", "warn", ...flags]),
      (e) => { assert.match(e.stderr, message); return e.code !== 0; });
  }
});
