// SIGTERM / SIGINT: readiness goes to 503 and new requests are refused while the requests in
// flight finish, then the process exits 0; past --drain-timeout what is left is aborted.
import assert from "node:assert/strict";
import { test } from "node:test";

import { parseSse, Server, sleep } from "./common.mjs";

const post = (server, body, signal) => fetch(`${server.url}/v1/chat/completions`, {
  method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  signal,
});

async function readAll(response) {
  return new TextDecoder().decode(await response.arrayBuffer());
}

test("SIGTERM drains: in-flight streams finish, new requests get 503, exit 0", async () => {
  const server = await Server.start();
  const r = await post(server, { messages: [{ role: "user", content: "hi" }], max_tokens: 40,
                                 ignore_eos: true, stream: true });
  assert.equal(r.status, 200);
  const body = readAll(r);
  await server.waitInfo((i) => i.engine.num_running === 1);
  server.child.kill("SIGTERM");
  // Draining: not ready, new work refused, health still fine.
  let ready;
  for (let i = 0; i < 100; ++i) {
    ready = await fetch(`${server.url}/ready`);
    if (ready.status === 503) break;
    await sleep(10);
  }
  assert.equal(ready.status, 503);
  assert.equal((await ready.json()).error.code, "server_draining");
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  const refused = await post(server, { messages: [{ role: "user", content: "hi" }] });
  assert.equal(refused.status, 503);
  const error = (await refused.json()).error;
  assert.equal(error.code, "server_draining");
  assert.equal(error.type, "server_error");
  // The stream in flight completes normally.
  const events = parseSse(await body).filter((e) => e.data);
  assert.equal(events.at(-1).data, "[DONE]");
  const finish = events.slice(0, -1).map((e) => JSON.parse(e.data))
    .find((c) => c.choices[0].finish_reason);
  assert.equal(finish.choices[0].finish_reason, "length");
  const { code } = await server.exit;
  assert.equal(code, 0, server.stderr);
});

test("past the drain timeout the rest is aborted and the exit is still 0", async () => {
  const server = await Server.start(["--drain-timeout", "0.5"]);
  const controller = new AbortController();
  const r = await post(server, { messages: [{ role: "user", content: "hi" }], max_tokens: 5000,
                                 ignore_eos: true, stream: true }, controller.signal);
  const body = readAll(r).catch(() => "");
  await server.waitInfo((i) => i.engine.num_running === 1);
  const t0 = Date.now();
  const { code } = await server.stop("SIGINT");
  assert.equal(code, 0, server.stderr);
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  await body;
});

test("an idle server exits 0 on SIGTERM at once (and takes its API key from the env)",
     async () => {
  const server = await Server.start([], { env: { STRATA_API_KEY: "sk-env" } });
  assert.equal((await fetch(`${server.url}/v1/models`)).status, 401);
  const ok = await fetch(`${server.url}/v1/models`,
                         { headers: { Authorization: "Bearer sk-env" } });
  assert.equal(ok.status, 200);
  const t0 = Date.now();
  const { code } = await server.stop("SIGTERM");
  assert.equal(code, 0, server.stderr);
  assert.ok(Date.now() - t0 < 3000);
});
