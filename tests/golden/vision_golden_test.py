#!/usr/bin/python3
"""Golden check of K3's image path: `strata` against the independent float64 reference.

A tiny K3 checkpoint with a vision tower (strata-make-checkpoint --vision), PNG images made here
with Pillow, and token-id prompts in which each `media_placeholder_token_id` stands for the next
--image. The reference is tests/golden/vision_reference.py (numpy + Pillow, float64).

  two_images  text, image A (60x33 RGB), text, image B (29x57 RGBA, alpha 0..255), text:
              `strata logits` within 2e-3 (max abs) of the reference over every expanded position
  same_twice  image A twice in one prompt, prefilled in chunks of 5 (image spans cut by chunk
              boundaries): within 2e-3
  resized     image C, over the preprocessor's patch budget, so both sides resize it (Pillow's
              antialiased BICUBIC here): the same number of positions and logits within
              RESIZED_ATOL. Not looser: on the tiny random model one pixel one level off moves
              the logits by ~6 (routing flips), so a tolerance cannot absorb resampler
              differences; this checks that the resize reproduces Pillow's pixels
  palette     a palette PNG with per-entry transparency (tRNS): within 2e-3
  matters     image A' (same size as A, other pixels) instead of A: the positions before the image
              are unchanged (within UNCHANGED_ATOL: other batch shapes), those after it change
  mismatch    two placeholders with one --image, and with three: a nonzero exit and a message
              naming the images
  generate    `strata generate --prompt-ids 1,2,<placeholder>,3 --image A --max-tokens 8
              --ignore-eos` = the reference's greedy continuation

usage: vision_golden_test.py --strata BIN --make-checkpoint BIN --work DIR [--model DIR]
(--model: use that checkpoint instead of making one.)
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kimi_reference  # noqa: E402
import vision_reference  # noqa: E402

ATOL = 2e-3
RESIZED_ATOL = 2e-3
UNCHANGED_ATOL = 1e-4
GREEDY_TOKENS = 8
CHECKPOINT_SEED = 31
# The resized image's patch count before the resize, as a multiple of in_patch_limit; above
# this many patches of budget the resize case uses the per-side limit instead (a quick test).
RESIZE_OVER_BUDGET = 2.2
MAX_QUICK_PATCH_LIMIT = 4096

failures = []


def fail(message):
    print("FAIL " + message, flush=True)
    failures.append(message)


def run(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        print("command failed (exit %d): %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout, r.stderr))
        sys.exit(1)
    return r


def smooth_image(width, height, seed, channels):
    """Gradients and low-frequency waves with mild noise: image-like, so that resamplers agree."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    planes = []
    for _ in range(channels):
        fx, fy, ph = r.uniform(0.5, 3) / width, r.uniform(0.5, 3) / height, r.uniform(0, 6.3)
        v = 128 + 90 * np.sin(2 * np.pi * (fx * x + fy * y) + ph) + r.normal(0, 6, x.shape)
        planes.append(v)
    return np.clip(np.rint(np.stack(planes, -1)), 0, 255).astype(np.uint8)


