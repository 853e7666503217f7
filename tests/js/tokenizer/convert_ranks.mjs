// Rewrites js-tiktoken's compressed rank tables into the standard tiktoken file format
// (`base64(token) rank` per line, ranks ascending) — byte-identical to OpenAI's published
// cl100k_base.tiktoken / o200k_base.tiktoken.
//   node convert_ranks.mjs OUT_DIR  ->  OUT_DIR/{cl100k_base,o200k_base}/tiktoken.model
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { requirePeers } from "./common.mjs";

export const ENCODINGS = ["cl100k_base", "o200k_base"];

export async function loadRanks(name) {
  return (await import(`js-tiktoken/ranks/${name}`)).default;
}

// js-tiktoken's format: each line "<ignored> <startRank> <b64> <b64> ..."; consecutive tokens
// get consecutive ranks.
export function toTiktokenText(bpeRanks) {
  const entries = [];
  for (const line of bpeRanks.split("\n")) {
    if (!line) continue;
    const [, offsetText, ...tokens] = line.split(" ");
    const offset = Number.parseInt(offsetText, 10);
    tokens.forEach((token, i) => entries.push([offset + i, token]));
  }
  entries.sort((a, b) => a[0] - b[0]);
  return entries.map(([rank, token]) => `${token} ${rank}\n`).join("");
}

export async function convertAll(outDir) {
  for (const name of ENCODINGS) {
    const ranks = await loadRanks(name);
    const dir = join(outDir, name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "tiktoken.model"), toTiktokenText(ranks.bpe_ranks));
  }
}

if (process.argv[1] && process.argv[1].endsWith("convert_ranks.mjs")) {
  requirePeers("js-tiktoken");
  await convertAll(process.argv[2] ?? ".");
}
