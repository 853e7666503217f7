#!/usr/bin/env python3
"""Images on the CUDA backend (docs/vision.md §3), on Strata's CUDA emulator.

Usage: vision_cuda_emu_test.py STRATA STRATA_EMU MAKE_CHECKPOINT

A tiny K3 checkpoint with a vision tower at the head shapes the CUDA kernels take (and the demo
tokenizer) is served twice: by `strata` on the CPU and by `strata-emu --device cuda`, where the
tower runs on the host and its rows are copied into the device step after the embedding gather.
A chat without an image and with each of two different images must give the same prompt tokens
and the same greedy tokens on both backends (the emulated device computes in bf16: only the
logprobs differ a little), and the two images must answer differently.
"""
import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np
from PIL import Image


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


class Server:
    def __init__(self, command):
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.output = ""
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.time() + 240
        while time.time() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)
                fail(f"{command[0]} exited at start:\n{self.output[-2000:]}")
            m = re.search(r"on http://127\.0\.0\.1:(\d+) ", self.output)
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                return
            time.sleep(0.2)
        self.proc.kill()
        fail(f"{command[0]} did not start in 240 s:\n{self.output[-2000:]}")

    def _drain(self):
        for line in self.proc.stdout:
            self.output += line

    def chat(self, image_url):
        content = [{"type": "text", "text": "What is this?"}]
        if image_url:
            content.append({"type": "image_url", "image_url": {"url": image_url}})
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8,
                "temperature": 0, "return_token_ids": True}
        req = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                reply = json.load(r)
        except urllib.error.HTTPError as e:
            fail(f"{self.url}: {e.code} {e.read()[:300]}")
        return reply["usage"]["prompt_tokens"], reply["choices"][0]["token_ids"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def image_url(seed):
    pixels = np.random.default_rng(seed).integers(0, 255, (112, 84, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def main():
    strata, strata_emu, make_checkpoint = sys.argv[1:4]
    work = tempfile.mkdtemp(prefix="strata_vision_emu_")
    began = time.time()
    try:
        model = os.path.join(work, "model")
        shapes = ["vocab=8192", "kda_head_dim=128", "kv_lora=512", "qk_rope=64", "qk_nope=128",
                  "v_head=128", "hidden=256", "expert_intermediate=64"]
        subprocess.run([make_checkpoint, "--preset", "tiny", "--family", "k3", "--vision",
                        "--demo-tokenizer", "--seed", "5", "--out", model] +
                       [a for s in shapes for a in ("--set", s)], check=True,
                       stdout=subprocess.DEVNULL)
        common = ["serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
                  "--grpc-port", "0", "--kv-cache-memory", "256MiB", "--log-level", "warn"]
        cpu = Server([strata] + common)
        emu = Server([strata_emu] + common + ["--device", "cuda"])
        try:
            answers = {}
            for name, url in (("text", None), ("image 1", image_url(1)),
                              ("image 2", image_url(2))):
                on_cpu, on_emu = cpu.chat(url), emu.chat(url)
                if on_cpu != on_emu:
                    fail(f"{name}: CPU {on_cpu} but CUDA (emulated) {on_emu}")
                answers[name] = on_cpu
            if answers["image 1"][0] <= answers["text"][0]:
                fail(f"the image added no prompt tokens: {answers}")
            if answers["image 1"][1] == answers["image 2"][1]:
                fail(f"two different images gave the same answer: {answers}")
        finally:
            cpu.stop()
            emu.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"PASS ({time.time() - began:.1f} s): {answers}")


if __name__ == "__main__":
    main()
