#!/usr/bin/python3
"""Independent float64 reference of the Kimi K3 / Kimi-Linear language model (numpy only).

Written from the design documents alone (docs/model.md §1-§6 and §9.1, docs/checkpoint.md §1-§6), not from
Strata's C++ code: it is the oracle the engine's logits are compared with.

  /usr/bin/python3 tests/golden/kimi_reference.py --model DIR --ids-file ids.json \
      --out logits.npy [--greedy N] [--stats]

Reads config.json and the safetensors (single file or sharded with an index), runs the full
forward over the prompt and writes the logits of every position as float32 .npy [T, vocab].
--greedy N prints the N greedy continuation ids (argmax, no EOS stop) as a JSON array.
--stats prints activation statistics (to check that random test weights are well scaled).

Everything is computed in float64 from the stored weights (bf16 -> float64 is exact). No
position encoding exists (NoPE MLA); the KDA state is the recurrent form, zero at the start.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------
# safetensors reading (docs/checkpoint.md §1)

E2M1_VALUES = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float64)
RAW_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "<u2", "U8": "u1", "I8": "i1",
              "I16": "<i2", "I32": "<i4", "I64": "<i8", "BOOL": "u1"}


def read_safetensors_header(path):
    """{name: (dtype, shape, absolute byte offset, byte length)} of one safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), 8 + n + begin, end - begin)
    return out


class Tensors:
    """All tensors of a checkpoint directory; values are read lazily."""

    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.entries = {}
        for fn in files:
            path = os.path.join(model_dir, fn)
            for name, (dt, shape, off, nbytes) in read_safetensors_header(path).items():
                self.entries[name] = (path, dt, shape, off, nbytes)
        self.cache = {}

    def has(self, name):
        return name in self.entries

    def raw(self, name):
        path, dt, shape, off, nbytes = self.entries[name]
        a = np.fromfile(path, dtype=np.dtype(RAW_DTYPES[dt]), count=nbytes // np.dtype(RAW_DTYPES[dt]).itemsize,
                        offset=off)
        return dt, a.reshape(shape)

    def get(self, name, shape=None):
        """The tensor as float64 (bf16 widened exactly via uint16 << 16)."""
        if name not in self.cache:
            if name not in self.entries:
                raise KeyError(f"tensor {name} missing from the checkpoint")
            dt, a = self.raw(name)
            if dt == "BF16":
                a = (a.astype(np.uint32) << 16).view(np.float32)
            elif dt not in ("F32", "F64", "F16"):
                raise ValueError(f"{name}: dtype {dt} is not a float dtype")
            self.cache[name] = a.astype(np.float64)
        a = self.cache[name]
        if shape is not None and tuple(a.shape) != tuple(shape):
            raise ValueError(f"{name}: shape {a.shape}, expected {tuple(shape)}")
        return a


