// A vLLM command line ported to `strata serve`: the flags a model card passes are understood (or
// refused naming what to use instead), a browser origin gets CORS headers, and the prefix cache
// can be reset between benchmark runs — all against a real server with the demo model.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, test } from "node:test";

import { Server, strataBin } from "./common.mjs";

let server;

before(async () => {
  server = await Server.start([
    "--trust-remote-code", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3",
    "--dtype", "auto", "--tensor-parallel-size", "1", "--kv-cache-dtype", "bf16",
    "--allowed-origins", '["https://ui.example"]',
    // Kimi K3's and the expert-parallel deployment lines (the demo model is in K3's format).
    "--reasoning-parser", "kimi_k3", "--enable-expert-parallel", "--data-parallel-size", "1",
    "--enable-chunked-prefill", "--disable-log-stats", "--enable-request-id-headers",
  ]);
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

test("the vLLM flags take effect: a bf16 latent cache, prefix caching on", async () => {
  const info = await server.info();
  assert.equal(info.memory_plan.kv_cache_dtype, "bf16", JSON.stringify(info.memory_plan));
  assert.equal(info.config.enable_prefix_caching, true, JSON.stringify(info.config));
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /strata:cache_config_info\{[^}]*cache_dtype="bf16"[^}]*\} 1/);
});

test("flags Strata cannot honour stop the start naming the alternative", () => {
  const refused = (flags) => spawnSync(strataBin(), ["serve", "--port", "0", ...flags],
                                       { encoding: "utf8", timeout: 60000 });
  // The demo model has 4 KDA and 4 MLA heads: 3 ranks cannot split them.
  const tp = refused(["--tensor-parallel-size", "3"]);
  assert.notEqual(tp.status, 0);
  assert.match(tp.stderr, /4 KDA heads cannot be split over --tensor-parallel-size 3/);
  // Data parallelism over tensor-parallel groups runs (tests/multirank tp-dp); a world the
  // groups do not divide, or a process straddling two groups, is refused.
  const tpdp = refused(["--tensor-parallel-size", "2", "--world-size", "3"]);
  assert.notEqual(tpdp.status, 0);
  assert.match(tpdp.stderr, /a world of 3 ranks cannot be cut into tensor-parallel groups of --tensor-parallel-size 2/);
  const straddle = refused(["--tensor-parallel-size", "4", "--world-size", "12", "--local-ranks", "6"]);
  assert.notEqual(straddle.status, 0);
  assert.match(straddle.stderr, /6 ranks per process with --tensor-parallel-size 4: a process runs whole tensor-parallel groups or a part of one/);
  const gpu = refused(["--gpu-memory-utilization", "0.9"]);
  assert.notEqual(gpu.status, 0);
  assert.match(gpu.stderr, /--gpu-memory-utilization .*--kv-cache-memory/);
  const parser = refused(["--tool-call-parser", "hermes"]);
  assert.notEqual(parser.status, 0);
  assert.match(parser.stderr, /kimi_k2/);
  // A parser of the other format is refused, not ignored.
  const k2 = refused(["--tool-call-parser", "kimi_k2"]);
  assert.notEqual(k2.status, 0);
  assert.match(k2.stderr, /--tool-call-parser kimi_k2 does not fit .*give kimi_k3 or leave the flag out/);
  const k2reasoning = refused(["--reasoning-parser", "kimi_k2"]);
  assert.notEqual(k2reasoning.status, 0);
  assert.match(k2reasoning.stderr, /--reasoning-parser kimi_k2 does not fit/);
  const fp16 = refused(["--dtype", "float16"]);
  assert.notEqual(fp16.status, 0);
  assert.match(fp16.stderr, /--dtype must be auto or bfloat16/);
  const reasoning = refused(["--reasoning-parser", "deepseek_r1"]);
  assert.notEqual(reasoning.status, 0);
  assert.match(reasoning.stderr, /--reasoning-parser: .*kimi_k2.*got 'deepseek_r1'/);
  const unchunked = refused(["--no-enable-chunked-prefill"]);
  assert.notEqual(unchunked.status, 0);
  assert.match(unchunked.stderr, /--max-num-batched-tokens/);
  const dp = refused(["--data-parallel-size", "2", "--world-size", "2"]);
  assert.notEqual(dp.status, 0);
  assert.match(dp.stderr, /--world-size and --data-parallel-size mean the same/);
});

test("X-Request-Id comes back and names the response", async () => {
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Request-Id": "gw-7f3a" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
  });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get("x-request-id"), "gw-7f3a");
  assert.equal((await r.json()).id, "chatcmpl-gw-7f3a");
  const models = await fetch(`${server.url}/v1/models`, { headers: { "X-Request-Id": "gw-2" } });
  assert.equal(models.headers.get("x-request-id"), "gw-2");
});

test("--disable-log-requests drops the line per finished request", async () => {
  const logged = async (flags) => {
    const s = await Server.start(["--log-level", "info", ...flags]);
    const r = await fetch(`${s.url}/v1/completions`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "hi", max_tokens: 2 }),
    });
    assert.equal(r.status, 200);
    const { code } = await s.stop();
    assert.equal(code, 0, s.stderr);
    return /\[request\] request_id=cmpl-/.test(s.stderr);
  };
  assert.equal(await logged([]), true);
  assert.equal(await logged(["--enable-log-requests"]), true);
  assert.equal(await logged(["--disable-log-requests"]), false);
});

test("a browser origin gets a preflight answer and CORS headers; others do not", async () => {
  const preflight = await fetch(`${server.url}/v1/chat/completions`, {
    method: "OPTIONS",
    headers: { Origin: "https://ui.example", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "content-type" },
  });
  assert.equal(preflight.status, 200);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "https://ui.example");
  assert.match(preflight.headers.get("access-control-allow-methods"), /POST/);
  const models = await fetch(`${server.url}/v1/models`, { headers: { Origin: "https://ui.example" } });
  assert.equal(models.headers.get("access-control-allow-origin"), "https://ui.example");
  const other = await fetch(`${server.url}/v1/models`, { headers: { Origin: "https://evil.example" } });
  assert.equal(other.status, 200);
  assert.equal(other.headers.get("access-control-allow-origin"), null);
});

test("/reset_prefix_cache makes a repeated prompt miss the cache again", async () => {
  const body = { prompt: "x ".repeat(300), max_tokens: 1 };
  const complete = async () => {
    const r = await fetch(`${server.url}/v1/completions`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    assert.equal(r.status, 200);
    return (await r.json()).usage.prompt_tokens_details.cached_tokens;
  };
  await complete();
  assert.ok(await complete() > 0, "the repeated prompt was meant to hit the prefix cache");
  const reset = await fetch(`${server.url}/reset_prefix_cache`, { method: "POST" });
  assert.equal(reset.status, 200);
  const counts = await reset.json();
  assert.equal(counts.status, "ok");
  assert.ok(counts.num_blocks_dropped > 0, JSON.stringify(counts));
  assert.equal(await complete(), 0);
});
