// `strata run-batch` (vLLM's run_batch) on the embedded demo model: an OpenAI Batch file in,
// one output line per request out in input order, bad lines as error lines; and every greedy
// answer equal to what `strata serve` gives the same request through the `openai` SDK. Then the
// same files through `strata serve`'s Files and Batches API with the SDK: upload, create, poll,
// download, cancel.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { promisify } from "node:util";

import { assertServeRefuses, requirePackages, Server, strataBin } from "./common.mjs";

requirePackages("openai");
const { default: OpenAI, toFile } = await import("openai");

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), "strata-batch-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const MODEL = "strata-demo";
const topics = ["the sea", "a robot", "prime numbers", "bread", "winter", "a lighthouse"];
const chats = topics.map((t, i) => ({
  custom_id: `chat-${i}`, method: "POST", url: "/v1/chat/completions",
  body: { model: MODEL, messages: [{ role: "user", content: `Write about ${t}.` }],
          max_tokens: 6 + i, temperature: 0 },
}));
const completion = {
  custom_id: "cmpl", method: "POST", url: "/v1/completions",
  body: { model: MODEL, prompt: "Once upon a time", max_tokens: 7, temperature: 0, logprobs: 2 },
};
const sampled = {  // n = 2 with a seed: reproducible draws
  custom_id: "sampled", method: "POST", url: "/v1/chat/completions",
  body: { model: MODEL, messages: [{ role: "user", content: "Pick a colour." }], max_tokens: 5,
          temperature: 1, seed: 7, n: 2 },
};
const responses = {
  custom_id: "resp", method: "POST", url: "/v1/responses",
  body: { model: MODEL, input: "Say hi.", max_output_tokens: 5, temperature: 0 },
};

async function runBatch(lines, extra = []) {
  const input = join(dir, "in.jsonl");
  const output = join(dir, "out.jsonl");
  writeFileSync(input, lines.join("\n") + "\n");
  rmSync(output, { force: true });
  const { stderr } = await run(strataBin(), [
    "run-batch", "-i", input, "-o", output, "--kv-cache-memory", "128MiB", "--log-level", "warn",
    ...extra,
  ], { maxBuffer: 1 << 24 });
  assert.ok(!existsSync(`${output}.tmp`), "the temporary output was renamed");
  const out = readFileSync(output, "utf8");
  assert.ok(out.endsWith("\n"));
  return { lines: out.trimEnd().split("\n").map((l) => JSON.parse(l)), stderr };
}

test("a batch file runs through the engine: one line per request, in input order", async () => {
  const lines = [
    ...chats.map((c) => JSON.stringify(c)),
    JSON.stringify(completion),
    "{this is not json",
    JSON.stringify(sampled),
    JSON.stringify({ ...chats[0], custom_id: "wrong-model", body: { ...chats[0].body, model: "x" } }),
    JSON.stringify({ ...chats[1], custom_id: "streamed", body: { ...chats[1].body, stream: true } }),
    "",
    JSON.stringify(responses),
  ];
  const { lines: out, stderr } = await runBatch(lines);
  assert.equal(out.length, 12);
  const ids = out.map((l) => l.custom_id);
  assert.deepEqual(ids, [...chats.map((c) => c.custom_id), "cmpl", null, "sampled", "wrong-model",
                         "streamed", "resp"]);
  assert.equal(new Set(out.map((l) => l.id)).size, out.length, "unique output ids");
  for (const l of out.slice(0, 6)) {
    assert.equal(l.response.status_code, 200);
    assert.equal(l.error, null);
    const body = l.response.body;
    assert.equal(body.object, "chat.completion");
    assert.equal(l.response.request_id, body.id);
    assert.equal(body.choices[0].finish_reason, "length");
  }
  chats.forEach((c, i) => assert.equal(out[i].response.body.usage.completion_tokens,
                                       c.body.max_tokens));
  const cmpl = out[6].response.body;
  assert.equal(cmpl.object, "text_completion");
  assert.equal(cmpl.choices[0].logprobs.top_logprobs.length, 7);
  assert.match(out[7].error.message, /line 8: not valid JSON/);
  assert.equal(out[7].response, null);
  assert.equal(out[8].response.body.choices.length, 2);
  assert.equal(out[9].response.status_code, 404);
  assert.equal(out[9].response.body.error.code, "model_not_found");
  assert.match(out[10].error.message, /line 11: body\.stream/);
  assert.equal(out[11].response.body.object, "response");
  assert.equal(out[11].response.body.usage.output_tokens, 5);
  assert.match(stderr, /12 requests: 9 ok, 1 failed, 2 invalid/);
});

