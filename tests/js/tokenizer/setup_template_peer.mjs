// Set-up of the chat-template peer test (a ctest fixture):
//   node setup_template_peer.mjs OUT_DIR  ->  OUT_DIR/template_vectors.json
// Each vector holds the template source, the raw inputs (messages as clients send them, tools,
// add_generation_prompt, chat_template_kwargs, special tokens) and @huggingface/jinja's output,
// or error: true when it throws. Inputs are normalised as vLLM does (tool-call argument strings
// parsed to objects) before rendering; Strata must do the same itself.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { requirePeers } from "./common.mjs";

requirePeers("@huggingface/jinja");
const { Template } = await import("@huggingface/jinja");
const { CASES, KWARGS, SPECIAL_TOKENS } = await import("./chat_cases.mjs");

const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node setup_template_peer.mjs OUT_DIR");
  process.exit(2);
}

function normalizeMessages(messages) {
  const copy = structuredClone(messages);
  for (const m of copy) {
    for (const call of Array.isArray(m.tool_calls) ? m.tool_calls : []) {
      const fn = call?.function;
      if (fn && typeof fn.arguments === "string") {
        try {
          fn.arguments = JSON.parse(fn.arguments);
        } catch {
          // not JSON: left as a string
        }
      }
    }
  }
  return copy;
}

const templateDir = join(dirname(fileURLToPath(import.meta.url)), "templates");
const vectors = [];
for (const file of readdirSync(templateDir).filter((f) => f.endsWith(".jinja")).sort()) {
  const name = file.replace(/\.jinja$/, "");
  const source = readFileSync(join(templateDir, file), "utf8");
  const template = new Template(source);
  const tokens = SPECIAL_TOKENS[name] ?? {};
  const cases = name === "features" ? [{ name: "features", messages: [] }] : CASES;
  for (const c of cases) {
    const kwargsList = name === "features" ? KWARGS.features : [null, ...(KWARGS[name] ?? [])];
    for (const kwargs of kwargsList) {
      for (const addGenerationPrompt of [false, true]) {
        const context = {
          messages: normalizeMessages(c.messages),
          tools: c.tools ?? null,
          add_generation_prompt: addGenerationPrompt,
          ...tokens,
          ...(kwargs ?? {}),
        };
        const vector = {
          template: name, case: c.name, source, messages: c.messages, tools: c.tools ?? null,
          add_generation_prompt: addGenerationPrompt, kwargs, ...tokens,
        };
        try {
          vector.expected = template.render(context);
          vector.error = false;
        } catch (e) {
          vector.error = true;
          vector.message = String(e?.message ?? e);
        }
        vectors.push(vector);
      }
    }
  }
}
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, "template_vectors.json"), JSON.stringify(vectors));
const errors = vectors.filter((v) => v.error).length;
console.log(`wrote ${vectors.length} template renderings (${errors} errors) to ${outDir}`);
