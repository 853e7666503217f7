#!/usr/bin/env python3
"""The vision tower off the HTTP I/O threads (docs/vision.md, "The encoder thread").

A tiny K3 checkpoint with a heavier tower than the demo's (6 layers of 256, up to 4,096 patches:
an 896x896 image takes about a second to encode on one core) served with --http-threads 1:

  one thread  /server_info, /health and a text chat are answered while an image is being
              encoded (encoder_running_images 1 before and after them; the tower ran on the
              I/O thread: nothing was answered until it was done)
  queue       a second image request waits behind the first (/server_info vision.
              encoder_queue_images 1); its client leaves, and its image is never encoded
              (images_encoded counts the first only)
  grpc cancel the same through gRPC: a call whose image waits is cancelled by its client, and
              the image is never encoded
  cached      the first image again is answered from the encoder cache, with the same answer
  streamed    a streamed chat and a streamed Responses request with a new image each: the
              response starts, the tokens follow the encode, the stream ends properly
  metrics     /metrics' encoder series equal /server_info's counts

Usage: vision_encoder_thread_test.py (environment: STRATA_BIN, STRATA_MAKE_CHECKPOINT, PYTHONPATH
with clients/python and the generated strata.v1 stubs)
Needs /usr/bin/python3 with Pillow and python3-grpcio.
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_serve_test as v  # noqa: E402  (Server, images, checks)

SIDE = 896  # 64 x 64 patches of 14 pixels: the tower's 4,096-patch limit, 1,024 rows
TOWER = ["vocab=8192", "vision_hidden=256", "vision_qkv=256", "vision_heads=4",
         "vision_layers=6", "vision_intermediate=512", "vision_in_patch_limit=4096"]


def image_url(seed):
    return v.data_url(v.encode(v.noise(seed, (SIDE, SIDE)), "PNG"))


def body(url, **fields):
    content = [{"type": "text", "text": "What is this?"}]
    if url:
        content.insert(0, v.image_part(url))
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 4,
            "temperature": 0, **fields}


def vision_info(server):
    return server.get("/server_info")["vision"]


def idle_encoder(server):
    """/server_info's vision block once nothing waits for or runs in the tower (an image still
    encoding would not be counted yet), at most 20 s later."""
    deadline = time.time() + 20
    while True:
        info = vision_info(server)
        if info["encoder_queue_images"] == 0 and info["encoder_running_images"] == 0:
            return info
        v.check(time.time() < deadline, f"the encoder is still busy after 20 s: {info}")
        time.sleep(0.05)


def timed_post(server, path, payload, out, key):
    status, reply = server.post(path, payload)
    out[key] = (time.time(), status, reply)


def test_one_thread(server, url):
    done = {}
    image = threading.Thread(target=timed_post,
                             args=(server, "/v1/chat/completions", body(url), done, "image"))
    image.start()
    # /server_info answers while the image is being encoded (the tower ran on the I/O thread:
    # nothing was answered until it was done) ...
    while vision_info(server)["encoder_running_images"] == 0:
        v.check(image.is_alive(), "/server_info never answered while the image was encoded")
        time.sleep(0.02)
    # ... and so do /health and a whole text chat.
    with urllib.request.urlopen(server.url + "/health", timeout=30) as r:
        v.check(r.status == 200, f"/health: {r.status}")
    status, text = server.post("/v1/chat/completions", body(None))
    v.check(status == 200, f"the text chat: {status} {text}")
    v.check(vision_info(server)["encoder_running_images"] == 1,
            "the image was encoded before /health and a text chat were answered")
    image.join()
    _, status, with_image = done["image"]
    v.check(status == 200, f"the image chat: {status} {with_image}")
    rows = with_image["usage"]["prompt_tokens"] - text["usage"]["prompt_tokens"]
    v.check(rows >= (SIDE // 28) ** 2, f"the image added {rows} prompt tokens")
    print(f"one thread: /health and a text chat answered while the image was encoded "
          f"(+{rows} prompt tokens)")
    return with_image


def test_queue(server):
    before = vision_info(server)["images_encoded"]
    done = {}
    first = threading.Thread(target=timed_post, args=(
        server, "/v1/chat/completions", body(image_url(11)), done, "first"))
    first.start()
    time.sleep(0.3)
    leaving = http.client.HTTPConnection(server.url.split("//")[1], timeout=30)
    leaving.request("POST", "/v1/chat/completions", json.dumps(body(image_url(12))),
                    {"Content-Type": "application/json"})
    waiting = 0
    while first.is_alive() and waiting == 0:
        waiting = vision_info(server).get("encoder_queue_images", 0)
        time.sleep(0.05)
    v.check(waiting == 1, f"the second image was never seen waiting (encoder_queue_images "
                          f"{waiting})")
    leaving.close()  # the client goes away while its image waits
    first.join()
    v.check(done["first"][1] == 200, f"the first image chat: {done['first'][1]}")
    info = idle_encoder(server)
    v.check(info["images_encoded"] == before + 1,
            f"images_encoded {before} -> {info['images_encoded']}: the image of the request "
            f"whose client left was encoded anyway")
    v.check(info["encoder_queue_images"] == 0, f"still waiting: {info}")
    print(f"queue: one image waited, its client left, images_encoded +1; {info}")


def test_grpc_cancel(server):
    """A gRPC generation whose new image waits behind an HTTP request's; its client cancels the
    call while the image waits: the image is never encoded, and the queue empties."""
    try:
        from strata_client import Client  # python3-grpcio and the generated stubs (PYTHONPATH)
    except ImportError as e:
        v.fail(f"the gRPC part needs python3-grpcio and the strata.v1 stubs on PYTHONPATH: {e}")
    m = re.search(r"gRPC API \(strata\.v1\) on 127\.0\.0\.1:(\d+)", server.output["stdout"])
    v.check(m is not None, "no gRPC port in the server's output")
    info = vision_info(server)
    before, pad = info["images_encoded"], info["media_placeholder_token_id"]
    done = {}
    first = threading.Thread(target=timed_post, args=(
        server, "/v1/chat/completions", body(image_url(21)), done, "first"))
    first.start()
    time.sleep(0.3)
    with Client(f"127.0.0.1:{m.group(1)}") as client:
        call = client.stream(prompt_ids=[5, pad, 6], max_tokens=4,
                             images=[v.encode(v.noise(22, (SIDE, SIDE)), "PNG")])
        waiting = 0
        while first.is_alive() and waiting == 0:
            waiting = vision_info(server).get("encoder_queue_images", 0)
            time.sleep(0.05)
        v.check(waiting == 1, f"the gRPC image was never seen waiting ({waiting})")
        call.cancel()  # the client goes away while its image waits
    first.join()
    v.check(done["first"][1] == 200, f"the HTTP image chat: {done['first'][1]}")
    info = idle_encoder(server)
    v.check(info["images_encoded"] == before + 1 and info["encoder_queue_images"] == 0,
            f"images_encoded {before} -> {info['images_encoded']}, queue "
            f"{info['encoder_queue_images']}: the cancelled gRPC call's image was encoded anyway")
    print(f"grpc cancel: the cancelled call's image left the queue unencoded; {info}")


def test_cached(server, url, first_reply):
    before = vision_info(server)
    status, again = server.post("/v1/chat/completions", body(url))
    v.check(status == 200, f"the same image again: {status} {again}")
    after = vision_info(server)
    v.check(after["images_encoded"] == before["images_encoded"] and
            after["encoder_cache_hits"] == before["encoder_cache_hits"] + 1,
            f"the same image again: {before} -> {after}")
    v.check(v.answer(again) == v.answer(first_reply),
            f"answers differ: {v.answer(again)!r} vs {v.answer(first_reply)!r}")
    print("cached: the same image again from the encoder cache, the same answer")


def stream_events(server, path, payload):
    req = urllib.request.Request(server.url + path, json.dumps(payload).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        v.check(r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream"),
                f"{path} stream: {r.status} {r.headers['Content-Type']}")
        return r.read().decode()


def test_streamed(server):
    chat = stream_events(server, "/v1/chat/completions", body(image_url(21), stream=True))
    data = [line[6:] for line in chat.splitlines() if line.startswith("data: ")]
    v.check(data and data[-1] == "[DONE]", f"the chat stream did not end with [DONE]: {chat[-300:]}")
    chunks = [json.loads(d) for d in data[:-1]]
    v.check(any(c["choices"] and c["choices"][0]["delta"].get("role") == "assistant"
                for c in chunks), f"no role chunk: {chat[:300]}")
    responses = stream_events(server, "/v1/responses", {
        "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": image_url(22)},
            {"type": "input_text", "text": "What is this?"}]}],
        "max_output_tokens": 4, "temperature": 0, "stream": True})
    # Four tokens: the response ends incomplete (max_output_tokens), which is its last event.
    v.check("event: response.created" in responses and "event: response.incomplete" in responses,
            f"the Responses stream lacks its first or last event: {responses[:300]} ... "
            f"{responses[-300:]}")
    print(f"streamed: a chat ({len(chunks)} chunks) and a Responses stream with new images")


def test_metrics(server):
    """/metrics follows the encoder's counts (server/vision_metrics.h)."""
    info = vision_info(server)
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("strata:") and "{" not in line.split(" ")[0]:
            name, value = line.split(" ")[:2]
            values[name] = float(value)
    expected = {"strata:images_encoded_total": info["images_encoded"],
                "strata:encoder_cache_hits_total": info["encoder_cache_hits"],
                "strata:encoder_queue_images": 0, "strata:encoder_running_images": 0,
                "strata:encoder_cache_bytes": info["encoder_cache_bytes"]}
    for name, want in expected.items():
        v.check(values.get(name) == want, f"/metrics {name} {values.get(name)}, expected {want}")
    mean = values["strata:image_encode_seconds_total"] / info["images_encoded"]
    v.check(0 < mean < 120, f"mean encode time {mean} s")
    print(f"metrics: {info['images_encoded']} images encoded, {mean:.2f} s each on average")


def main():
    make_checkpoint = os.environ.get("STRATA_MAKE_CHECKPOINT", "")
    if not os.path.exists(make_checkpoint):
        v.fail(f"STRATA_MAKE_CHECKPOINT must name strata-make-checkpoint (got '{make_checkpoint}')")
    work = tempfile.mkdtemp(prefix="strata_vision_encoder_")
    began = time.time()
    try:
        model = os.path.join(work, "model")
        subprocess.run([make_checkpoint, "--preset", "tiny", "--family", "k3", "--vision",
                        "--demo-tokenizer", "--seed", "3", "--out", model] +
                       [a for s in TOWER for a in ("--set", s)], check=True,
                       stdout=subprocess.DEVNULL)
        server = v.Server(["--model", model, "--http-threads", "1"])
        try:
            url = image_url(1)
            first = test_one_thread(server, url)
            test_queue(server)
            test_grpc_cancel(server)
            test_cached(server, url, first)
            test_streamed(server)
            test_metrics(server)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"PASS ({time.time() - began:.1f} s)")


if __name__ == "__main__":
    main()