test("run-batch answers as strata serve does (greedy and seeded)", async () => {
  const { lines: out } = await runBatch([...chats, completion, sampled].map((l) => JSON.stringify(l)));
  const server = await Server.start();
  try {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
    for (let i = 0; i < chats.length; ++i) {
      const r = await client.chat.completions.create(chats[i].body);
      assert.equal(out[i].response.body.choices[0].message.content, r.choices[0].message.content,
                   chats[i].custom_id);
    }
    const c = await client.completions.create(completion.body);
    assert.equal(out[6].response.body.choices[0].text, c.choices[0].text);
    assert.deepEqual(out[6].response.body.choices[0].logprobs.tokens, c.choices[0].logprobs.tokens);
    const s = await client.chat.completions.create(sampled.body);
    assert.deepEqual(out[7].response.body.choices.map((x) => x.message.content),
                     s.choices.map((x) => x.message.content));
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr);
  }
});

test("many requests with a small window all finish, in order", async () => {
  const lines = [];
  for (let i = 0; i < 48; ++i) {
    lines.push(JSON.stringify({
      custom_id: `r${i}`, method: "POST", url: "/v1/completions",
      body: { model: MODEL, prompt: `Item ${i}:`, max_tokens: 1 + (i % 5), temperature: 0 },
    }));
  }
  const { lines: out } = await runBatch(lines, ["--max-concurrent-requests", "5",
                                                "--max-num-seqs", "4"]);
  assert.deepEqual(out.map((l) => l.custom_id), lines.map((l) => JSON.parse(l).custom_id));
  out.forEach((l, i) => {
    assert.equal(l.response.status_code, 200);
    assert.equal(l.response.body.usage.completion_tokens, 1 + (i % 5));
  });
});

test("run-batch refuses a missing input before loading the model", async () => {
  await assert.rejects(
    run(strataBin(), ["run-batch", "-i", join(dir, "absent.jsonl"), "-o", join(dir, "o.jsonl")]),
    (e) => e.code === 1 && /cannot read --input-file .*absent\.jsonl/.test(e.stderr));
  await assert.rejects(run(strataBin(), ["run-batch", "-i", join(dir, "x")]),
                       (e) => e.code === 2 && /--output-file \(-o\) are required/.test(e.stderr));
});

