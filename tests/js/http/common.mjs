// Shared helpers for the HTTP server tests: start a real `strata serve` (the embedded demo
// model) on a free loopback port, wait until it is ready, and stop it.
//
// Environment (set by ctest, tests/http/CMakeLists.txt):
//   STRATA_BIN        the strata binary
//   STRATA_CACHE_DIR  where the demo model is generated once (shared by the tests)
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const jsRoot = join(dirname(fileURLToPath(import.meta.url)), "..");

// Exits non-zero with the fix when tests/js/node_modules lacks a package (CI runs
// `npm ci --prefix tests/js` first; a missing client must fail, never skip).
export function requirePackages(...packages) {
  for (const pkg of packages) {
    if (!existsSync(join(jsRoot, "node_modules", pkg, "package.json"))) {
      console.error(
        `tests/js/node_modules/${pkg} is missing: run \`npm ci --prefix tests/js\` ` +
          "(the HTTP tests drive the server with the pinned official clients)");
      process.exit(1);
    }
  }
}

export function strataBin() {
  const bin = process.env.STRATA_BIN;
  if (!bin || !existsSync(bin)) {
    console.error(`STRATA_BIN must name the strata binary (got '${bin}')`);
    process.exit(1);
  }
  return bin;
}

// `strata serve ARGS` stops at start, never ready: an exit code `isCode` accepts and a stderr
// matching `pattern` (the reason, named).
export async function assertServeRefuses(args, pattern, isCode = (code) => code !== 0) {
  await assert.rejects(
    promisify(execFile)(strataBin(), ["serve", ...args], { timeout: 60000 }),
    (e) => isCode(e.code) && pattern.test(e.stderr));
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Servers still running when the test process exits are killed (no strays after a failure).
const live = new Set();
process.on("exit", () => { for (const child of live) child.kill("SIGKILL"); });

// A running `strata serve`. `flags` are extra command-line flags.
export class Server {
  static async start(flags = [], { env = {}, readyTimeoutMs = 120000 } = {}) {
    const args = ["serve", "--host", "127.0.0.1", "--port", "0", "--kv-cache-memory", "128MiB",
                  "--log-level", "warn", ...flags];
    const child = spawn(strataBin(), args, {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const server = new Server(child);
    await server.#waitReady(readyTimeoutMs);
    return server;
  }

  constructor(child) {
    this.child = child;
    live.add(child);
    child.on("exit", () => live.delete(child));
    this.stdout = "";
    this.stderr = "";
    this.exit = new Promise((resolve) => {
      child.on("exit", (code, signal) => resolve({ code, signal }));
    });
    child.stdout.on("data", (d) => { this.stdout += d; });
    child.stderr.on("data", (d) => { this.stderr += d; });
  }

  async #waitReady(timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const m = this.stdout.match(/on http:\/\/127\.0\.0\.1:(\d+) /);
      if (m) {
        this.port = Number(m[1]);
        this.url = `http://127.0.0.1:${this.port}`;
        const r = await fetch(`${this.url}/ready`).catch(() => null);
        if (r && r.status === 200) return;
      }
      if (this.child.exitCode !== null) break;
      await sleep(50);
    }
    this.child.kill("SIGKILL");
    throw new Error(`strata serve did not become ready:\n${this.stdout}\n${this.stderr}`);
  }

  // The curl line printed at start-up (the README's promise).
  curlLine() {
    return this.stdout.split("\n").find((l) => l.startsWith("curl "));
  }

  async info() {
    return (await fetch(`${this.url}/server_info`)).json();
  }

  // Polls /server_info until `predicate(info)` holds; returns the last info.
  async waitInfo(predicate, timeoutMs = 20000) {
    const deadline = Date.now() + timeoutMs;
    let info = await this.info();
    while (!predicate(info) && Date.now() < deadline) {
      await sleep(25);
      info = await this.info();
    }
    return info;
  }

  // SIGTERM and the exit status.
  async stop(signal = "SIGTERM") {
    if (this.child.exitCode === null) this.child.kill(signal);
    return this.exit;
  }
}

// The engine holds nothing: no sequence running or waiting, every page and slot free.
export function cacheIsEmpty(info) {
  const e = info.engine;
  return e.num_unfinished === 0 && e.num_running === 0 && e.num_waiting === 0 &&
         e.num_free_blocks === e.num_blocks && e.num_free_slots === e.num_slots;
}

// Parses an SSE body into events: {comment} or {data} (raw string), checking the framing.
export function parseSse(text) {
  if (!text.endsWith("\n\n")) throw new Error(`SSE body does not end with a blank line`);
  return text.slice(0, -2).split("\n\n").map((block) => {
    if (block.startsWith(":")) return { comment: block.slice(1).trim() };
    if (!block.startsWith("data: ") || block.includes("\n")) {
      throw new Error(`bad SSE event: ${JSON.stringify(block)}`);
    }
    return { data: block.slice(6) };
  });
}
