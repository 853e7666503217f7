#!/usr/bin/python3
"""Independent float64 reference of Kimi K3's image path (numpy + Pillow only).

What it implements, per image: Pillow decode -> RGB(A) -> resize (Pillow's antialiased BICUBIC)
only when the image is over the patch budget -> alpha composited over an 8-px chessboard (after
the resize) -> zero padding to multiples of patch·merge -> (x/255 − mean)/std -> 14×14 patches
(row-major grid, each flattened channel-first (c, dy, dx)) -> MoonViT-V2 in float64 (patch
embedding as a matmul, bilinear-interpolated position table, N pre-norm blocks with 2-D RoPE,
final RMSNorm) -> 2×2 merge -> PatchMergerMLPV2 projector (proj.0, exact GELU, proj.2, RMSNorm).
Then the prompt: each `media_placeholder_token_id` in the ids expands to that image's n
positions whose embeddings are the projector's rows; the language model is kimi_reference.py's
forward, unchanged.

How it is independent: written from the description of K3's released image path (config keys,
tensor names, formulas), not from Strata's C++ code; it shares only the safetensors reader and
the text model with kimi_reference.py (itself independent of the C++). Every weight is widened
exactly from bf16 and everything after the uint8 pixels is computed in float64.

  /usr/bin/python3 tests/golden/vision_reference.py --model DIR --ids-file ids.json \
      --image A.png [--image B.png ...] [--out logits.npy] [--greedy N] [--rows-out rows.npz]

--out writes the logits of every expanded position as float32 .npy [T_expanded, vocab];
--greedy N prints N greedy continuation ids (argmax, no EOS stop) as a JSON array;
--rows-out saves each image's projector rows (.npz keys img0, img1, ...); --info prints, per
image, the original size, the size after the resize, the patch grid and the row count.

Choices where the notes leave room (one constant or function each):
  * chessboard: white (255) in the 8×8 square at (0, 0), gray (180) next to it;
  * compositing rounds to the nearest integer: round((fg·a + bg·(255 − a)) / 255) (no ties are
    possible: the numerator is an integer and 255 is odd);
  * RGBA images that need a resize go through Pillow's RGBA resize (premultiplied alpha);
  * bilinear interpolation of the position table is torch's F.interpolate(mode="bilinear",
    align_corners=False, antialias=False): src = (dst + 0.5)·in/out − 0.5, clamped at 0,
    neighbours clamped to the last row/column.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kimi_reference  # noqa: E402  (the independent text model and safetensors reader)

# ---------------------------------------------------------------------------------------------
# constants the notes fix (or leave to us; see the docstring)

VIT_RMS_NORM_EPS = 2.0 ** -23  # the ViT's RMSNorms pass no eps: float32 epsilon
VIT_ROPE_THETA = 10000.0
CHESSBOARD_SQUARE_PX = 8
CHESSBOARD_COLOR_AT_ORIGIN = 255  # white in the square at (0, 0) ...
CHESSBOARD_OTHER_COLOR = 180  # ... gray in its neighbours
RESIZE_FILTER = Image.BICUBIC  # Pillow's antialiased bicubic (a = -0.5), as the release
DEFAULT_PLACEHOLDER_ID = 163605


# ---------------------------------------------------------------------------------------------
# configuration

class VisionConfig:
    """`vision_config` of config.json plus preprocessor_config.json (release defaults)."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            raw = json.load(f)
        if "vision_config" not in raw:
            raise ValueError(f"{model_dir}/config.json has no vision_config")
        v = raw["vision_config"]
        self.placeholder = raw.get("media_placeholder_token_id", DEFAULT_PLACEHOLDER_ID)
        self.patch = v.get("patch_size", 14)
        self.D = v.get("vt_hidden_size", 1024)
        self.qkv = v.get("qkv_hidden_size", 1536)
        self.heads = v.get("vt_num_attention_heads", 12)
        self.hd = self.qkv // self.heads
        self.I = v.get("vt_intermediate_size", 4096)
        self.L = v.get("vt_num_hidden_layers", 27)
        self.pos_h = v.get("init_pos_emb_height", 64)
        self.pos_w = v.get("init_pos_emb_width", 64)
        self.merge = tuple(v.get("merge_kernel_size", [2, 2]))
        self.mm_hidden = v.get("mm_hidden_size", self.D)
        self.text_hidden = v.get("text_hidden_size", 7168)
        self.proj_eps = v.get("projector_ln_eps", 1e-5)
        if v.get("norm_type", "rmsnorm") != "rmsnorm":
            raise ValueError(f"vision_config.norm_type {v.get('norm_type')}: only rmsnorm is specified")
        for key in ("attn_bias", "linear_bias", "patch_embed_proj_bias"):
            if v.get(key, False):
                raise ValueError(f"vision_config.{key} true: K3's tower has no biases")
        for key, want in (("pos_emb_interpolation_mode", "bilinear"), ("activation_func", "gelu_pytorch_tanh"),
                          ("projector_hidden_act", "gelu"), ("merge_type", "sd2_tpool"),
                          ("mm_projector_type", "patchmergerv2")):
            if v.get(key, want) != want:
                raise ValueError(f"vision_config.{key} {v[key]!r}: only {want!r} is implemented")
        if self.qkv % self.heads or self.hd % 4:
            raise ValueError(f"qkv_hidden_size {self.qkv} / heads {self.heads}: head_dim must divide by 4")
        if self.mm_hidden != self.D:
            raise ValueError(f"mm_hidden_size {self.mm_hidden} != vt_hidden_size {self.D}")

        pre = {}
        path = os.path.join(model_dir, "preprocessor_config.json")
        if os.path.exists(path):
            with open(path) as f:
                pre = json.load(f)
            pre = pre.get("media_proc_cfg", pre)  # some releases nest the keys
        self.in_patch_limit = pre.get("in_patch_limit", 65536)
        self.side_limit = pre.get("patch_limit_on_one_side", 512)
        self.mean = np.array(pre.get("image_mean", [0.5, 0.5, 0.5]), np.float64)
        self.std = np.array(pre.get("image_std", [0.5, 0.5, 0.5]), np.float64)


