// Images through the official clients (issue 47; docs/vision.md): the `openai` SDK's chat
// image_url parts and Responses input_image, and `@anthropic-ai/sdk`'s base64 image blocks, sent
// to a real `strata serve` running the embedded demo model (its tiny vision tower: a 448x448
// image is 256 rows). Usage counts the rows; a broken image is the SDK's BadRequestError (400).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { crc32, deflateSync } from "node:zlib";

import { requirePackages, Server } from "./common.mjs";

requirePackages("openai", "@anthropic-ai/sdk");
const { default: OpenAI, BadRequestError } = await import("openai");
const { default: Anthropic, BadRequestError: AnthropicBadRequestError } =
  await import("@anthropic-ai/sdk");

const KEY = "sk-strata-test";
const MODEL = "strata-demo";
const SIDE = 448;
const ROWS = 256;  // (448 / 14)^2 patches merged 2x2 by the demo tower
const QUESTION = "Describe the picture.";
const BROKEN = "data:image/png;base64,AAAA";  // three zero bytes: not an image
let server;
let openai;
let anthropic;
let perImage;  // prompt tokens one 448x448 image adds: its rows and its media block's text

// A PNG of `side`x`side` RGB pixels in 16x16 tiles of seeded pseudo-random colours.
function png(seed, side = SIDE) {
  let state = seed >>> 0;
  const next = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0) >>> 24;
  const tiles = Array.from({ length: (side / 16) ** 2 }, () => [next(), next(), next()]);
  const raw = Buffer.alloc(side * (3 * side + 1));
  for (let y = 0; y < side; ++y) {
    raw[y * (3 * side + 1)] = 0;  // filter: none
    for (let x = 0; x < side; ++x) {
      const colour = tiles[Math.floor(y / 16) * (side / 16) + Math.floor(x / 16)];
      for (let c = 0; c < 3; ++c) raw[y * (3 * side + 1) + 1 + 3 * x + c] = colour[c];
    }
  }
  const chunk = (type, body) => {
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(Buffer.concat([Buffer.from(type), body])));
    return Buffer.concat([head, Buffer.from(type), body, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(side, 0);
  ihdr.writeUInt32BE(side, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);  // 8-bit RGB
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
                        chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)),
                        chunk("IEND", Buffer.alloc(0))]);
}

const imageBase64 = png(7).toString("base64");
const imageUrl = `data:image/png;base64,${imageBase64}`;

before(async () => {
  server = await Server.start(["--api-key", KEY]);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
  // The media block K3's template writes for the image, as /tokenize counts it (its
  // <|media_pad|> is one token there and expands to the image's rows in the prompt).
  const r = await fetch(`${server.url}/tokenize`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({
      model: MODEL, add_special_tokens: false,
      prompt: `<|media_begin|>image ${SIDE}x${SIDE}<|media_content|><|media_pad|><|media_end|>`,
    }),
  });
  assert.equal(r.status, 200);
  perImage = ROWS + (await r.json()).count - 1;
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `strata serve exited with ${code}:\n${server.stderr}`);
});

test("chat.completions: an image_url part adds its rows to usage.prompt_tokens", async () => {
  const ask = (content) => openai.chat.completions.create({
    model: MODEL, max_tokens: 8, temperature: 0, messages: [{ role: "user", content }] });
  const text = await ask([{ type: "text", text: QUESTION }]);
  const image = await ask([{ type: "image_url", image_url: { url: imageUrl, detail: "low" } },
                           { type: "text", text: QUESTION }]);
  assert.ok(perImage >= ROWS);
  assert.equal(image.usage.prompt_tokens - text.usage.prompt_tokens, perImage);
  assert.equal(image.usage.total_tokens,
               image.usage.prompt_tokens + image.usage.completion_tokens);
  // The same image again: served from the prefix cache through the image.
  const again = await ask([{ type: "image_url", image_url: { url: imageUrl } },
                           { type: "text", text: QUESTION }]);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens >= ROWS,
            JSON.stringify(again.usage));
  assert.deepEqual(again.choices[0].message, image.choices[0].message);
});

test("responses: an input_image adds its rows to usage.input_tokens", async () => {
  const ask = (content) => openai.responses.create({
    model: MODEL, max_output_tokens: 8, temperature: 0, input: [{ role: "user", content }] });
  const text = await ask([{ type: "input_text", text: QUESTION }]);
  const image = await ask([{ type: "input_image", image_url: imageUrl, detail: "auto" },
                           { type: "input_text", text: QUESTION }]);
  assert.equal(image.object, "response");
  assert.equal(image.usage.input_tokens - text.usage.input_tokens, perImage);
});

test("anthropic messages: a base64 image block adds its rows to the input tokens", async () => {
  const ask = (content) => anthropic.messages.create({
    model: MODEL, max_tokens: 8, temperature: 0, messages: [{ role: "user", content }] });
  const textContent = [{ type: "text", text: QUESTION }];
  const imageContent = [
    { type: "image", source: { type: "base64", media_type: "image/png", data: imageBase64 } },
    ...textContent];
  const inputTokens = (m) => m.usage.input_tokens + m.usage.cache_read_input_tokens;
  const text = await ask(textContent);
  const image = await ask(imageContent);
  assert.equal(image.type, "message");
  assert.equal(inputTokens(image) - inputTokens(text), perImage);
  const counted = await anthropic.messages.countTokens({
    model: MODEL, messages: [{ role: "user", content: imageContent }] });
  assert.equal(counted.input_tokens, inputTokens(image));
});

test("a broken image is a 400 BadRequestError in each SDK, and serving goes on", async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user",
      content: [{ type: "text", text: QUESTION },
                { type: "image_url", image_url: { url: BROKEN } }] }] }),
    (e) => e instanceof BadRequestError && e.status === 400 && e.code === "invalid_image" &&
           e.param === "messages[0].content[1].image_url.url" && /not an image/.test(e.message));
  await assert.rejects(
    openai.chat.completions.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user",
      content: [{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }] }] }),
    (e) => e instanceof BadRequestError && e.code === "unsupported_value" &&
           e.param === "messages[0].content[0].image_url.url" && /data: URL/.test(e.message));
  await assert.rejects(
    openai.responses.create({ model: MODEL, max_output_tokens: 4, input: [{ role: "user",
      content: [{ type: "input_image", image_url: BROKEN, detail: "auto" }] }] }),
    (e) => e instanceof BadRequestError && e.status === 400 && e.code === "invalid_image" &&
           e.param === "input" && /image 1: not an image/.test(e.message));
  await assert.rejects(
    anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user",
      content: [{ type: "image", source: { type: "base64", media_type: "image/png",
                                           data: "AAAA" } }] }] }),
    (e) => e instanceof AnthropicBadRequestError && e.status === 400 &&
           e.error?.error?.type === "invalid_request_error" && /not an image/.test(e.message));
  const ok = await openai.chat.completions.create({
    model: MODEL, max_tokens: 4, messages: [{ role: "user", content: [
      { type: "image_url", image_url: { url: imageUrl } }, { type: "text", text: QUESTION }] }] });
  assert.ok(ok.usage.completion_tokens >= 1);
});
