#!/usr/bin/python3
"""A GGUF for llama.cpp whose routed experts are the MXFP4 codes and scales `strata quantize` wrote.

    /usr/bin/python3 bench/gguf_mxfp4_experts.py PEER_DIR BF16_CKPT MXFP4_CKPT OUT.gguf [--int8]

The peer's converter (PEER_DIR/hf2gguf.py) turns BF16_CKPT into a bf16 GGUF as usual, except that
every blk.N.ffn_{gate,up,down}_exps tensor is written as GGML's MXFP4 type from MXFP4_CKPT (the
output of `strata quantize --model BF16_CKPT`): the same 4-bit values and power-of-two scales, so
both engines run identical experts and a benchmark compares the engines, not the quantisers.

--int8: the other matrices Strata's `--quantization int8` quantises (every 2-D bf16 matrix but the
token embedding and the MoE routers; MLA's kv_b_proj, which the converter splits into 3-D k_b/v_b,
stays bf16 as in Strata) are written as GGML's Q8_0 holding Strata's codes and scales
(core/int8_quantize.h, recomputed here: the smallest bf16 scale with 127·s ≥ the group's largest
|w|, codes rounded to nearest even). Q8_0's block is {f16 d; int8 qs[32]}: the bf16 scale converts
exactly while it is an f16 normal (checked).

Layouts (both 32 values per block, value = E2M1(code) · 2^(scale − 127)):
  Strata / compressed-tensors: packed byte b of a row = element 2b (low nibble) | 2b+1 (high);
                                one E8M0 scale byte per 32 elements in a separate tensor.
  GGML block_mxfp4:            17 bytes {e; qs[16]}, qs[j] = element j (low) | element j+16
                                (high); kvalues_mxfp4 holds 2·E2M1 and the scale is 2^(e − 128).
A bench tool: needs numpy (Debian's python3-numpy) and the peer's scripts; Strata never uses it.
"""
import json
import os
import re
import struct
import sys

import numpy as np

GGML_MXFP4 = 39  # ggml.h: GGML_TYPE_MXFP4
GGML_Q8_0 = 8
GGML_BF16 = 30
BLOCK = 32


def safetensors_u8(directory):
    """name -> (file, offset, shape) of every tensor of a (possibly sharded) checkpoint."""
    index = os.path.join(directory, "model.safetensors.index.json")
    files = ([os.path.join(directory, "model.safetensors")] if not os.path.exists(index) else
             [os.path.join(directory, f) for f in sorted(set(json.load(open(index))["weight_map"].values()))])
    tensors = {}
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for name, v in header.items():
            tensors[name] = (path, 8 + n + v["data_offsets"][0], tuple(v["shape"]), v["dtype"])
    return tensors


def read_u8(tensors, name):
    path, offset, shape, dtype = tensors[name]
    assert dtype == "U8", f"{name}: {dtype}, expected U8"
    return np.fromfile(path, dtype=np.uint8, count=int(np.prod(shape)), offset=offset).reshape(shape)


