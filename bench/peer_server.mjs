#!/usr/bin/env node
// llama.cpp behind a small OpenAI `/v1/completions` server, so `strata-bench-serve` can load it
// exactly as it loads Strata: the serving half of the side-by-side comparison
// (bench/peer_serve_compare.sh). A benchmark tool only: Strata never uses it.
//
//   NODE_LLAMA_CPP_DIR=SCRATCH/node_modules/node-llama-cpp \
//   node bench/peer_server.mjs --model M.gguf [--port 8001] [--parallel 8] [--ctx-size 4096]
//        [--threads 2] [--batch 512] [--name llama.cpp]
//
// What it mirrors: llama-server's slots. One llama.cpp context holds --parallel sequences of
// --ctx-size tokens each; a request takes a free sequence or waits in FIFO order for one. Requests
// that run at the same time are decoded together: node-llama-cpp queues every sequence's pending
// tokens and hands them to one llama_decode per batch (prompts of new requests ride in the same
// batch, up to --batch tokens, as llama-server's continuous batching does).
//
// The wire surface is the subset strata-bench-serve and the OpenAI SDK use: `prompt` as token ids
// (or a string, tokenized by the GGUF's vocabulary), `max_tokens`, `temperature`, `top_p`,
// `top_k`, `seed`, `ignore_eos`, `stream` with `stream_options.include_usage`. Every generated
// token is its own SSE chunk, flushed when it is sampled. GET /health, /ready, /v1/models.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import {pathToFileURL} from "node:url";

function parseArgs(argv, spec) {
  const out = {...spec};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${a}`);
    const [k, inline] = a.slice(2).split("=", 2);
    if (!(k in spec)) throw new Error(`unknown flag --${k}; flags: ${Object.keys(spec).map(s => "--" + s).join(" ")}`);
    const v = inline !== undefined ? inline : argv[++i];
    out[k] = typeof spec[k] === "number" ? Number(v) : v;
    if (typeof spec[k] === "number" && !Number.isFinite(out[k])) throw new Error(`--${k} needs a number, got ${v}`);
  }
  return out;
}

const args = parseArgs(process.argv.slice(2), {
  model: "", port: 8001, host: "127.0.0.1", parallel: 8, "ctx-size": 4096, threads: 2, batch: 512, name: "llama.cpp"
});
if (!args.model) {
  console.error("usage: node peer_server.mjs --model M.gguf [--port 8001] [--parallel 8] [--ctx-size 4096] [--threads 2] [--batch 512]");
  process.exit(2);
}
const nlcDir = process.env.NODE_LLAMA_CPP_DIR ?? path.join(process.cwd(), "node_modules", "node-llama-cpp");
const entry = path.join(nlcDir, "dist", "index.js");
if (!fs.existsSync(entry)) {
  console.error(`node-llama-cpp not found at ${nlcDir}: npm i -E node-llama-cpp@3.22.1 in a scratch directory and set NODE_LLAMA_CPP_DIR`);
  process.exit(2);
}
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);

const llama = await getLlama({gpu: false, build: "never", maxThreads: args.threads, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0, useMmap: false});
const context = await model.createContext({
  contextSize: args["ctx-size"], batchSize: args.batch, sequences: args.parallel,
  threads: {ideal: args.threads, min: args.threads}
});
const vocabSize = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length ?? 0;
const eos = model.tokens.eos;

// Slots: free sequences, and the requests waiting for one (FIFO).
const free = Array.from({length: args.parallel}, () => context.getSequence());
const waiting = [];
function acquire() {
  if (free.length > 0) return Promise.resolve(free.pop());
  return new Promise(resolve => waiting.push(resolve));
}
async function release(seq) {
  await seq.clearHistory();
  const next = waiting.shift();
  if (next) next(seq); else free.push(seq);
}

// The step loop (llama-server's update_slots): every running request hands in its next input
// (a prompt, or the token sampled last step) and one step evaluates them all together; node-llama-cpp
// packs the queued items of all sequences into llama_decode batches of up to --batch tokens and
// samples inside the batch. Without the barrier each sequence re-queues as soon as its own token
// is sampled and steps split (bench checkpoint, 4 sequences: 27-29 tok/s through node-llama-cpp's
// evaluate() generators, 34 with the barrier). The HTTP layer costs nothing measurable: the same
// steps driven by a bare loop took the same 117 ms each (4 sequences route their tokens to ~4x
// the experts one does, so a step of 4 costs ~3x a step of 1).
let pending = [];
let stepping = false;
function step(seq, input) {
  return new Promise((resolve, reject) => {
    pending.push({seq, input, resolve, reject});
    if (!stepping) { stepping = true; setImmediate(runStep); }
  });
}
async function runStep() {
  const items = pending;
  pending = [];
  await Promise.all(items.map(async item => {
    try {
      const result = await item.seq.controlledEvaluate(item.input);
      const token = result[item.input.length - 1]?.next?.token;
      if (token === undefined) throw new Error("llama.cpp returned no token");
      item.resolve(token);
    } catch (e) {
      item.reject(e);
    }
  }));
  // The requests queue their next inputs in the microtasks that the resolutions above start;
  // setImmediate runs after them, so the next step sees every running request.
  if (pending.length > 0) setImmediate(runStep); else stepping = false;
}

class BadRequest extends Error {}
function promptTokens(prompt) {
  if (typeof prompt === "string") return model.tokenize(prompt);
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every(Number.isInteger)) {
    const bad = prompt.find(t => t < 0 || (vocabSize > 0 && t >= vocabSize));
    if (bad !== undefined) throw new BadRequest(`prompt token ${bad} is outside the vocabulary [0, ${vocabSize})`);
    return prompt;
  }
  throw new BadRequest("prompt must be a string or a non-empty list of token ids");
}

let nextId = 0;
async function complete(body, res) {
  const prompt = promptTokens(body.prompt);
  const maxTokens = body.max_tokens ?? 16;
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new BadRequest(`max_tokens must be an integer >= 1, got ${maxTokens}`);
  if (prompt.length + maxTokens > args["ctx-size"])
    throw new BadRequest(`prompt (${prompt.length} tokens) + max_tokens (${maxTokens}) exceeds --ctx-size ${args["ctx-size"]}`);
  const stream = body.stream === true;
  const id = `cmpl-peer-${nextId++}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choice, extra = {}) => JSON.stringify({id, object: "text_completion", created, model: args.name, choices: choice, ...extra});

  const seq = await acquire();
  let aborted = false;
  res.on("close", () => { aborted = !res.writableFinished; });
  const out = [];
  let finish = "length";
  try {
    if (stream) res.writeHead(200, {"content-type": "text/event-stream", "cache-control": "no-cache"});
    const options = {temperature: body.temperature ?? 1.0, topP: body.top_p, topK: body.top_k, seed: body.seed ?? undefined};
    let input = prompt.map((token, i) => i + 1 < prompt.length ? token : [token, {generateNext: {token: true, options}}]);
    while (out.length < maxTokens) {
      const token = await step(seq, input);
      if (aborted) { finish = "abort"; break; }
      if (token === eos && body.ignore_eos !== true) { finish = "stop"; break; }
      out.push(token);
      if (stream) res.write(`data: ${chunk([{index: 0, text: model.detokenize([token]), finish_reason: null}])}\n\n`);
      input = [[token, {generateNext: {token: true, options}}]];
    }
  } finally {
    await release(seq);
  }
  const usage = {prompt_tokens: prompt.length, completion_tokens: out.length, total_tokens: prompt.length + out.length};
  if (aborted) return;
  if (stream) {
    res.write(`data: ${chunk([{index: 0, text: "", finish_reason: finish}])}\n\n`);
    if (body.stream_options?.include_usage) res.write(`data: ${chunk([], {usage})}\n\n`);
    res.end("data: [DONE]\n\n");
  } else {
    res.writeHead(200, {"content-type": "application/json"});
    res.end(chunk([{index: 0, text: model.detokenize(out), finish_reason: finish}], {usage}));
  }
}