def make_images(work, cfg):
    a = os.path.join(work, "a_60x33.png")
    Image.fromarray(smooth_image(60, 33, 1, 3), "RGB").save(a)
    a2 = os.path.join(work, "a2_60x33.png")
    Image.fromarray(smooth_image(60, 33, 2, 3), "RGB").save(a2)
    b = os.path.join(work, "b_29x57_rgba.png")
    rgba = smooth_image(29, 57, 3, 4)
    rgba[..., 3] = np.linspace(0, 255, 29 * 57).round().astype(np.uint8).reshape(57, 29)  # 0..255
    Image.fromarray(rgba, "RGBA").save(b)
    p = cfg.patch
    if cfg.in_patch_limit <= MAX_QUICK_PATCH_LIMIT:  # over in_patch_limit, 4:3
        side = int(np.ceil(np.sqrt(RESIZE_OVER_BUDGET * cfg.in_patch_limit / 12)))
        size = (4 * side * p + 5, 3 * side * p + 3)
    else:  # wider than patch_limit_on_one_side patches
        size = (cfg.side_limit * p + 33, 2 * p + 1)
    c = os.path.join(work, "c_%dx%d.png" % size)
    Image.fromarray(smooth_image(size[0], size[1], 4, 3), "RGB").save(c)
    if vision_reference.resized_size(size[0], size[1], cfg) == size:
        raise SystemExit(f"internal: {size} is not over the budget")
    d = os.path.join(work, "d_31x18_palette.png")
    pal = Image.fromarray((smooth_image(31, 18, 5, 1)[..., 0] // 16).astype(np.uint8), "P")
    pal.putpalette([v for k in range(16) for v in (16 * k, 255 - 16 * k, (97 * k) % 256)])
    pal.save(d, transparency=bytes(17 * k for k in range(16)))  # entry k: alpha 17·k
    return a, a2, b, c, d


class Reference:
    def __init__(self, model_dir):
        self.model = kimi_reference.Model(model_dir)
        self.tower = vision_reference.VisionTower(model_dir, self.model.t)
        self.rows = {}

    def image_rows(self, path):
        if path not in self.rows:
            self.rows[path] = self.tower.image_rows(path)
        return self.rows[path]

    def expand(self, ids, images):
        return vision_reference.expand_prompt(ids, [self.image_rows(p) for p in images],
                                              self.tower.cfg.placeholder)

    def logits(self, ids, images):
        expanded, embeds = self.expand(ids, images)
        return self.model.forward(expanded, embeds=embeds)

    def greedy(self, ids, images, n):
        seq, embeds = self.expand(ids, images)
        out = []
        for _ in range(n):
            nxt = int(np.argmax(self.model.forward(seq, embeds=embeds)[-1]))
            out.append(nxt)
            seq = seq + [nxt]
        return out


def strata_logits(args, model, work, name, ids, images, extra=()):
    ids_path = os.path.join(work, name + "_ids.json")
    with open(ids_path, "w") as f:
        json.dump(ids, f)
    out = os.path.join(work, name + "_strata.npy")
    cmd = [args.strata, "logits", "--model", model, "--ids-file", ids_path, "--out", out, "--log-level", "warn"]
    for p in images:
        cmd += ["--image", p]
    r = run(cmd + list(extra), check=False)
    return r, out


def compare(work, name, strata_npy, ref, atol):
    ref_path = os.path.join(work, name + "_ref.npy")
    np.save(ref_path, ref.astype(np.float32))
    r = run([sys.executable, os.path.join(HERE, "compare_npy.py"), strata_npy, ref_path, "--atol", str(atol)],
            check=False)
    print("  " + r.stdout.strip().replace("\n", "\n  "))
    if r.returncode != 0:
        fail(f"{name}: logits differ from the reference (atol {atol:g})")
    else:
        print(f"ok   {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--make-checkpoint", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", help="an existing checkpoint with a vision tower (default: make one)")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)

    for sub in ("logits", "generate"):
        if "--image" not in run([args.strata, sub, "--help"]).stdout:
            print(f"FAIL `strata {sub}` has no --image flag (the CLI contract of issue 47)")
            return 1
    model = args.model
    if not model:
        if "--vision" not in run([args.make_checkpoint, "--help"]).stdout:
            print("FAIL strata-make-checkpoint has no --vision flag: cannot make a checkpoint with a vision tower")
            return 1
        model = os.path.join(args.work, "k3_vision")
        run([args.make_checkpoint, "--preset", "tiny", "--family", "k3", "--vision", "--seed",
             str(CHECKPOINT_SEED), "--out", model])

    ref = Reference(model)
    cfg = ref.tower.cfg
    ph, vocab = cfg.placeholder, ref.model.cfg.vocab
    a, a2, b, c, d = make_images(args.work, cfg)
    for path in (a, b, c, d):
        _, grid, orig, resized = vision_reference.preprocess(path, cfg)
        print(f"image {os.path.basename(path)}: {orig[0]}x{orig[1]} -> {resized[0]}x{resized[1]}, "
              f"patch grid {grid[0]}x{grid[1]}, {ref.image_rows(path).shape[0]} rows")
    rnd = random.Random(5)

    def text(n):
        return [i for i in (rnd.randrange(vocab) for _ in range(3 * n)) if i != ph][:n]

    # two_images: two different images in one prompt
    ids2 = text(6) + [ph] + text(5) + [ph] + text(7)
    r, out = strata_logits(args, model, args.work, "two_images", ids2, [a, b])
    if r.returncode != 0:
        fail(f"two_images: strata logits exit {r.returncode}: {r.stderr.strip()}")
    else:
        compare(args.work, "two_images", out, ref.logits(ids2, [a, b]), ATOL)

    # same_twice: one image twice, chunked prefill cutting the image spans
    ids_twice = text(3) + [ph] + text(4) + [ph] + text(3)
    r, out = strata_logits(args, model, args.work, "same_twice", ids_twice, [a, a], ["--prefill-chunk", "5"])
    if r.returncode != 0:
        fail(f"same_twice: strata logits exit {r.returncode}: {r.stderr.strip()}")
    else:
        compare(args.work, "same_twice", out, ref.logits(ids_twice, [a, a]), ATOL)

    # resized: over the budget (looser tolerance: resamplers may differ by a level)
    ids_c = text(4) + [ph] + text(4)
    r, out = strata_logits(args, model, args.work, "resized", ids_c, [c])
    if r.returncode != 0:
        fail(f"resized: strata logits exit {r.returncode}: {r.stderr.strip()}")
    else:
        compare(args.work, "resized", out, ref.logits(ids_c, [c]), RESIZED_ATOL)

    # palette: palette transparency composited like alpha
    ids_d = text(2) + [ph] + text(3)
    r, out = strata_logits(args, model, args.work, "palette", ids_d, [d])
    if r.returncode != 0:
        fail(f"palette: strata logits exit {r.returncode}: {r.stderr.strip()}")
    else:
        compare(args.work, "palette", out, ref.logits(ids_d, [d]), ATOL)

    # matters: another image of the same size changes the positions after it, not those before
    r, out_other = strata_logits(args, model, args.work, "matters", ids2, [a2, b])
    first = ids2.index(ph)
    base = os.path.join(args.work, "two_images_strata.npy")
    if r.returncode != 0 or not os.path.exists(base):
        fail(f"matters: strata logits exit {r.returncode}: {r.stderr.strip()}")
    else:
        x, y = np.load(base), np.load(out_other)
        n_a = ref.image_rows(a).shape[0]
        before = float(np.abs(x[:first] - y[:first]).max())
        after = float(np.abs(x[first + n_a:] - y[first + n_a:]).max())
        print(f"  another image: max change before it {before:.3g}, after it {after:.3g}")
        if before > UNCHANGED_ATOL:
            fail(f"matters: positions before the image changed by {before:.3g}")
        elif after < 100 * ATOL:
            fail(f"matters: positions after the image changed only by {after:.3g}: the image is ignored")
        else:
            print("ok   matters")

    # mismatch: two placeholders, one image (and three)
    for images in ([a], [a, b, a]):
        r, _ = strata_logits(args, model, args.work, "mismatch", ids2, images)
        message = (r.stdout + r.stderr).strip()
        if r.returncode == 0:
            fail(f"mismatch: two placeholders with {len(images)} --image exited 0")
        elif "image" not in message.lower():
            fail(f"mismatch: exit {r.returncode} without a message about the images: {message!r}")
        else:
            print(f"ok   mismatch: exit {r.returncode}: {message.splitlines()[0]}")

    # generate: greedy continuation with an image
    prompt = [1, 2, ph, 3]
    r = run([args.strata, "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt)), "--image", a,
             "--max-tokens", str(GREEDY_TOKENS), "--ignore-eos", "--log-level", "warn"], check=False)
    want = ref.greedy(prompt, [a], GREEDY_TOKENS)
    if r.returncode != 0:
        fail(f"generate: exit {r.returncode}: {r.stderr.strip()}")
    else:
        try:
            got = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            got = r.stdout.strip()
        if got != want:
            fail(f"generate: strata {got} reference {want}")
        else:
            print(f"ok   generate: {got}")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all vision golden checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