def ggml_blocks(packed, scales):
    """[rows, cols/2] packed + [rows, cols/32] scales (Strata) -> [rows, cols/32 * 17] GGML blocks."""
    rows, half = packed.shape
    nblocks = half * 2 // BLOCK
    codes = np.empty((rows, half * 2), np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    codes = codes.reshape(rows, nblocks, BLOCK)
    out = np.empty((rows, nblocks, 1 + BLOCK // 2), np.uint8)
    out[:, :, 0] = scales  # E2M1 · 2^(e − 127) == (2·E2M1) · 2^(e − 128): the same byte
    out[:, :, 1:] = codes[:, :, :BLOCK // 2] | (codes[:, :, BLOCK // 2:] << 4)
    return out.reshape(rows, nblocks * (1 + BLOCK // 2))


def strata_int8(values):
    """[rows, cols] f32 -> (int8 codes [rows, cols], bf16-valued f32 scales [rows, cols/32])."""
    rows, cols = values.shape
    groups = values.reshape(rows, cols // BLOCK, BLOCK).astype(np.float32)
    amax = np.abs(groups).max(axis=2)
    bits = (amax / np.float32(127)).astype(np.float32).view(np.uint32)
    scale = (((bits >> 16) + ((bits & 0xFFFF) != 0)).astype(np.uint32) << 16).view(np.float32)
    divisor = np.where(scale > 0, scale, np.float32(1))[:, :, None]
    codes = np.clip(np.rint(groups / divisor), -127, 127).astype(np.int8)
    return codes.reshape(rows, cols), scale


def q8_0_blocks(values):
    """[rows, cols] f32 -> [rows, cols/32 * 34] GGML Q8_0 blocks with Strata's int8 codes."""
    codes, scale = strata_int8(values)
    d = scale.astype(np.float16)
    assert np.array_equal(d.astype(np.float32), scale), "a scale is not an exact f16 normal"
    rows, groups = scale.shape
    out = np.empty((rows, groups, 2 + BLOCK), np.uint8)
    out[:, :, :2] = d.view(np.uint8).reshape(rows, groups, 2)
    out[:, :, 2:] = codes.view(np.uint8).reshape(rows, groups, BLOCK)
    return out.reshape(rows, groups * (2 + BLOCK))


def int8_target(name, np_shape, gtype):
    """Whether Strata's --quantization int8 quantises this GGUF tensor."""
    return (gtype == GGML_BF16 and len(np_shape) == 2 and np_shape[-1] % BLOCK == 0
            and name not in ("token_embd.weight",) and not name.endswith("ffn_gate_inp.weight"))


class Blocks:
    """What GGUFWriter.write expects of a produced tensor: a shape to check and bytes to write."""
    dtype = np.uint16  # takes the writer's raw-bytes branch

    def __init__(self, shape, data):
        self.shape, self._data = shape, data

    def tobytes(self):
        return self._data.tobytes()


def main():
    int8 = sys.argv[5:] == ["--int8"]
    if len(sys.argv) != 5 + int8:
        sys.exit(__doc__)
    peer, bf16_dir, mxfp4_dir, out = sys.argv[1:5]
    sys.path.insert(0, peer)
    import hf2gguf

    quantized = safetensors_u8(mxfp4_dir)
    prefix = "language_model." if any(n.startswith("language_model.") for n in quantized) else ""
    part = {"gate": "w1", "up": "w3", "down": "w2"}
    add_tensor, nbytes = hf2gguf.GGUFWriter.add_tensor, hf2gguf.GGUFWriter.nbytes

    def add_expert_tensor(self, name, np_shape, gtype, producer):
        m = re.fullmatch(r"blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight", name)
        if m is None and int8 and int8_target(name, np_shape, gtype):
            def produce_q8():
                a = producer()  # the checkpoint's values as f32 (bf16 ones exactly), or bf16 bits
                values = (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a
                return Blocks(tuple(np_shape), q8_0_blocks(values.reshape(np_shape)))
            self.tensors.append((name, tuple(int(x) for x in np_shape), GGML_Q8_0, produce_q8))
            return None
        if m is None:
            return add_tensor(self, name, np_shape, gtype, producer)
        layer, wid = int(m[1]), part[m[2]]
        experts, rows, cols = (int(x) for x in np_shape)

        def produce():
            stacked = []
            for e in range(experts):
                base = f"{prefix}model.layers.{layer}.block_sparse_moe.experts.{e}.{wid}"
                stacked.append(ggml_blocks(read_u8(quantized, base + ".weight_packed"),
                                           read_u8(quantized, base + ".weight_scale")))
            return Blocks(tuple(np_shape), np.stack(stacked))
        self.tensors.append((name, tuple(np_shape), GGML_MXFP4, produce))

    def mxfp4_nbytes(shape, gtype):
        if gtype == GGML_MXFP4:
            return int(np.prod(shape[:-1])) * shape[-1] // BLOCK * (1 + BLOCK // 2)
        if gtype == GGML_Q8_0:
            return int(np.prod(shape[:-1])) * shape[-1] // BLOCK * (2 + BLOCK)
        return nbytes(shape, gtype)

    hf2gguf.GGUFWriter.add_tensor = add_expert_tensor
    hf2gguf.GGUFWriter.nbytes = staticmethod(mxfp4_nbytes)
    hf2gguf.convert(bf16_dir, out, "bf16", quiet=True)
    print(f"wrote {out}: routed experts as MXFP4 from {mxfp4_dir}"
          + (", the other matrices as Q8_0 with Strata's int8 codes" if int8 else ""))


if __name__ == "__main__":
    main()
