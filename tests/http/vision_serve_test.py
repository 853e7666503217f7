#!/usr/bin/env python3
"""Images through a real `strata serve` (issue 47; docs/vision.md), end to end over HTTP.

One server running the embedded demo model (its tiny MoonViT tower: a 448x448 image is 16x16
merged patches, 256 rows) on a free loopback port. Images are made here with Pillow.

  rows      a chat with a 448x448 PNG data URL has usage.prompt_tokens exactly 256 + the media
            block's text tokens (from /tokenize) - 1 (the placeholder it replaces) more than the
            same chat without it; greedy answers differ with / without it and between two images
  repeat    the same image twice in one request counts both; the same request again is served
            from the prefix cache through the image's blocks with the same answer; another image
            of the same size gets no cached block from the image on
  formats   JPEG, lossless WebP and a GIF's first frame (the same pixels as a PNG: the same
            answer) are accepted and counted as the PNG is
  refused   invalid base64, not an image, a truncated PNG, a PNG header claiming 100000x100000,
            33 images, a remote URL: each a 400 with its code and the part (or limit) named; the
            server answers a normal request afterwards
  together  image + tools (tool_choice auto) and image + response_format json_schema
  apis      Responses input_image and Anthropic /v1/messages image blocks (and count_tokens)
            count the image rows as chat does

Environment (set by ctest, tests/http/CMakeLists.txt): STRATA_BIN, STRATA_CACHE_DIR.
Needs /usr/bin/python3 with Pillow.
"""
import base64
import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib

from PIL import Image