function sendJson(res, status, value) {
  res.writeHead(status, {"content-type": "application/json"});
  res.end(JSON.stringify(value));
}
function sendError(res, status, message) {
  if (res.headersSent) {
    res.end(`data: ${JSON.stringify({error: {message, type: "server_error"}})}\n\n`);
    return;
  }
  sendJson(res, status, {error: {message, type: status === 400 ? "invalid_request_error" : "server_error", param: null, code: null}});
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && (req.url === "/health" || req.url === "/ready")) return sendJson(res, 200, {status: "ok"});
  if (req.method === "GET" && req.url === "/v1/models")
    return sendJson(res, 200, {object: "list", data: [{id: args.name, object: "model", owned_by: "llama.cpp", max_model_len: args["ctx-size"]}]});
  if (req.method !== "POST" || req.url !== "/v1/completions") return sendError(res, 404, `no route ${req.method} ${req.url}`);
  const parts = [];
  req.on("data", d => parts.push(d));
  req.on("end", () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(parts).toString("utf8"));
    } catch (e) {
      return sendError(res, 400, `request body is not JSON: ${e.message}`);
    }
    complete(body, res).catch(e => sendError(res, e instanceof BadRequest ? 400 : 500, e.message));
  });
});
server.listen(args.port, args.host, () => {
  console.log(`peer_server: llama.cpp ${llama.llamaCppRelease?.release ?? ""} serving ${args.model} on http://${args.host}:${args.port} ` +
              `(${args.parallel} sequences x ${args["ctx-size"]} tokens, ${args.threads} threads, batch ${args.batch})`);
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => { server.close(); process.exit(0); });
