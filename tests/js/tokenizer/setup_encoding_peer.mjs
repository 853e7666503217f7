// Set-up of the encoding peer test (a ctest fixture):
//   node setup_encoding_peer.mjs OUT_DIR
// writes OUT_DIR/{cl100k_base,o200k_base}/tiktoken.model (converted from js-tiktoken's ranks;
// no tokenizer_config.json, so Strata must recognise them by sha256) and
// OUT_DIR/encoding_vectors.json: {corpus, special_corpus, <encoding>: {ids, special_ids}} with
// ids from js-tiktoken (ordinary text: encode(s, [], []); special: encode(s, "all")).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { requirePeers } from "./common.mjs";

requirePeers("js-tiktoken");
const { Tiktoken } = await import("js-tiktoken/lite");
const { ENCODINGS, convertAll, loadRanks } = await import("./convert_ranks.mjs");
const { makeCorpus, makeSpecialCorpus } = await import("./encoding_corpus.mjs");

const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node setup_encoding_peer.mjs OUT_DIR");
  process.exit(2);
}
await convertAll(outDir);
const corpus = makeCorpus(20240501, 4000);
const vectors = { corpus };
for (const name of ENCODINGS) {
  const ranks = await loadRanks(name);
  const enc = new Tiktoken(ranks);
  const specialCorpus = makeSpecialCorpus(77, 300, Object.keys(ranks.special_tokens));
  vectors[`${name}_special_corpus`] = specialCorpus;
  vectors[name] = {
    ids: corpus.map((s) => enc.encode(s, [], [])),
    special_ids: specialCorpus.map((s) => enc.encode(s, "all")),
  };
}
writeFileSync(join(outDir, "encoding_vectors.json"), JSON.stringify(vectors));
console.log(`wrote ${corpus.length} strings x ${ENCODINGS.length} encodings to ${outDir}`);