def decode_mxfp4(packed, scales):
    """compressed-tensors mxfp4-pack-quantized (docs/checkpoint.md §6): packed [R, C/2] U8 with the
    LOW nibble = even input index; scales [R, C/32] U8 E8M0 (2^(e-127)). Returns [R, C]."""
    rows = packed.shape[0]
    codes = np.empty((rows, packed.shape[1] * 2), np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    values = E2M1_VALUES[codes]
    scale = np.ldexp(1.0, scales.astype(np.int64) - 127)  # [R, C/32]
    return values * np.repeat(scale, 32, axis=1)


# ---------------------------------------------------------------------------------------------
# configuration (docs/checkpoint.md §2)

class Config:
    def __init__(self, raw):
        self.k3 = raw.get("model_type") == "kimi_k3"
        c = raw["text_config"] if self.k3 else raw
        self.prefix = "language_model." if self.k3 else ""
        self.vocab = c["vocab_size"]
        self.d = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-5)
        self.tie = c.get("tie_word_embeddings", False)
        la = c["linear_attn_config"]
        self.kda_layers = set(la["kda_layers"])  # 1-based
        self.full_attn_layers = set(la["full_attn_layers"])  # 1-based
        if self.kda_layers | self.full_attn_layers != set(range(1, self.L + 1)) or \
                self.kda_layers & self.full_attn_layers:
            raise ValueError("kda_layers and full_attn_layers must partition 1..num_hidden_layers")
        self.Hk = la["num_heads"]
        self.Dk = la["head_dim"]
        self.K = la["short_conv_kernel_size"]
        self.gate_lower_bound = la.get("gate_lower_bound")  # None -> Kimi-Linear gate
        self.full_rank_gate = la.get("use_full_rank_gate", False)
        self.H = c["num_attention_heads"]
        self.q_lora = c.get("q_lora_rank")
        self.kv_lora = c["kv_lora_rank"]
        self.dn = c["qk_nope_head_dim"]
        self.dr = c["qk_rope_head_dim"]
        self.dv = c["v_head_dim"]
        if not c.get("mla_use_nope", True):
            raise ValueError("mla_use_nope must be true (no RoPE in Kimi models)")
        self.mla_gate = c.get("mla_use_output_gate", False)
        self.I_dense = c["intermediate_size"]
        self.first_dense = c.get("first_k_dense_replace", 0)
        self.moe_freq = c.get("moe_layer_freq", 1)
        self.E = c["num_experts"]
        self.topk = c["num_experts_per_token"]
        self.S = c.get("num_shared_experts", 0)
        self.I = c["moe_intermediate_size"]
        if c.get("moe_router_activation_func", "sigmoid") != "sigmoid":
            raise ValueError("only sigmoid routers are specified")
        self.renorm = c.get("moe_renormalize", True)
        self.scaling = c.get("routed_scaling_factor", 1.0)
        self.groups = c.get("num_expert_group", 1) or 1
        self.topk_group = c.get("topk_group", 1) or 1
        self.act = c["hidden_act"]
        self.beta1 = c.get("activation_situ_beta")
        self.beta2 = c.get("activation_situ_linear_beta")  # None -> no cap on the up branch
        self.latent = c.get("routed_expert_hidden_size")  # None -> experts on the full width
        self.latent_norm = c.get("latent_moe_use_norm", False)
        self.attn_res_block = c.get("attn_res_block_size")  # None -> plain pre-norm residual

    def is_kda(self, l):
        return (l + 1) in self.kda_layers  # 1-based lists (§9.1 item 1)

    def is_moe(self, l):
        return l >= self.first_dense and l % self.moe_freq == 0


# ---------------------------------------------------------------------------------------------
# building blocks

def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1/(1+e^-x), no overflow


def softplus(x):
    return np.logaddexp(0.0, x)


def silu(x):
    return x * sigmoid(x)


def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def linear(x, w):
    """y = x W^T with W [out, in] (docs/checkpoint.md §1 rule 6)."""
    return x @ w.T


