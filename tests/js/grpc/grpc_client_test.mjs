// Interop: a Node.js client (@grpc/grpc-js + @grpc/proto-loader, pinned in tests/js/package.json)
// against a real `strata serve` (the embedded demo model) on free loopback ports: one streamed
// generation to the end, one cancelled mid-stream (its cache is freed), one INVALID_ARGUMENT.
//
// Environment (set by ctest, clients/CMakeLists.txt): STRATA_BIN, STRATA_PROTO_DIR.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync } from "node:fs";

const jsRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
for (const pkg of ["@grpc/grpc-js", "@grpc/proto-loader"]) {
  if (!existsSync(join(jsRoot, "node_modules", pkg, "package.json"))) {
    console.error(`tests/js/node_modules/${pkg} is missing: run \`npm ci --prefix tests/js\``);
    process.exit(1);
  }
}
const require = createRequire(join(jsRoot, "package.json"));
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const protoDir = process.env.STRATA_PROTO_DIR;
const bin = process.env.STRATA_BIN;
assert.ok(protoDir && bin, "STRATA_PROTO_DIR and STRATA_BIN must be set");

const definition = protoLoader.loadSync(["strata/v1/inference.proto", "strata/v1/control.proto"],
  { includeDirs: [protoDir], keepCase: true, longs: Number, defaults: true, oneofs: true });
const v1 = grpc.loadPackageDefinition(definition).strata.v1;

// Starts `strata serve` on free ports and resolves with its gRPC target once ready.
function startServer() {
  const child = spawn(bin, ["serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "0",
                            "--kv-cache-memory", "128MiB", "--log-level", "warn"],
                      { stdio: ["ignore", "pipe", "pipe"] });
  process.on("exit", () => child.kill("SIGKILL"));
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server not ready:\n${out}\n${err}`)), 120000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/gRPC API \(strata\.v1\) on 127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, target: `127.0.0.1:${m[1]}` });
      }
    });
    child.on("exit", (code) => reject(new Error(`server exited ${code}:\n${out}\n${err}`)));
  });
}

function unary(client, method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, (e, r) => (e ? reject(e) : resolve(r))));
}

// Reads a Generate stream; `onChunk(n, call)` after each chunk. Resolves {chunks, completes,
// status} (status: the error's code, or 0).
function generate(client, request, onChunk = () => {}) {
  return new Promise((resolve) => {
    const call = client.Generate(request);
    const chunks = [];
    const completes = [];
    call.on("data", (r) => {
      if (r.chunk) {
        chunks.push(r.chunk);
        onChunk(chunks.length, call);
      } else {
        completes.push(r.complete);
      }
    });
    call.on("error", (e) => resolve({ chunks, completes, status: e.code, details: e.details }));
    call.on("end", () => resolve({ chunks, completes, status: 0 }));
  });
}

const { child, target } = await startServer();
const inference = new v1.Inference(target, grpc.credentials.createInsecure());
const control = new v1.Control(target, grpc.credentials.createInsecure());
let failed = false;
async function test(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed = true;
    console.log(`not ok - ${name}\n${e.stack}`);
  }
}

const info = await unary(control, "GetModelInfo", {});

await test("streams a generation to its Complete", async () => {
  const r = await generate(inference, { token_ids: { ids: [1, 2, 3] }, max_tokens: 10,
                                        ignore_eos: true, sampling: { temperature: 0 } });
  assert.equal(r.status, 0);
  assert.equal(r.chunks.flatMap((c) => c.token_ids).length, 10);
  assert.equal(r.completes.length, 1);
  assert.equal(r.completes[0].finish_reason, "length");
  assert.equal(r.completes[0].usage.completion_tokens, 10);
});

await test("cancelling a stream aborts it and frees its cache", async () => {
  const before = (await unary(control, "GetLoads", {})).num_aborted_total;
  const r = await generate(inference, { token_ids: { ids: [4, 5] }, ignore_eos: true,
                                        max_tokens: info.max_model_len - 2 },
                           (n, call) => { if (n === 3) call.cancel(); });
  assert.equal(r.status, grpc.status.CANCELLED);
  let loads;
  for (let i = 0; i < 500; ++i) {
    loads = await unary(control, "GetLoads", {});
    if (loads.num_aborted_total >= before + 1 && loads.num_unfinished === 0 &&
        loads.num_free_blocks === loads.num_blocks) break;
    await new Promise((res) => setTimeout(res, 10));
  }
  assert.equal(loads.num_unfinished, 0);
  assert.equal(loads.num_free_blocks, loads.num_blocks);
  assert.equal(loads.num_aborted_total, before + 1);
});

await test("an invalid field is INVALID_ARGUMENT naming it", async () => {
  const r = await generate(inference, { token_ids: { ids: [1] }, max_tokens: 4,
                                        sampling: { temperature: 9 } });
  assert.equal(r.status, grpc.status.INVALID_ARGUMENT);
  assert.match(r.details, /temperature/);
});

inference.close();
control.close();
child.kill("SIGTERM");
await new Promise((res) => child.on("exit", res));
process.exit(failed ? 1 : 0);