test("the Files and Batches API: upload, create, poll, download, as the SDK does", async () => {
  const server = await Server.start(["--api-key", "sk-batch", "--batch-max-concurrent-requests",
                                     "3"]);
  try {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "sk-batch", maxRetries: 0 });
    const bad = { ...chats[0], custom_id: "wrong-model", body: { ...chats[0].body, model: "x" } };
    const lines = [...chats, sampled, bad].map((l) => JSON.stringify(l));
    const file = await client.files.create({
      file: await toFile(Buffer.from(lines.join("\n") + "\n"), "requests.jsonl"),
      purpose: "batch" });
    assert.equal(file.purpose, "batch");
    assert.equal(file.filename, "requests.jsonl");
    assert.ok((await client.files.list()).data.some((f) => f.id === file.id));
    let batch = await client.batches.create({ input_file_id: file.id,
                                              endpoint: "/v1/chat/completions",
                                              completion_window: "24h",
                                              metadata: { run: "nightly" } });
    assert.equal(batch.request_counts.total, 8);
    for (let i = 0; i < 600 && !["completed", "failed", "cancelled"].includes(batch.status); ++i) {
      await new Promise((r) => setTimeout(r, 100));
      batch = await client.batches.retrieve(batch.id);
    }
    assert.equal(batch.status, "completed", JSON.stringify(batch));
    assert.deepEqual(batch.request_counts, { total: 8, completed: 7, failed: 1 });
    assert.equal(batch.metadata.run, "nightly");
    const out = (await (await client.files.content(batch.output_file_id)).text())
      .trimEnd().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(out.map((l) => l.custom_id), [...chats.map((c) => c.custom_id), "sampled"]);
    // Every answer is what the server gives the same request directly.
    for (let i = 0; i < chats.length; ++i) {
      const r = await client.chat.completions.create(chats[i].body);
      assert.equal(out[i].response.body.choices[0].message.content, r.choices[0].message.content);
    }
    const s = await client.chat.completions.create(sampled.body);
    assert.deepEqual(out[6].response.body.choices.map((x) => x.message.content),
                     s.choices.map((x) => x.message.content));
    const errors = (await (await client.files.content(batch.error_file_id)).text())
      .trimEnd().split("\n").map((l) => JSON.parse(l));
    assert.equal(errors.length, 1);
    assert.equal(errors[0].custom_id, "wrong-model");
    assert.equal(errors[0].response.status_code, 404);
    // A batch of many requests cancelled while it runs: what finished is kept, the rest never ran.
    const many = [];
    for (let i = 0; i < 120; ++i) {
      many.push(JSON.stringify({ custom_id: `m${i}`, method: "POST", url: "/v1/completions",
                                 body: { model: MODEL, prompt: `Item ${i}:`, max_tokens: 64,
                                         ignore_eos: true, temperature: 0 } }));
    }
    const manyFile = await client.files.create({
      file: await toFile(Buffer.from(many.join("\n")), "many.jsonl"), purpose: "batch" });
    let running = await client.batches.create({ input_file_id: manyFile.id,
                                                endpoint: "/v1/completions",
                                                completion_window: "24h" });
    while (running.request_counts.completed < 3) {
      await new Promise((r) => setTimeout(r, 50));
      running = await client.batches.retrieve(running.id);
    }
    // /metrics counts the batches by status and the backlog of the running one.
    const gauge = async (series) => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const line = text.split("\n").find((l) => l.startsWith(`${series} `));
      assert.ok(line, `no ${series} in /metrics`);
      return Number(line.slice(series.length + 1));
    };
    assert.equal(await gauge('strata:batches{status="in_progress"}'), 1);
    assert.equal(await gauge('strata:batches{status="completed"}'), 1);
    const pending = await gauge("strata:batch_requests_pending");
    assert.ok(pending > 0 && pending <= 117, `pending ${pending}`);
    assert.ok(await gauge("strata:files_bytes") > 0);
    running = await client.batches.cancel(running.id);
    assert.ok(["cancelling", "cancelled"].includes(running.status), running.status);
    while (running.status === "cancelling") {
      await new Promise((r) => setTimeout(r, 50));
      running = await client.batches.retrieve(running.id);
    }
    assert.equal(running.status, "cancelled");
    assert.ok(running.request_counts.completed >= 3 && running.request_counts.completed < 120,
              JSON.stringify(running.request_counts));
    assert.equal(await gauge('strata:batches{status="cancelled"}'), 1);
    assert.equal(await gauge('strata:batches{status="in_progress"}'), 0);
    assert.equal(await gauge("strata:batch_requests_pending"), 0);
    // A line to another endpoint fails the batch at creation, naming the line.
    const mixed = await client.files.create({
      file: await toFile(Buffer.from(`${JSON.stringify(chats[0])}\n${many[0]}\n`), "m.jsonl"),
      purpose: "batch" });
    const failed = await client.batches.create({ input_file_id: mixed.id,
                                                 endpoint: "/v1/chat/completions",
                                                 completion_window: "24h" });
    assert.equal(failed.status, "failed");
    assert.equal(failed.errors.data[0].line, 2);
    assert.equal(failed.errors.data[0].code, "mismatched_endpoint");
    // Files are deleted; the key is needed.
    assert.equal((await client.files.delete(file.id)).deleted, true);
    await assert.rejects(client.files.retrieve(file.id), (e) => e.status === 404);
    const anonymous = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(anonymous.batches.list(), (e) => e.status === 401);
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr);
  }
});

