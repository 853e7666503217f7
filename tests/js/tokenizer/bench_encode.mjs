// js-tiktoken encode throughput on a corpus file, single thread.
//   node bench_encode.mjs CORPUS_FILE ENCODING  ->  prints "js-tiktoken <encoding> <MB/s> MB/s"
import { readFileSync } from "node:fs";
import { requirePeers } from "./common.mjs";

requirePeers("js-tiktoken");
const { Tiktoken } = await import("js-tiktoken/lite");
const [file, encoding] = process.argv.slice(2);
const text = readFileSync(file, "utf8");
const enc = new Tiktoken((await import(`js-tiktoken/ranks/${encoding}`)).default);
const docs = text.split("\n");
enc.encode(docs.slice(0, 200).join("\n"), [], []);  // warm-up (JIT)
const start = process.hrtime.bigint();
let tokens = 0;
for (const doc of docs) tokens += enc.encode(doc + "\n", [], []).length;
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
const mb = Buffer.byteLength(text) / (1024 * 1024);
console.log(`js-tiktoken ${encoding} ${(mb / seconds).toFixed(3)} MB/s (${tokens} tokens)`);
