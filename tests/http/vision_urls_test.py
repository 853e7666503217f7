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
"""
import http.server
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vision_serve_test import (PART, Server, answer, chat, check, data_url, encode,  # noqa: E402
                               expect_400, noise, chat_body)


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
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
        httpd.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
    print(f"PASS ({time.time() - began:.1f} s)")


if __name__ == "__main__":
    main()
