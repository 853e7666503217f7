// Writes the mixed benchmark corpus (deterministic, ~10 MB of UTF-8): English prose with
// numbers and punctuation, code, many scripts, emoji and random code points, joined by
// whitespace runs.   node make_bench_corpus.mjs OUT_FILE [MEGABYTES]
import { writeFileSync } from "node:fs";
import { makeCorpus } from "./encoding_corpus.mjs";

const out = process.argv[2];
const megabytes = Number(process.argv[3] ?? 10);
if (!out) {
  console.error("usage: node make_bench_corpus.mjs OUT_FILE [MEGABYTES]");
  process.exit(2);
}
// Generated strings only (the hand-written edge cases repeat single characters thousands of
// times and would make the corpus unrepresentative).
const pieces = makeCorpus(424242, 40000).slice(100);
const target = megabytes * 1024 * 1024;
const parts = [];
let bytes = 0;
for (let i = 0; bytes < target; ++i) {
  const s = pieces[i % pieces.length] + "\n";
  parts.push(s);
  bytes += Buffer.byteLength(s);
}
writeFileSync(out, parts.join(""));
console.log(`wrote ${bytes} bytes to ${out}`);
