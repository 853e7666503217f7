#!/usr/bin/env python3
"""Image URLs beyond data: (docs/vision.md §1): vLLM's opt-ins on the demo model.

A server started with --allowed-media-domains 127.0.0.1, --allowed-local-media-path DIR and
--media-fetch-timeout 1 against a local HTTP server (a thread here):
  - http://127.0.0.1:P/a.png and file://DIR/a.png give exactly what the same image as a data: URL
    gives (prompt tokens and the greedy answer);
  - refused with a 400 naming the part, the server serving on after them: a host not in the list
    (localhost), a 404, a redirect (not followed), a response slower than the timeout, a file
    outside DIR (also through a symbolic link inside DIR), a missing file;
  - a server without the flags refuses http(s) and file:// URLs (vision_serve_test.py).
A second server, with one HTTP thread and a 10 s timeout, fetches off its I/O thread
(server/frontend/deferred_response.h): while the local server holds a fetch, the server answers
/health and /v1/models, and the held chat then answers as the data URL; a streamed chat whose
fetch fails is a 200 stream ending in an error event naming the reason, then [DONE].
"""
import http.client
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vision_serve_test import (PART, Server, answer, chat, check, data_url, encode,  # noqa: E402
                               expect_400, noise, chat_body)


HELD_ARRIVED = threading.Event()  # the server asked for /held.png
HELD_RELEASE = threading.Event()  # the test lets the answer go


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/held.png":
            HELD_ARRIVED.set()
            HELD_RELEASE.wait(timeout=20)
            self.path = "/a.png"
        if self.path == "/slow.png":
            time.sleep(3)  # past the server's 1 s fetch timeout
        if self.path == "/moved.png":
            self.send_response(302)
            self.send_header("Location", "/a.png")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args):
        pass


def off_the_io_thread(root, port, png):
    server = Server(["--allowed-media-domains", "127.0.0.1", "--media-fetch-timeout", "10",
                     "--http-threads", "1"])
    try:
        inline = chat(server, [data_url(png)])
        held = {}
        t = threading.Thread(target=lambda: held.update(
            r=chat(server, [f"http://127.0.0.1:{port}/held.png"])))
        t.start()
        check(HELD_ARRIVED.wait(timeout=30), "the server never fetched /held.png")
        try:
            # The only I/O thread is free while the fetch waits (it would time out if not).
            with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
                check(r.status == 200, f"/health during a fetch: {r.status}")
            models = server.get("/v1/models")
            check(len(models["data"]) >= 1, f"/v1/models during a fetch: {models}")
        finally:
            HELD_RELEASE.set()
        t.join(timeout=120)
        check("r" in held and answer(held["r"]) == answer(inline),
              f"the held chat: {held.get('r')} vs the data URL's answer")
        # Streamed, and the fetch fails: the head went out, the error is the stream's end.
        conn = http.client.HTTPConnection(server.url.split("//")[1], timeout=60)
        conn.request("POST", "/v1/chat/completions",
                     json.dumps(chat_body([f"http://127.0.0.1:{port}/missing.png"], stream=True)),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read().decode()
        check(r.status == 200 and "HTTP 404" in body and body.endswith("data: [DONE]\n\n"),
              f"a streamed chat whose fetch fails: {r.status} {body[-300:]!r}")
        conn.close()
    except BaseException:
        server.proc.kill()
        raise
    server.stop()


def main():
    began = time.time()
    root = tempfile.mkdtemp(prefix="strata_vision_urls_")
    outside = tempfile.mkdtemp(prefix="strata_vision_outside_")
    try:
        png = encode(noise(1), "PNG")
        for name in ("a.png", "slow.png"):
            with open(os.path.join(root, name), "wb") as f:
                f.write(png)
        with open(os.path.join(outside, "secret.png"), "wb") as f:
            f.write(png)
        os.symlink(os.path.join(outside, "secret.png"), os.path.join(root, "link.png"))

        handler = lambda *a, **k: Handler(*a, directory=root, **k)  # noqa: E731
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]

        server = Server(["--allowed-media-domains", "127.0.0.1", "--allowed-local-media-path",
                         root, "--media-fetch-timeout", "1"])
        try:
            inline = chat(server, [data_url(png)])
            for url in (f"http://127.0.0.1:{port}/a.png", f"file://{root}/a.png"):
                r = chat(server, [url])
                check(r["usage"]["prompt_tokens"] == inline["usage"]["prompt_tokens"],
                      f"{url}: {r['usage']} vs the data URL's {inline['usage']}")
                check(answer(r) == answer(inline), f"{url}: another answer than the data URL's")
            refused = [
                (f"http://localhost:{port}/a.png", "unsupported_value", "localhost.*allowed"),
                (f"http://127.0.0.1:{port}/missing.png", "invalid_image", "HTTP 404"),
                (f"http://127.0.0.1:{port}/moved.png", "invalid_image", "HTTP 302"),
                (f"http://127.0.0.1:{port}/slow.png", "invalid_image", "timed out.*1000 ms"),
                (f"file://{outside}/secret.png", "unsupported_value", "not under"),
                (f"file://{root}/link.png", "unsupported_value", "not under"),
                (f"file://{root}/missing.png", "unsupported_value", "cannot open"),
            ]
            for url, code, message in refused:
                expect_400(server, chat_body([url]), code, PART, message, url)
            r = chat(server, [f"file://{root}/a.png"], max_tokens=4)
            check(r["usage"]["completion_tokens"] >= 1, f"no answer after the refusals: {r}")
        except BaseException:
            server.proc.kill()
            raise
        server.stop()
        off_the_io_thread(root, port, png)
        httpd.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
    print(f"PASS ({time.time() - began:.1f} s)")


if __name__ == "__main__":
    main()