test("with --files-dir a batch outlives a crash: the restarted server carries it on", async () => {
  const filesDir = join(dir, "files");
  const flags = ["--api-key", "sk-keep", "--files-dir", filesDir, "--batch-max-concurrent-requests",
                 "2", "--max-num-seqs", "2"];
  const lines = [];
  for (let i = 0; i < 30; ++i) {
    lines.push({ custom_id: `k${i}`, method: "POST", url: "/v1/completions",
                 body: { model: MODEL, prompt: `Entry ${i}:`, max_tokens: 24, ignore_eos: true,
                         temperature: 0 } });
  }
  let server = await Server.start(flags);
  let client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "sk-keep", maxRetries: 0 });
  const file = await client.files.create({
    file: await toFile(Buffer.from(lines.map((l) => JSON.stringify(l)).join("\n")), "keep.jsonl"),
    purpose: "batch" });
  let batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/completions",
                                            completion_window: "24h" });
  while (batch.request_counts.completed < 4) {
    await new Promise((r) => setTimeout(r, 20));
    batch = await client.batches.retrieve(batch.id);
  }
  assert.equal(batch.status, "in_progress");
  server.child.kill("SIGKILL");  // no drain, no goodbye
  await server.exit;
  server = await Server.start(flags);
  try {
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "sk-keep", maxRetries: 0 });
    assert.equal((await client.files.retrieve(file.id)).filename, "keep.jsonl");
    for (let i = 0; i < 600 && batch.status !== "completed"; ++i) {
      await new Promise((r) => setTimeout(r, 100));
      batch = await client.batches.retrieve(batch.id);
    }
    assert.equal(batch.status, "completed", JSON.stringify(batch));
    assert.deepEqual(batch.request_counts, { total: 30, completed: 30, failed: 0 });
    assert.equal(batch.error_file_id, null);
    const out = (await (await client.files.content(batch.output_file_id)).text())
      .trimEnd().split("\n").map((l) => JSON.parse(l));
    // Each request answered once, in input order, as the server answers it directly; the
    // restarted server ran only those the first had not written (at least 4 were).
    assert.deepEqual(out.map((l) => l.custom_id), lines.map((l) => l.custom_id));
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const ran = [...metrics.matchAll(/^strata:request_success_total\{[^}]*\} (\S+)$/gm)]
      .reduce((sum, m) => sum + Number(m[1]), 0);
    assert.ok(ran >= 1 && ran <= 26, `the restarted server ran ${ran} of 30 requests`);
    for (const i of [0, 1, 2, 3, 14, 29]) {
      const direct = await client.completions.create(lines[i].body);
      assert.equal(out[i].response.body.choices[0].text, direct.choices[0].text, lines[i].custom_id);
    }
    const info = await server.info();
    assert.equal(info.files_and_batches.files.dir, filesDir);
    // One server per directory: a second one stops at start, naming why.
    await assertServeRefuses(["--port", "0", "--grpc-port", "0", "--files-dir", filesDir],
                             /--files-dir .* is in use by another process/);
    await assertServeRefuses(["--files-dir", filesDir, "--files-store-memory", "0"],
                             /--files-store-memory 0 turns off/, (code) => code === 2);
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr);
  }
});
