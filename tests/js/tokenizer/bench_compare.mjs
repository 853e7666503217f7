// Encode throughput, Strata vs js-tiktoken, on the same 10 MB mixed corpus, single thread.
//   node bench_compare.mjs TOKENIZER_BENCH_BINARY WORK_DIR
// Prints one line per encoding with both rates, the ratio (target >= 3x) and the token counts,
// which must agree (both programs encode the same documents).
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { requirePeers } from "./common.mjs";

requirePeers("js-tiktoken");
const here = dirname(fileURLToPath(import.meta.url));
const [bench, workDir] = process.argv.slice(2);
if (!bench || !workDir) {
  console.error("usage: node bench_compare.mjs TOKENIZER_BENCH_BINARY WORK_DIR");
  process.exit(2);
}
mkdirSync(workDir, { recursive: true });
const corpus = join(workDir, "bench_corpus.txt");
if (!existsSync(corpus)) {
  execFileSync(process.execPath, [join(here, "make_bench_corpus.mjs"), corpus, "10"]);
}
const { ENCODINGS, convertAll } = await import("./convert_ranks.mjs");
if (!ENCODINGS.every((e) => existsSync(join(workDir, e, "tiktoken.model")))) {
  await convertAll(workDir);
}
const parse = (line) => {
  const m = line.match(/ ([0-9.]+) MB\/s \(([0-9]+) tokens\)/);
  return { rate: Number(m[1]), tokens: Number(m[2]) };
};
let ok = true;
for (const encoding of ENCODINGS) {
  const strata = parse(execFileSync(bench, [join(workDir, encoding), corpus]).toString());
  const js = parse(
    execFileSync(process.execPath, [join(here, "bench_encode.mjs"), corpus, encoding]).toString());
  const ratio = strata.rate / js.rate;
  const same = strata.tokens === js.tokens;
  ok &&= same;
  console.log(
    `${encoding}: strata ${strata.rate.toFixed(2)} MB/s, js-tiktoken ${js.rate.toFixed(2)} MB/s, ` +
      `ratio ${ratio.toFixed(1)}x (target >= 3x), tokens ${strata.tokens} vs ${js.tokens}` +
      (same ? "" : "  MISMATCH"));
}
process.exit(ok ? 0 : 1);