MODEL = "strata-demo"
SIDE = 448
ROWS = 256  # (448 / 14 patches)^2 / (2x2 merge) with the demo tower
BLOCK_TEXT = f"<|media_begin|>image {SIDE}x{SIDE}<|media_content|><|media_pad|><|media_end|>"
QUESTION = "Describe the picture."
PART = "messages[0].content[0].image_url.url"  # the image part in chat() bodies


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Server:
    """`strata serve` with the demo model on a port the server picks (--port 0)."""

    def __init__(self, extra_args=()):
        binary = os.environ.get("STRATA_BIN", "")
        if not os.path.exists(binary):
            fail(f"STRATA_BIN must name the strata binary (got '{binary}')")
        self.proc = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "0",
             "--kv-cache-memory", "128MiB", "--log-level", "warn", *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.output = {"stdout": "", "stderr": ""}  # drained, so the server never blocks
        for name in self.output:
            threading.Thread(target=self._drain, args=(name,), daemon=True).start()
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)
                fail(f"strata serve exited at start:\n{self.log()}")
            m = re.search(r"on http://127\.0\.0\.1:(\d+) ", self.output["stdout"])
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                try:
                    with urllib.request.urlopen(self.url + "/ready", timeout=2):
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        self.proc.kill()
        fail(f"strata serve did not become ready in 120 s:\n{self.log()}")

    def _drain(self, name):
        for line in getattr(self.proc, name):
            self.output[name] += line

    def log(self):
        return (self.output["stdout"] + self.output["stderr"])[-3000:]

    def post(self, path, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("strata serve did not stop within 30 s of SIGTERM")
        check(code == 0, f"strata serve exited with {code}:\n{self.log()}")


# ---- images ----------------------------------------------------------------------------------

def noise(seed, size=(SIDE, SIDE), palette=None):
    """An RGB image of seeded random 16x16-pixel tiles (the tower sees real structure)."""
    rng = random.Random(seed)
    colours = palette or [tuple(rng.randrange(256) for _ in range(3)) for _ in range(64)]
    image = Image.new("RGB", size)
    tile = 16
    for y in range(0, size[1], tile):
        for x in range(0, size[0], tile):
            image.paste(rng.choice(colours), (x, y, x + tile, y + tile))
    return image


def encode(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def data_url(data, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def png_header_claiming(width, height):
    """A PNG signature and an IHDR chunk (valid CRC) claiming width x height RGB, then IEND."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)  # far too little data for the claim
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


# ---- requests --------------------------------------------------------------------------------

def image_part(url):
    return {"type": "image_url", "image_url": {"url": url, "detail": "high"}}


def chat_body(urls, max_tokens=12, **fields):
    parts = [image_part(u) for u in urls] + [{"type": "text", "text": QUESTION}]
    return {"model": MODEL, "messages": [{"role": "user", "content": parts}],
            "max_tokens": max_tokens, "temperature": 0, **fields}


def chat(server, urls, **fields):
    status, r = server.post("/v1/chat/completions", chat_body(urls, **fields))
    check(status == 200, f"chat with {len(urls)} image(s) {fields}: {status} {r}")
    return r


def answer(r):
    message = r["choices"][0]["message"]
    return (message.get("reasoning_content") or "") + "|" + (message.get("content") or "")


def expect_400(server, body, code, param, message_part, what, path="/v1/chat/completions"):
    status, r = server.post(path, body)
    check(status == 400, f"{what}: expected 400, got {status} {r}")
    error = r["error"]
    check(error.get("code") == code, f"{what}: code {error.get('code')}, expected {code}: {r}")
    check(error.get("param") == param, f"{what}: param {error.get('param')}, expected {param}")
    check(re.search(message_part, error["message"]) is not None,
          f"{what}: message {error['message']!r} does not match {message_part!r}")


# ---- checks ----------------------------------------------------------------------------------

def test_rows(server, a_url, b_url):
    status, block = server.post("/tokenize", {"model": MODEL, "prompt": BLOCK_TEXT,
                                              "add_special_tokens": False})
    check(status == 200, f"/tokenize of the media block: {status} {block}")
    expected = ROWS + block["count"] - 1
    text = chat(server, [])
    with_a = chat(server, [a_url])
    with_b = chat(server, [b_url])
    delta = with_a["usage"]["prompt_tokens"] - text["usage"]["prompt_tokens"]
    print(f"rows: prompt_tokens {text['usage']['prompt_tokens']} -> "
          f"{with_a['usage']['prompt_tokens']} with a {SIDE}x{SIDE} PNG (+{delta}; block "
          f"{block['count']} tokens)")
    check(delta >= ROWS, f"the image adds {delta} prompt tokens, fewer than its {ROWS} rows")
    check(delta == expected, f"the image adds {delta} prompt tokens, expected {ROWS} rows + "
                             f"{block['count']} block tokens - 1 placeholder = {expected}")
    check(with_b["usage"]["prompt_tokens"] == with_a["usage"]["prompt_tokens"],
          "two images of the same size count differently")
    check(answer(with_a) != answer(text), f"the image does not change the answer: {answer(text)!r}")
    check(answer(with_a) != answer(with_b),
          f"two different images give the same answer: {answer(with_a)!r}")
    return text, with_a, expected


def test_repeat(server, a_url, c_url, text, with_a, per_image):
    twice = chat(server, [a_url, a_url])
    check(twice["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] + 2 * per_image,
          f"the same image twice counts {twice['usage']['prompt_tokens']} prompt tokens, "
          f"expected {text['usage']['prompt_tokens']} + 2 x {per_image}")
    check(answer(twice) != answer(with_a), "the image twice answers as the image once")

    # Where the image's rows are: the placeholder's index in the unexpanded prompt.
    status, tokens = server.post("/tokenize", {"model": MODEL,
                                               "messages": chat_body([a_url])["messages"]})
    check(status == 200, f"/tokenize of the image chat: {status} {tokens}")
    # /tokenize counts what the chat counts: the placeholder expanded to the image's rows.
    check(tokens["count"] == with_a["usage"]["prompt_tokens"],
          f"/tokenize of the image chat counts {tokens['count']}, the chat "
          f"{with_a['usage']['prompt_tokens']} prompt tokens")
    status, pad = server.post("/tokenize", {"model": MODEL, "prompt": "<|media_pad|>",
                                            "add_special_tokens": False})
    check(status == 200 and pad["count"] == 1, f"<|media_pad|> is not one token: {pad}")
    start = tokens["tokens"].index(pad["tokens"][0])
    block_size = server.get("/server_info")["config"]["block_size"]
    image_end_block = (start + ROWS) // block_size * block_size

    again = chat(server, [a_url])
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    print(f"repeat: rows at [{start}, {start + ROWS}), block {block_size}: the same image again "
          f"has {cached} of {again['usage']['prompt_tokens']} prompt tokens cached")
    check(cached >= image_end_block,
          f"the same image again has {cached} cached tokens, fewer than the {image_end_block} "
          f"through the image's last full block")
    check(answer(again) == answer(with_a),
          f"the cached repeat answers {answer(again)!r}, not {answer(with_a)!r}")
    other = chat(server, [c_url])
    cached = other["usage"]["prompt_tokens_details"]["cached_tokens"]
    print(f"repeat: another {SIDE}x{SIDE} image has {cached} cached tokens")
    check(cached <= start, f"another image of the same size has {cached} cached tokens: the "
                           f"cache hit reaches past the image's start ({start})")


def test_formats(server, png_tokens):
    # Few colours: a GIF's palette holds them exactly, so the first frame is the PNG's pixels.
    palette = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255), (0, 0, 0), (255, 255, 0)]
    first = noise(11, palette=palette)
    second = noise(12, palette=palette)
    reference = answer(chat(server, [data_url(encode(first, "PNG"))]))
    gif = io.BytesIO()
    first.save(gif, "GIF", save_all=True, append_images=[second], duration=100, loop=0)
    cases = [
        ("GIF (first frame)", data_url(gif.getvalue(), "image/gif"), True),
        ("WebP (lossless)", data_url(encode(first, "WEBP", lossless=True), "image/webp"), True),
        ("JPEG", data_url(encode(first, "JPEG", quality=90), "image/jpeg"), False),
    ]
    for name, url, same_pixels in cases:
        r = chat(server, [url])
        check(r["usage"]["prompt_tokens"] == png_tokens,
              f"{name}: {r['usage']['prompt_tokens']} prompt tokens, the PNG has {png_tokens}")
        if same_pixels:
            check(answer(r) == reference, f"{name}: answers {answer(r)!r}, the PNG of the same "
                                          f"pixels {reference!r}")
    second_answer = answer(chat(server, [data_url(encode(second, "PNG"))]))
    check(second_answer != reference, "the GIF's two frames give the same answer")


def test_refused(server, a_url):
    png = encode(noise(3), "PNG")
    bad = [
        ("invalid base64", "data:image/png;base64,iVBO!!!!", "invalid_image", "base64"),
        ("not an image", data_url(b"plain text, not pixels"), "invalid_image", "not an image"),
        ("truncated PNG", data_url(png[:len(png) // 2]), "invalid_image", "truncated"),
        ("PNG claiming 100000x100000", data_url(png_header_claiming(100000, 100000)),
         "invalid_image", "100000x100000.*limit"),
        ("remote URL", "https://example.com/cat.png", "unsupported_value", "data: URL"),
    ]
    for what, url, code, message in bad:
        expect_400(server, chat_body([url]), code, PART, message, what)
    expect_400(server, chat_body([a_url] * 33), "invalid_value", "messages", "33 images.*32",
               "33 images")
    # The second image of two is named as such.
    expect_400(server, chat_body([a_url, "data:image/png;base64,AAAA"]), "invalid_image",
               "messages[0].content[1].image_url.url", "not an image", "second image bad")
    # A non-string URL is refused by the parser.
    body = chat_body([])
    body["messages"][0]["content"].insert(0, {"type": "image_url", "image_url": {"url": 5}})
    expect_400(server, body, "invalid_type", PART, "string", "numeric url")
    r = chat(server, [], max_tokens=4)
    check(r["usage"]["completion_tokens"] >= 1, f"no answer after the refusals: {r}")
    r = chat(server, [a_url], max_tokens=4)
    check(r["usage"]["completion_tokens"] >= 1, f"no image answer after the refusals: {r}")


def test_together(server, a_url, per_image):
    tools = [{"type": "function", "function": {
        "name": "describe", "description": "Describe an image",
        "parameters": {"type": "object", "properties": {"colour": {"type": "string"}},
                       "required": ["colour"]}}}]
    plain = chat(server, [], tools=tools, tool_choice="auto")
    r = chat(server, [a_url], tools=tools, tool_choice="auto")
    check(r["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + per_image,
          f"image + tools: {r['usage']['prompt_tokens']} prompt tokens, expected "
          f"{plain['usage']['prompt_tokens']} + {per_image}")
    check(r["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), str(r))

    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}},
              "required": ["colour"], "additionalProperties": False}
    r = chat(server, [a_url], max_tokens=200, reasoning_effort="none",
             response_format={"type": "json_schema",
                              "json_schema": {"name": "c", "strict": True, "schema": schema}})
    content = r["choices"][0]["message"]["content"]
    check(r["choices"][0]["finish_reason"] == "stop", f"image + json_schema: {r}")
    try:
        value = json.loads(content)
    except ValueError:
        fail(f"image + json_schema: not JSON: {content!r}")
    check(set(value) == {"colour"} and value["colour"] in ("red", "green", "blue"),
          f"image + json_schema: {content!r} does not fit the schema")


def test_apis(server, a_url, a_png, per_image):
    with_image = [{"type": "input_image", "image_url": a_url},
                  {"type": "input_text", "text": QUESTION}]
    without = [{"type": "input_text", "text": QUESTION}]

    def responses(content):
        status, r = server.post("/v1/responses", {
            "model": MODEL, "input": [{"role": "user", "content": content}],
            "max_output_tokens": 4, "temperature": 0})
        check(status == 200, f"responses: {status} {r}")
        return r["usage"]["input_tokens"]

    delta = responses(with_image) - responses(without)
    print(f"apis: Responses input_image adds {delta} input tokens")
    check(delta == per_image, f"Responses input_image adds {delta} tokens, chat {per_image}")
    status, r = server.post("/v1/responses", {
        "model": MODEL, "max_output_tokens": 4,
        "input": [{"role": "user", "content": [{"type": "input_image",
                                                "image_url": "data:image/png;base64,AAAA"}]}]})
    check(status == 400 and r["error"]["code"] == "invalid_image", f"Responses bad image: {r}")

    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(a_png).decode()}}
    text_block = {"type": "text", "text": QUESTION}

    def messages(content):
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}],
                "max_tokens": 4, "temperature": 0}
        status, r = server.post("/v1/messages", body)
        check(status == 200, f"messages: {status} {r}")
        usage = r["usage"]
        del body["max_tokens"]
        status, counted = server.post("/v1/messages/count_tokens", body)
        check(status == 200, f"count_tokens: {status} {counted}")
        total = usage["input_tokens"] + usage["cache_read_input_tokens"]
        check(counted["input_tokens"] == total,
              f"count_tokens says {counted['input_tokens']}, the message used {total}")
        return total

    delta = messages([block, text_block]) - messages([text_block])
    print(f"apis: Anthropic image block adds {delta} input tokens")
    check(delta == per_image, f"an Anthropic image block adds {delta} tokens, chat {per_image}")
    bad = dict(block, source=dict(block["source"], data="AAAA"))
    status, r = server.post("/v1/messages", {"model": MODEL, "max_tokens": 4,
                                             "messages": [{"role": "user", "content": [bad]}]})
    check(status == 400 and r["error"]["type"] == "invalid_request_error" and
          "not an image" in r["error"]["message"], f"Anthropic bad image: {status} {r}")


def main():
    began = time.time()
    a_png = encode(noise(1), "PNG")
    a_url = data_url(a_png)
    b_url = data_url(encode(noise(2), "PNG"))
    c_url = data_url(encode(noise(4), "PNG"))
    server = Server()
    try:
        text, with_a, per_image = test_rows(server, a_url, b_url)
        test_repeat(server, a_url, c_url, text, with_a, per_image)
        test_formats(server, with_a["usage"]["prompt_tokens"])
        test_refused(server, a_url)
        test_together(server, a_url, per_image)
        test_apis(server, a_url, a_png, per_image)
    except BaseException:
        server.proc.kill()  # no stray server after a failure
        raise
    server.stop()
    print(f"PASS ({time.time() - began:.1f} s)")


if __name__ == "__main__":
    main()
