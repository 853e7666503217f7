#!/usr/bin/env python3
"""strata_media against Pillow, the library Kimi K3's released preprocessing runs on.

Writes images with Pillow (PNG RGB / RGBA with varying alpha / palette with transparency /
gray, JPEG RGB / gray / CMYK, WebP lossless / lossy / alpha, GIF with and without a transparent
index), runs media_dump (tests/media/media_dump.cc) on each, and compares:

  decode   bit-exact for PNG, lossless WebP and GIF (against Image.convert("RGB"/"RGBA"));
           JPEG and lossy WebP within 2 levels (the same libraries decode both sides, but a
           different libjpeg-turbo / libwebp build may round its IDCT / filters differently);
  resize   images over a small in_patch_limit: the size from the release's formula (computed
           here independently) and the pixels against Image.resize(size, Image.BICUBIC,
           reducing_gap=None). Strata's resampler does Pillow's fixed-point arithmetic, so the
           bound is max <= 1 level, mean <= 0.01 (one level allows a weight whose last double bit
           differs to flip one rounding); the measured numbers are printed;
  patches  the whole preprocessing (chessboard under transparency after the resize, zero
           padding to 28, (x/255 - 0.5)/0.5, 14x14 patches row-major, channel-first) rebuilt
           here with numpy from Pillow's resize: within 1e-6 where the resize matched.

Exit 0 when all pass, 1 on a failure, 77 (skip) when Pillow or numpy is missing.
"""
import argparse
import json
import math
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as error:  # tools/setup.sh installs python3-pil and python3-numpy
    print(f"SKIP: {error}")
    sys.exit(77)

PATCH = 14
MERGE = 2
SIDE_LIMIT = 512
FAILURES = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        FAILURES.append(what)


def read_npy(path):
    return np.load(path)


def dump(media_dump, image_path, work, limit=None):
    out = os.path.join(work, os.path.basename(image_path) + ".out")
    os.makedirs(out, exist_ok=True)
    command = [media_dump, image_path, out] + ([str(limit)] if limit else [])
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()}")
    meta = json.loads(result.stdout)
    return (meta, read_npy(os.path.join(out, "decoded.npy")),
            read_npy(os.path.join(out, "resized.npy")), read_npy(os.path.join(out, "patches.npy")))