class Stats:
    """Optional activation statistics (--stats)."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.rows = []

    def add(self, key, value):
        if self.enabled:
            self.rows.append((key, value))


# ---------------------------------------------------------------------------------------------
# the model

class Model:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = Config(json.load(f))
        self.t = Tensors(model_dir)

    def w(self, name, shape=None):
        return self.t.get(self.cfg.prefix + name, shape)

    # ---- FFN (docs/checkpoint.md §5 "Experts / MLPs"; docs/model.md §6.3) ----
    def glu(self, x, gate_w, up_w, down_w):
        c = self.cfg
        g = linear(x, gate_w)
        u = linear(x, up_w)
        if c.act == "situ":  # SiTU-GLU: β1·tanh(g/β1)·σ(g) ⊙ β2·tanh(u/β2)
            a = c.beta1 * np.tanh(g / c.beta1) * sigmoid(g)
            if c.beta2 is not None:
                u = c.beta2 * np.tanh(u / c.beta2)
        elif c.act == "silu":  # SwiGLU
            a = silu(g)
        else:
            raise ValueError(f"hidden_act {c.act}")
        return linear(a * u, down_w)

    def mlp(self, x, p, width):
        c = self.cfg
        return self.glu(x, self.w(p + "gate_proj.weight", (width, c.d)),
                        self.w(p + "up_proj.weight", (width, c.d)),
                        self.w(p + "down_proj.weight", (c.d, width)))

    def expert_weight(self, p, shape):
        """A routed expert's matrix: plain `.weight` or MXFP4 `weight_packed`/`weight_scale`."""
        name = self.cfg.prefix + p
        if self.t.has(name + ".weight"):
            return self.t.get(name + ".weight", shape)
        if name not in self.t.cache:
            _, packed = self.t.raw(name + ".weight_packed")
            _, scales = self.t.raw(name + ".weight_scale")
            if packed.shape != (shape[0], shape[1] // 2) or scales.shape != (shape[0], shape[1] // 32):
                raise ValueError(f"{name}: MXFP4 shapes {packed.shape}/{scales.shape} for {shape}")
            self.t.cache[name] = decode_mxfp4(packed, scales)
        return self.t.cache[name]

    # ---- router, noaux_tc (docs/checkpoint.md §5 "Router"; docs/model.md §6.1, §9.1 item 9) ----
    def route(self, x, p, stats):
        c = self.cfg
        s = sigmoid(linear(x, self.w(p + "gate.weight", (c.E, c.d))))  # [T, E], unbiased
        biased = s + self.w(p + "gate.e_score_correction_bias", (c.E,))
        sel_scores = biased
        if c.groups > 1:
            per = c.E // c.groups
            grouped = biased.reshape(x.shape[0], c.groups, per)
            group_score = np.sort(grouped, axis=-1)[..., -2:].sum(-1)  # sum of top-2 per group
            keep = np.argsort(-group_score, axis=-1, kind="stable")[:, :c.topk_group]
            mask = np.zeros((x.shape[0], c.groups), bool)
            np.put_along_axis(mask, keep, True, axis=-1)
            sel_scores = np.where(np.repeat(mask, per, axis=1), biased, 0.0)
        top = np.argsort(-sel_scores, axis=-1, kind="stable")[:, :c.topk]  # [T, k]
        weights = np.take_along_axis(s, top, axis=-1)
        if c.renorm and c.topk > 1:
            weights = weights / (weights.sum(-1, keepdims=True) + 1e-20)
        weights = weights * c.scaling
        if stats.enabled:
            unbiased_top = np.argsort(-s, axis=-1, kind="stable")[:, :c.topk]
            changed = [set(a) != set(b) for a, b in zip(top, unbiased_top)]
            stats.add("router_bias_changes_selection_frac", float(np.mean(changed)))
            stats.add("router_score_std", float(s.std()))
        return top, weights

    def moe(self, x, p, stats):
        c = self.cfg
        top, weights = self.route(x, p, stats)
        width = c.latent if c.latent else c.d
        z = linear(x, self.w(p + "routed_expert_down_proj.weight", (c.latent, c.d))) if c.latent else x
        u = np.zeros((x.shape[0], width))
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            q = p + f"experts.{e}."
            y = self.glu(z[rows], self.expert_weight(q + "w1", (c.I, width)),
                         self.expert_weight(q + "w3", (c.I, width)),
                         self.expert_weight(q + "w2", (width, c.I)))
            u[rows] += weights[rows, slot][:, None] * y
        if c.latent:  # Stable LatentMoE: RMSNorm on the weighted SUM, then up (§9.1 item 10)
            if c.latent_norm:
                u = rms_norm(u, self.w(p + "routed_expert_norm.weight", (c.latent,)), c.eps)
            u = linear(u, self.w(p + "routed_expert_up_proj.weight", (c.d, c.latent)))
        if c.S > 0:  # shared experts on the full-width x
            u = u + self.mlp(x, p + "shared_experts.", c.S * c.I)
        return u

    def ffn(self, x, l, stats):
        c = self.cfg
        p = f"model.layers.{l}."
        if c.is_moe(l):
            return self.moe(x, p + "block_sparse_moe.", stats)
        return self.mlp(x, p + "mlp.", c.I_dense)

    # ---- KDA (docs/checkpoint.md §5 "KDA"; docs/model.md §3, §9.1 items 2-6) ----
    def kda(self, x, p, stats):
        c = self.cfg
        T, H, D, P = x.shape[0], c.Hk, c.Dk, c.Hk * c.Dk

        def conv_silu(name):
            raw = linear(x, self.w(p + f"{name}_proj.weight", (P, c.d)))  # [T, P]
            w = self.w(p + f"{name}_conv1d.weight", (P, 1, c.K))[:, 0, :]  # [P, K]
            padded = np.concatenate([np.zeros((c.K - 1, P)), raw], axis=0)
            y = np.zeros((T, P))
            for j in range(c.K):  # tap K-1 multiplies the current token
                y += w[:, j] * padded[j:j + T]
            return silu(y).reshape(T, H, D)

        q, k, v = conv_silu("q"), conv_silu("k"), conv_silu("v")
        q = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + 1e-6) * D ** -0.5  # L2 then D^-1/2
        k = k / np.sqrt(np.sum(k * k, -1, keepdims=True) + 1e-6)
        beta = sigmoid(linear(x, self.w(p + "b_proj.weight", (H, c.d))))  # [T, H]
        f = linear(linear(x, self.w(p + "f_a_proj.weight", (D, c.d))),
                   self.w(p + "f_b_proj.weight", (P, D))).reshape(T, H, D)
        a_log = self.w(p + "A_log").reshape(-1)[:H]  # K3 [N>=H] zero-padded; K-L [1,1,H,1]
        dt_bias = self.w(p + "dt_bias", (P,)).reshape(H, D)
        rate = np.exp(a_log)[None, :, None]
        if c.gate_lower_bound is not None:  # K3: lb·σ(exp(A)·(f+dt_bias))
            g = c.gate_lower_bound * sigmoid(rate * (f + dt_bias))
        else:  # Kimi-Linear: −exp(A)·softplus(f+dt_bias)
            g = -rate * softplus(f + dt_bias)
        decay = np.exp(g)  # [T, H, D]

        S = np.zeros((H, D, D))  # per head S[key c, value j], o = Sᵀq
        o = np.zeros((T, H, D))
        for t in range(T):
            S = S * decay[t][:, :, None]
            err = v[t] - np.einsum("hcj,hc->hj", S, k[t])
            S = S + beta[t][:, None, None] * k[t][:, :, None] * err[:, None, :]
            o[t] = np.einsum("hcj,hc->hj", S, q[t])

        if c.full_rank_gate:
            gate = linear(x, self.w(p + "g_proj.weight", (P, c.d)))
        else:
            gate = linear(linear(x, self.w(p + "g_a_proj.weight", (D, c.d))),
                          self.w(p + "g_b_proj.weight", (P, D)))
        y = rms_norm(o, self.w(p + "o_norm.weight", (D,)), c.eps) * sigmoid(gate.reshape(T, H, D))
        if stats.enabled:
            stats.add("kda_decay_p01", float(np.quantile(decay, 0.01)))
            stats.add("kda_decay_p99", float(np.quantile(decay, 0.99)))
            stats.add("kda_decay_min", float(decay.min()))
            stats.add("kda_decay_max", float(decay.max()))
            stats.add("kda_beta_p05", float(np.quantile(beta, 0.05)))
            stats.add("kda_beta_p95", float(np.quantile(beta, 0.95)))
            stats.add("kda_o_rms", float(np.sqrt(np.mean(o * o))))
        return linear(y.reshape(T, P), self.w(p + "o_proj.weight", (c.d, P)))

    # ---- MLA, NoPE, non-absorbed (docs/checkpoint.md §5 "MLA"; docs/model.md §4, §9.1 items 7-8) ----
    def mla(self, x, p, stats):
        c = self.cfg
        T, H, dn, dr, dv, r = x.shape[0], c.H, c.dn, c.dr, c.dv, c.kv_lora
        if c.q_lora:
            cq = rms_norm(linear(x, self.w(p + "q_a_proj.weight", (c.q_lora, c.d))),
                          self.w(p + "q_a_layernorm.weight", (c.q_lora,)), 1e-6)
            q = linear(cq, self.w(p + "q_b_proj.weight", (H * (dn + dr), c.q_lora)))
        else:
            q = linear(x, self.w(p + "q_proj.weight", (H * (dn + dr), c.d)))
        q = q.reshape(T, H, dn + dr)
        ckv = linear(x, self.w(p + "kv_a_proj_with_mqa.weight", (r + dr, c.d)))
        latent = rms_norm(ckv[:, :r], self.w(p + "kv_a_layernorm.weight", (r,)), 1e-6)
        k_pe = ckv[:, r:]  # not normalised, not rotated
        kv = linear(latent, self.w(p + "kv_b_proj.weight", (H * (dn + dv), r))).reshape(T, H, dn + dv)
        k_nope, v = kv[:, :, :dn], kv[:, :, dn:]
        scores = (np.einsum("thc,shc->hts", q[:, :, :dn], k_nope) +
                  np.einsum("thc,sc->hts", q[:, :, dn:], k_pe)) / math.sqrt(dn + dr)
        causal = np.tril(np.ones((T, T), bool))[None]
        if stats.enabled:
            stats.add("mla_score_std", float(np.std(scores[np.broadcast_to(causal, scores.shape)])))
        scores = np.where(causal, scores, -np.inf)
        scores = scores - scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        o = np.einsum("hts,shj->thj", probs, v).reshape(T, H * dv)
        if c.mla_gate:  # gate between W_UV and o_proj
            o = o * sigmoid(linear(x, self.w(p + "g_proj.weight", (H * dv, c.d))))
        if stats.enabled:
            stats.add("mla_max_prob_mean", float(probs.max(-1).mean()))
        return linear(o, self.w(p + "o_proj.weight", (c.d, H * dv)))

    def mixer(self, x, l, stats):
        p = f"model.layers.{l}.self_attn."
        return self.kda(x, p, stats) if self.cfg.is_kda(l) else self.mla(x, p, stats)

    # ---- Block AttnRes (docs/checkpoint.md §5; docs/model.md §5.1, §9.1 item 12) ----
    def attn_res_mix(self, sources, site, stats):
        c = self.cfg
        w_eff = self.w(site + "_norm.weight", (c.d,)) * self.w(site + "_proj.weight", (1, c.d))[0]
        V = np.stack(sources)  # [n, T, d]
        z = (V @ w_eff) / np.sqrt(np.mean(V * V, axis=-1) + c.eps)  # logits on RMSNorm'd sources
        z = z - z.max(0, keepdims=True)
        pi = np.exp(z)
        pi /= pi.sum(0, keepdims=True)
        if stats.enabled and len(sources) > 1:
            stats.add("attnres_max_weight_mean", float(pi.max(0).mean()))
        return np.einsum("nt,ntd->td", pi, V)  # mixes the RAW sources

    # ---- whole model (docs/model.md §1) ----
    def forward(self, ids, stats=None, embeds=None):
        """Logits [T, vocab]. embeds: optional {position: row [d]} whose rows replace the
        embeddings there (image rows; the ids at those positions are not looked up)."""
        c = self.cfg
        stats = stats or Stats(False)
        ids = np.asarray(ids, np.int64)
        replaced = np.zeros(len(ids), bool)
        if embeds:
            replaced[list(embeds)] = True
        looked_up = ids[~replaced]
        if looked_up.size and (looked_up.min() < 0 or looked_up.max() >= c.vocab):
            raise ValueError(f"token id outside 0..{c.vocab - 1}")
        emb = self.w("model.embed_tokens.weight", (c.vocab, c.d))
        x0 = emb[np.where(replaced, 0, ids)]  # a copy: the table is not touched below
        for pos, row in (embeds or {}).items():
            x0[pos] = np.asarray(row, np.float64).reshape(c.d)
        if c.attn_res_block:
            h = self.forward_attn_res(x0, stats)
        else:
            h = x0
            for l in range(c.L):
                p = f"model.layers.{l}."
                a = self.mixer(rms_norm(h, self.w(p + "input_layernorm.weight", (c.d,)), c.eps), l, stats)
                h = h + a
                f = self.ffn(rms_norm(h, self.w(p + "post_attention_layernorm.weight", (c.d,)), c.eps), l, stats)
                h = h + f
                stats.add(f"layer{l}_mixer_rms", float(np.sqrt(np.mean(a * a))))
                stats.add(f"layer{l}_ffn_rms", float(np.sqrt(np.mean(f * f))))
                stats.add(f"layer{l}_residual_rms", float(np.sqrt(np.mean(h * h))))
        hn = rms_norm(h, self.w("model.norm.weight", (c.d,)), c.eps)
        head = emb if c.tie else self.w("lm_head.weight", (c.vocab, c.d))
        return linear(hn, head)

    def forward_attn_res(self, x0, stats):
        c = self.cfg
        B = c.attn_res_block
        blocks, p = [], x0
        for l in range(c.L):
            q = f"model.layers.{l}."
            h = self.attn_res_mix(blocks + [p], q + "self_attention_res", stats) if blocks else p
            if l % B == 0:  # block boundary: the partial sum becomes a source (after the mix)
                blocks.append(p)
                p = None
            a = self.mixer(rms_norm(h, self.w(q + "input_layernorm.weight", (c.d,)), c.eps), l, stats)
            p = a if p is None else p + a
            h = self.attn_res_mix(blocks + [p], q + "mlp_res", stats)
            f = self.ffn(rms_norm(h, self.w(q + "post_attention_layernorm.weight", (c.d,)), c.eps), l, stats)
            p = p + f
            stats.add(f"layer{l}_mixer_rms", float(np.sqrt(np.mean(a * a))))
            stats.add(f"layer{l}_ffn_rms", float(np.sqrt(np.mean(f * f))))
            stats.add(f"layer{l}_partial_rms", float(np.sqrt(np.mean(p * p))))
        return self.attn_res_mix(blocks + [p], "model.output_attn_res", stats)


