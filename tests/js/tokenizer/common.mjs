// Shared helpers for the tokenizer peer tests: dependency check and a seeded PRNG.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const jsRoot = join(dirname(fileURLToPath(import.meta.url)), "..");

// Exits non-zero with the fix when tests/js/node_modules lacks a peer package.
export function requirePeers(...packages) {
  for (const pkg of packages) {
    if (!existsSync(join(jsRoot, "node_modules", pkg, "package.json"))) {
      console.error(
        `tests/js/node_modules/${pkg} is missing: run \`npm ci --prefix tests/js\` ` +
          "(the peer-comparison tests need the pinned JavaScript implementations)");
      process.exit(1);
    }
  }
}

// mulberry32: small deterministic PRNG so every run generates the same corpus.
export function makeRng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),  // inclusive
    pick: (list) => list[Math.floor(next() * list.length)],
  };
}