# ---------------------------------------------------------------------------------------------
# preprocessing

def resized_size(width, height, cfg):
    """(W', H') after the budget: unchanged unless over in_patch_limit or the per-side limit."""
    p = cfg.patch
    max_side = cfg.side_limit * p
    s = min(1.0, math.sqrt(cfg.in_patch_limit / (max(1, width // p) * max(1, height // p))),
            max_side / width, max_side / height)
    if s >= 1.0:
        return width, height
    return (min(max_side, max(1, int(width * s))), min(max_side, max(1, int(height * s))))


def chessboard(width, height):
    """[H, W] uint8 background: 8-px squares, CHESSBOARD_COLOR_AT_ORIGIN at (0, 0)."""
    y, x = np.mgrid[0:height, 0:width]
    first = ((y // CHESSBOARD_SQUARE_PX) + (x // CHESSBOARD_SQUARE_PX)) % 2 == 0
    return np.where(first, CHESSBOARD_COLOR_AT_ORIGIN, CHESSBOARD_OTHER_COLOR).astype(np.int64)


def composite_over_chessboard(rgba):
    """[H, W, 4] uint8 -> [H, W, 3] uint8, rounding to the nearest integer."""
    a = rgba[..., 3:4].astype(np.int64)
    fg = rgba[..., :3].astype(np.int64)
    bg = chessboard(rgba.shape[1], rgba.shape[0])[..., None]
    return ((fg * a + bg * (255 - a) + 127) // 255).astype(np.uint8)


def decode(path):
    """The image as Pillow RGB or RGBA (alpha kept only where the file has transparency)."""
    im = Image.open(path)
    im.load()
    if im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in im.info:
        return im.convert("RGBA")
    return im.convert("RGB")


def preprocess(path, cfg):
    """-> (patches [h·w, 3·p·p] float64, (h, w) patch grid, original (W, H), resized (W, H))."""
    im = decode(path)
    orig = im.size
    new = resized_size(orig[0], orig[1], cfg)
    if new != orig:
        im = im.resize(new, RESIZE_FILTER)
    px = np.asarray(im, np.uint8)
    if px.shape[-1] == 4:
        px = composite_over_chessboard(px)
    H, W = px.shape[:2]
    p, (mh, mw) = cfg.patch, cfg.merge
    Hp = -(-H // (p * mh)) * p * mh
    Wp = -(-W // (p * mw)) * p * mw
    padded = np.zeros((Hp, Wp, 3), np.float64)  # pixel value 0, before normalisation
    padded[:H, :W] = px
    x = (padded / 255.0 - cfg.mean) / cfg.std
    h, w = Hp // p, Wp // p
    patches = x.reshape(h, p, w, p, 3).transpose(0, 2, 4, 1, 3).reshape(h * w, 3 * p * p)
    return patches, (h, w), orig, (W, H)


# ---------------------------------------------------------------------------------------------
# the tower

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def bilinear_axis(n_in, n_out):
    """(i0, i1, frac) per output index: torch bilinear, align_corners=False, no antialias."""
    dst = np.arange(n_out, dtype=np.float64)
    src = np.maximum((dst + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, src - i0


def interpolate_pos_table(table, h, w):
    """[H, W, D] -> [h, w, D]; identity when the sizes agree."""
    if table.shape[:2] == (h, w):
        return table
    r0, r1, fr = bilinear_axis(table.shape[0], h)
    c0, c1, fc = bilinear_axis(table.shape[1], w)
    rows = table[r0] * (1 - fr)[:, None, None] + table[r1] * fr[:, None, None]  # [h, W, D]
    return rows[:, c0] * (1 - fc)[None, :, None] + rows[:, c1] * fc[None, :, None]


def rope2d(x, h, w, hd):
    """x [n, heads, hd] over an (h, w) grid, row-major: pairs (4i, 4i+1) turn by column·f_i,
    pairs (4i+2, 4i+3) by row·f_i, f_i = theta^(−4i/hd)."""
    n = h * w
    row = np.repeat(np.arange(h, dtype=np.float64), w)
    col = np.tile(np.arange(w, dtype=np.float64), h)
    f = VIT_ROPE_THETA ** (-4.0 * np.arange(hd // 4) / hd)  # [hd/4]
    angle = np.empty((n, hd // 2))  # one angle per adjacent pair (2k, 2k+1)
    angle[:, 0::2] = col[:, None] * f  # pair 2i   = dims (4i, 4i+1)
    angle[:, 1::2] = row[:, None] * f  # pair 2i+1 = dims (4i+2, 4i+3)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


class VisionTower:
    def __init__(self, model_dir, tensors=None):
        self.cfg = VisionConfig(model_dir)
        self.t = tensors or kimi_reference.Tensors(model_dir)

    def w(self, name, shape):
        return self.t.get(name, shape)

    def encode(self, patches, grid):
        """patches [h·w, 3·p·p] -> projector rows [(h/2)·(w/2), text_hidden]."""
        c = self.cfg
        h, w = grid
        n, D, p = h * w, c.D, c.patch
        conv = self.w("vision_tower.patch_embed.proj.weight", (D, 3, p, p)).reshape(D, 3 * p * p)
        x = patches @ conv.T
        table = self.w("vision_tower.patch_embed.pos_emb.weight", (c.pos_h, c.pos_w, D))
        x = x + interpolate_pos_table(table, h, w).reshape(n, D)
        for l in range(c.L):
            b = f"vision_tower.encoder.blocks.{l}."
            y = rms_norm(x, self.w(b + "norm0.weight", (D,)), VIT_RMS_NORM_EPS)
            qkv = y @ self.w(b + "wqkv.weight", (3 * c.qkv, D)).T
            q = rope2d(qkv[:, :c.qkv].reshape(n, c.heads, c.hd), h, w, c.hd)
            k = rope2d(qkv[:, c.qkv:2 * c.qkv].reshape(n, c.heads, c.hd), h, w, c.hd)
            v = qkv[:, 2 * c.qkv:].reshape(n, c.heads, c.hd)
            s = np.einsum("thc,shc->hts", q, k) / math.sqrt(c.hd)  # non-causal, this image only
            s = s - s.max(-1, keepdims=True)
            prob = np.exp(s)
            prob /= prob.sum(-1, keepdims=True)
            o = np.einsum("hts,shc->thc", prob, v).reshape(n, c.qkv)
            x = x + o @ self.w(b + "wo.weight", (D, c.qkv)).T
            y = rms_norm(x, self.w(b + "norm1.weight", (D,)), VIT_RMS_NORM_EPS)
            y = gelu_tanh(y @ self.w(b + "mlp.fc0.weight", (c.I, D)).T)
            x = x + y @ self.w(b + "mlp.fc1.weight", (D, c.I)).T
        x = rms_norm(x, self.w("vision_tower.encoder.final_layernorm.weight", (D,)), VIT_RMS_NORM_EPS)
        return self.project(self.merge(x, h, w))

    def merge(self, x, h, w):
        """Row (i, j) = concat(x[2i,2j], x[2i,2j+1], x[2i+1,2j], x[2i+1,2j+1]), row-major."""
        mh, mw = self.cfg.merge
        D = x.shape[-1]
        g = x.reshape(h // mh, mh, w // mw, mw, D).transpose(0, 2, 1, 3, 4)
        return g.reshape((h // mh) * (w // mw), mh * mw * D)

    def project(self, m):
        c = self.cfg
        K = m.shape[-1]
        y = gelu_erf(m @ self.w("mm_projector.proj.0.weight", (K, K)).T)
        y = y @ self.w("mm_projector.proj.2.weight", (c.text_hidden, K)).T
        return rms_norm(y, self.w("mm_projector.post_norm.weight", (c.text_hidden,)), c.proj_eps)

    def image_rows(self, path):
        patches, grid, _, _ = preprocess(path, self.cfg)
        return self.encode(patches, grid)


# ---------------------------------------------------------------------------------------------
# into the language model

def expand_prompt(ids, image_rows, placeholder):
    """-> (expanded ids, {position: row}): the k-th placeholder becomes image k's n positions."""
    count = sum(1 for i in ids if i == placeholder)
    if count != len(image_rows):
        raise ValueError(f"{count} placeholders ({placeholder}) in the ids but {len(image_rows)} images")
    out, rows, k = [], {}, 0
    for i in ids:
        if i != placeholder:
            out.append(i)
            continue
        for r in image_rows[k]:
            rows[len(out)] = r
            out.append(placeholder)
        k += 1
    return out, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (with vision_config)")
    ap.add_argument("--ids-file", help="JSON array of prompt ids with one placeholder per image")
    ap.add_argument("--image", action="append", default=[], help="image file, in placeholder order")
    ap.add_argument("--out", help="write the logits [T_expanded, vocab] as float32 .npy here")
    ap.add_argument("--greedy", type=int, default=0, help="print N greedy continuation ids as JSON")
    ap.add_argument("--rows-out", help="save each image's projector rows to this .npz")
    ap.add_argument("--info", action="store_true", help="print per-image sizes and rows as JSON (stderr)")
    args = ap.parse_args()

    tower = VisionTower(args.model)
    rows, info = [], []
    for path in args.image:
        patches, grid, orig, resized = preprocess(path, tower.cfg)
        rows.append(tower.encode(patches, grid))
        info.append({"image": path, "size": list(orig), "resized": list(resized), "grid": list(grid),
                     "rows": int(rows[-1].shape[0])})
    if args.info:
        print(json.dumps(info), file=sys.stderr)
    if args.rows_out:
        np.savez(args.rows_out, **{f"img{k}": r for k, r in enumerate(rows)})
    if not args.ids_file:
        return
    model = kimi_reference.Model(args.model)
    if model.cfg.d != tower.cfg.text_hidden:
        sys.exit(f"text_hidden_size {tower.cfg.text_hidden} != the text model's hidden_size {model.cfg.d}")
    ids, embeds = expand_prompt(kimi_reference.load_ids(args.ids_file), rows, tower.cfg.placeholder)
    logits = model.forward(ids, embeds=embeds)
    if not np.all(np.isfinite(logits)):
        sys.exit("non-finite logits")
    if args.out:
        np.save(args.out, logits.astype(np.float32))
    if args.greedy > 0:
        print(json.dumps(kimi_reference.greedy(model, ids, logits, args.greedy, embeds=embeds)))


if __name__ == "__main__":
    main()