# ---------------------------------------------------------------------------------------------

def load_ids(path):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = data.get("ids", data.get("input_ids"))
    if not isinstance(data, list) or not data or not all(isinstance(i, int) for i in data):
        raise ValueError(f"{path}: expected a non-empty JSON array of token ids")
    return data


def print_stats(stats, logits):
    grouped = {}
    for key, value in stats.rows:
        grouped.setdefault(key, []).append(value)
    for key, values in grouped.items():
        v = np.array(values)
        print(f"  {key:40s} n={len(v):3d} min={v.min():.4g} mean={v.mean():.4g} max={v.max():.4g}",
              file=sys.stderr)
    z = logits - logits.max(-1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    srt = np.sort(logits, -1)
    print(f"  logits: std {logits.std(-1).mean():.3f}, top-1 prob mean {prob.max(-1).mean():.3f} "
          f"(min {prob.max(-1).min():.3f}, max {prob.max(-1).max():.3f}), top1-top2 gap mean "
          f"{(srt[:, -1] - srt[:, -2]).mean():.3f} min {(srt[:, -1] - srt[:, -2]).min():.4f}",
          file=sys.stderr)


def greedy(model, ids, logits, count, embeds=None):
    """`count` greedy tokens after `ids` (whose logits are given), each by a full recomputation
    (no cache code to get wrong); `embeds` rows stay at their positions."""
    seq = list(ids)
    nxt = int(np.argmax(logits[-1]))
    out = []
    for i in range(count):
        out.append(nxt)
        seq.append(nxt)
        if i + 1 < count:
            nxt = int(np.argmax(model.forward(seq, embeds=embeds)[-1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--ids-file", required=True, help="JSON array of prompt token ids")
    ap.add_argument("--out", help="write the prompt logits [T, vocab] as float32 .npy here")
    ap.add_argument("--greedy", type=int, default=0, help="print N greedy continuation ids as JSON")
    ap.add_argument("--stats", action="store_true", help="print activation statistics to stderr")
    args = ap.parse_args()

    model = Model(args.model)
    ids = load_ids(args.ids_file)
    stats = Stats(args.stats)
    logits = model.forward(ids, stats)
    if not np.all(np.isfinite(logits)):
        sys.exit("non-finite logits")
    if args.out:
        np.save(args.out, logits.astype(np.float32))
    if args.stats:
        print_stats(stats, logits)
    if args.greedy > 0:
        print(json.dumps(greedy(model, ids, logits, args.greedy)))


if __name__ == "__main__":
    main()