def released_size(width, height, in_patch_limit):
    """kimi's navit_resize_image: the size before padding."""
    s1 = math.sqrt(in_patch_limit / (max(1, width // PATCH) * max(1, height // PATCH)))
    s2 = SIDE_LIMIT * PATCH / width
    s3 = SIDE_LIMIT * PATCH / height
    scale = min(1.0, s1, s2, s3)
    side = SIDE_LIMIT * PATCH
    return min(max(1, int(width * scale)), side), min(max(1, int(height * scale)), side)


def chessboard(width, height):
    y, x = np.mgrid[0:height, 0:width]
    board = np.where(((x // 8) + (y // 8)) % 2 == 0, 255, 180).astype(np.uint8)
    return Image.fromarray(np.stack([board] * 3, axis=-1), "RGB")


def reference_patches(resized):
    """Pillow image (RGB or RGBA, already resized) → [N, 3·14·14] as the release lays it out."""
    if resized.mode == "RGBA":
        background = chessboard(*resized.size)
        background.paste(resized, (0, 0), resized)
        resized = background
    pixels = np.asarray(resized.convert("RGB"))
    height, width = pixels.shape[:2]
    factor = PATCH * MERGE
    padded = np.pad(pixels, ((0, -height % factor), (0, -width % factor), (0, 0)))
    x = ((padded / 255.0).astype(np.float32) - np.float32(0.5)) / np.float32(0.5)
    gh, gw = x.shape[0] // PATCH, x.shape[1] // PATCH
    x = x.reshape(gh, PATCH, gw, PATCH, 3).transpose(0, 2, 4, 1, 3)
    return x.reshape(gh * gw, 3 * PATCH * PATCH)


def pil_pixels(path, alpha):
    return np.asarray(Image.open(path).convert("RGBA" if alpha else "RGB")).astype(np.int32)


def rng_images(rng):
    noise = rng.integers(0, 256, (29, 37, 3), dtype=np.uint8)
    y, x = np.mgrid[0:120, 0:160]
    smooth = np.stack([x * 255 // 159, y * 255 // 119, (x + y) % 256], -1).astype(np.uint8)
    smooth = np.clip(smooth.astype(np.int32) + rng.integers(-6, 7, smooth.shape), 0, 255)
    rgba = rng.integers(0, 256, (31, 43, 4), dtype=np.uint8)
    rgba[::5, :, 3] = 0
    rgba[1::5, :, 3] = 255
    return noise, smooth.astype(np.uint8), rgba


def write_images(work, rng):
    """(name, path, expected has_alpha, lossless) of every decode case."""
    noise, smooth, rgba = rng_images(rng)
    cases = []

    def save(name, image, alpha, bit_exact, **options):
        path = os.path.join(work, name)
        image.save(path, **options)
        cases.append((name, path, alpha, bit_exact))

    save("rgb.png", Image.fromarray(noise, "RGB"), False, True)
    save("rgba.png", Image.fromarray(rgba, "RGBA"), True, True)
    save("gray.png", Image.fromarray(noise[:, :, 0], "L"), False, True)
    save("gray_alpha.png", Image.fromarray(rgba[:, :, 2:4].copy(), "LA"), True, True)
    palette = Image.fromarray((noise[:, :, 0] % 16).astype(np.uint8), "P")
    palette.putpalette(list(rng.integers(0, 256, 48, dtype=np.uint8)))
    save("palette_trns.png", palette, True, True, transparency=3)
    save("palette.png", palette, False, True)
    save("rgb.jpg", Image.fromarray(smooth, "RGB"), False, False, quality=90)
    save("progressive.jpg", Image.fromarray(smooth, "RGB"), False, False, quality=85,
         progressive=True)
    save("gray.jpg", Image.fromarray(smooth[:, :, 0], "L"), False, False, quality=90)
    save("cmyk.jpg", Image.fromarray(smooth, "RGB").convert("CMYK"), False, False, quality=95)
    save("lossless.webp", Image.fromarray(noise, "RGB"), False, True, lossless=True)
    opaque_alpha = rgba.copy()
    opaque_alpha[:, :, 3] = np.maximum(opaque_alpha[:, :, 3], 1)  # colour under alpha 0 is free
    save("lossless_alpha.webp", Image.fromarray(opaque_alpha, "RGBA"), True, True, lossless=True,
         exact=True)
    save("lossy.webp", Image.fromarray(smooth, "RGB"), False, False, quality=80)
    save("trns.gif", palette, True, True, transparency=3)
    save("opaque.gif", palette, False, True)
    return cases


def compare_decodes(args, cases):
    for name, path, alpha, lossless in cases:
        meta, decoded, _, _ = dump(args.media_dump, path, args.work)
        check(meta["has_alpha"] == alpha, f"{name}: has_alpha {meta['has_alpha']} (expected {alpha})")
        reference = pil_pixels(path, meta["has_alpha"])
        if decoded.shape != reference.shape:
            check(False, f"{name}: shape {decoded.shape} vs Pillow {reference.shape}")
            continue
        diff = np.abs(decoded.astype(np.int32) - reference)
        bound = 0 if lossless else 2
        check(diff.max() <= bound, f"{name}: decode vs Pillow max |diff| {diff.max()} levels, "
              f"mean {diff.mean():.4f} (bound {bound})")


def write_resize_cases(work, rng):
    """(name, path, in_patch_limit) of images over a small budget."""
    y, x = np.mgrid[0:200, 0:300]
    picture = np.stack([x * 255 // 299, y * 255 // 199, ((x // 9 + y // 7) % 2) * 255], -1)
    picture = np.clip(picture + rng.integers(-40, 41, picture.shape), 0, 255).astype(np.uint8)
    rgba = rng.integers(0, 256, (131, 257, 4), dtype=np.uint8)
    rgba[:, :, 3] = np.where(rng.random((131, 257)) < 0.3, 0,
                             np.where(rng.random((131, 257)) < 0.5, 255, rgba[:, :, 3]))
    wide = rng.integers(0, 256, (37, 1000, 3), dtype=np.uint8)
    tall = rng.integers(0, 256, (613, 45, 3), dtype=np.uint8)
    photo = np.clip(np.kron(rng.integers(0, 256, (60, 80, 3)), np.ones((15, 15, 1))) +
                    rng.integers(-30, 31, (900, 1200, 3)), 0, 255).astype(np.uint8)
    cases = []
    for name, image, limit in [("resize_rgb.png", Image.fromarray(picture, "RGB"), 64),
                               ("resize_rgba.png", Image.fromarray(rgba, "RGBA"), 40),
                               ("resize_wide.png", Image.fromarray(wide, "RGB"), 16),
                               ("resize_tall.png", Image.fromarray(tall, "RGB"), 30),
                               ("resize_noise_big.png", Image.fromarray(picture, "RGB"), 150),
                               ("resize_8x.png", Image.fromarray(photo, "RGB"), 80)]:
        path = os.path.join(work, name)
        image.save(path)
        cases.append((name, path, limit))
    palette = Image.fromarray((picture[:, :, 0] % 32).astype(np.uint8), "P")
    palette.putpalette(list(rng.integers(0, 256, 96, dtype=np.uint8)))
    path = os.path.join(work, "resize_trns.gif")
    palette.save(path, transparency=5)
    cases.append(("resize_trns.gif", path, 50))
    return cases


def compare_resizes(args, cases):
    for name, path, limit in cases:
        meta, _, resized, patches = dump(args.media_dump, path, args.work, limit)
        source = Image.open(path)
        size = released_size(*source.size, limit)
        check((meta["resized_width"], meta["resized_height"]) == size,
              f"{name}: {source.size} → {meta['resized_width']}x{meta['resized_height']} "
              f"(release formula {size[0]}x{size[1]}, in_patch_limit {limit})")
        check(size != source.size, f"{name}: over the budget (it is resized)")
        pil = source.convert("RGBA" if meta["has_alpha"] else "RGB")
        pil = pil.resize(size, Image.BICUBIC, reducing_gap=None)
        diff = np.abs(resized.astype(np.int32) - np.asarray(pil).astype(np.int32))
        check(diff.max() <= 1 and diff.mean() <= 0.01,
              f"{name}: resize vs Pillow BICUBIC max |diff| {diff.max()} levels, "
              f"mean {diff.mean():.5f} (bound max 1, mean 0.01)")
        reference = reference_patches(pil)
        check(reference.shape == patches.shape,
              f"{name}: patches {patches.shape} (numpy reference {reference.shape})")
        if reference.shape == patches.shape:
            error = np.abs(reference - patches).max()
            check(error <= 1e-6 if diff.max() == 0 else error <= 2.0 / 255 * 2,
                  f"{name}: patches vs numpy + Pillow reference max |diff| {error:.3g}")


def compare_unresized(args, work, rng):
    """Within the budget nothing is resized: patches straight from Pillow's decode."""
    _, _, rgba = rng_images(rng)
    path = os.path.join(work, "small_rgba.png")
    Image.fromarray(rgba, "RGBA").save(path)
    meta, decoded, resized, patches = dump(args.media_dump, path, args.work)
    check((meta["resized_width"], meta["resized_height"]) == (43, 31),
          "small_rgba.png: within the budget, not resized")
    check(np.array_equal(decoded, resized), "small_rgba.png: resized.npy is the decode")
    error = np.abs(reference_patches(Image.open(path).convert("RGBA")) - patches).max()
    check(error <= 1e-6, f"small_rgba.png: patches vs numpy + Pillow max |diff| {error:.3g}")
    check(meta["merged_rows"] == 4, f"small_rgba.png: {meta['merged_rows']} merged rows (43x31 → "
          "56x56 padded → 4x4 patches → 4)")


def compare_bad_file(args, work):
    good = os.path.join(work, "rgb.png")
    with open(good, "rb") as f:
        data = f.read()
    bad = os.path.join(work, "truncated.png")
    with open(bad, "wb") as f:
        f.write(data[: len(data) // 2])
    result = subprocess.run([args.media_dump, bad, work], capture_output=True, text=True)
    check(result.returncode == 1 and "truncated" in result.stderr,
          f"truncated.png: refused ({result.stderr.strip()})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--media-dump", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    print(f"Pillow {Image.__version__ if hasattr(Image, '__version__') else ''}".strip())
    rng = np.random.default_rng(47)
    compare_decodes(args, write_images(args.work, rng))
    compare_resizes(args, write_resize_cases(args.work, rng))
    compare_unresized(args, args.work, rng)
    compare_bad_file(args, args.work)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
