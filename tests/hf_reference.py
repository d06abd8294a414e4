#!/usr/bin/env python3
"""An independent implementation, in numpy float64, of the loss of a Hugging
Face GPT-2 or Llama/Mistral checkpoint directory, written from the HF layout
directly (docs/math/lm.md, "Hugging Face checkpoints"): its own safetensors reader, the
tensors as stored (Conv1D input-by-output for GPT-2, nn.Linear output-by-input
for Llama), HF's formulas. Nothing is shared with the C++ loader or model.
BF16 and F16 values are used as stored (as rounded), widened exactly.

    hf_reference.py DIR --tokens 3,1,4,1,5   →  {"loss": mean cross-entropy of next tokens, "count": T-1}
    hf_reference.py DIR --tokens ... --analyze  →  the per-layer analyses of docs/analysis.md for
        this one sequence, from the same forward pass: entropy (column and row definitions),
        similarity of the L + 1 hf states, the value covariance's eigenvalues, first-token ratios
"""
import argparse
import json
import math
import os
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        chunk = data[b:end]
        dt = e["dtype"]
        if dt == "F32":
            x = np.frombuffer(chunk, "<f4").astype(np.float64)
        elif dt == "F64":
            x = np.frombuffer(chunk, "<f8").astype(np.float64)
        elif dt == "F16":
            x = np.frombuffer(chunk, "<f2").astype(np.float64)
        elif dt == "BF16":
            x = (np.frombuffer(chunk, "<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
        else:
            continue  # buffers of other dtypes carry no parameters
        out[name] = x.reshape(e["shape"])
    return out


def read_dir(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    t = {}
    for file in files:
        t.update(read_safetensors(os.path.join(d, file)))
    return t


def strip(t, prefix):
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in t.items()}


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def causal_attention(q, k, v, rec=None):
    """q: (H, T, dh), k, v: (H, T, dh) -> (H, T, dh); rec (a list) gets the patterns (H, T, T)."""
    T, dh = q.shape[1], q.shape[2]
    s = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    a = np.exp(s - s.max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    if rec is not None:
        rec.append(a)
    return a @ v


def gpt2_logits(c, t, ids, rec=None):
    t = strip(t, "transformer.")
    d, H, L = c["n_embd"], c["n_head"], c["n_layer"]
    eps = c.get("layer_norm_epsilon", 1e-5)
    act = c.get("activation_function", "gelu_new")
    T = len(ids)

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * t[name + ".weight"] + t[name + ".bias"]

    def gelu(x):
        if act == "gelu":
            return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    x = t["wte.weight"][ids] + t["wpe.weight"][np.arange(T)]
    record(rec, "hidden", x)
    for i in range(L):
        h = f"h.{i}."
        qkv = ln(x, h + "ln_1") @ t[h + "attn.c_attn.weight"] + t[h + "attn.c_attn.bias"]
        q, k, v = (qkv[:, j * d:(j + 1) * d].reshape(T, H, d // H).transpose(1, 0, 2) for j in range(3))
        record(rec, "values", v.transpose(1, 0, 2).reshape(T, d))
        z = causal_attention(q, k, v, None if rec is None else rec["patterns"]).transpose(1, 0, 2).reshape(T, d)
        x = x + z @ t[h + "attn.c_proj.weight"] + t[h + "attn.c_proj.bias"]
        m = gelu(ln(x, h + "ln_2") @ t[h + "mlp.c_fc.weight"] + t[h + "mlp.c_fc.bias"])
        x = x + m @ t[h + "mlp.c_proj.weight"] + t[h + "mlp.c_proj.bias"]
        record(rec, "blocks", x)
    x = ln(x, "ln_f")
    record(rec, "final", x)
    head = t["wte.weight"] if c.get("tie_word_embeddings", True) else t["lm_head.weight"]
    return x @ head.T


def scaled_inv_freq(inv_freq, scaling):
    """Llama 3.1's rope_scaling "llama3", as transformers' _compute_llama3_parameters states it:
    by wavelength 2π/ω, keep the short ones, divide the long ones by the factor, and blend the
    band between linearly in original_context/wavelength."""
    if not scaling or scaling.get("rope_type", scaling.get("type")) == "default":
        return inv_freq
    assert scaling["rope_type"] == "llama3", scaling
    s, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    C = scaling["original_max_position_embeddings"]
    wavelen = 2 * np.pi / inv_freq
    out = np.where(wavelen > C / lo, inv_freq / s, inv_freq)
    g = (C / wavelen - lo) / (hi - lo)
    medium = (wavelen >= C / hi) & (wavelen <= C / lo)
    return np.where(medium, (1 - g) * out / s + g * out, out)


def llama_logits(c, t, ids, rec=None):
    t = strip(t, "model.")
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G = c.get("num_key_value_heads") or H
    dh = c.get("head_dim") or d // H
    eps, theta = c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    T = len(ids)

    def rms(x, name):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * t[name + ".weight"]

    def linear(x, name):  # nn.Linear: y = x Wᵀ (+ b)
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y

    inv_freq = scaled_inv_freq(theta ** (-np.arange(0, dh, 2) / dh), c.get("rope_scaling"))
    angles = np.outer(np.arange(T), inv_freq)
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))

    def rope(x):  # (heads, T, dh), rotate_half
        half = np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], -1)
        return x * cos + half * sin

    x = t["embed_tokens.weight"][ids]
    record(rec, "hidden", x)
    for i in range(L):
        h = f"layers.{i}."
        n = rms(x, h + "input_layernorm")
        q = rope(linear(n, h + "self_attn.q_proj").reshape(T, H, dh).transpose(1, 0, 2))
        k = rope(linear(n, h + "self_attn.k_proj").reshape(T, G, dh).transpose(1, 0, 2))
        v = linear(n, h + "self_attn.v_proj").reshape(T, G, dh).transpose(1, 0, 2)
        record(rec, "values", v.transpose(1, 0, 2).reshape(T, G * dh))  # the G key/value heads
        group = np.arange(H) // (H // G)
        z = causal_attention(q, k[group], v[group], None if rec is None else rec["patterns"])
        z = z.transpose(1, 0, 2).reshape(T, H * dh)
        x = x + linear(z, h + "self_attn.o_proj")
        n = rms(x, h + "post_attention_layernorm")
        g = linear(n, h + "mlp.gate_proj")
        x = x + linear(g / (1 + np.exp(-g)) * linear(n, h + "mlp.up_proj"), h + "mlp.down_proj")
        record(rec, "blocks", x)
    x = rms(x, "norm")
    record(rec, "final", x)
    head = t["embed_tokens.weight"] if c.get("tie_word_embeddings", False) else t["lm_head.weight"]
    return x @ head.T


def record(rec, what, x):
    if rec is not None:
        rec[what].append(x)


def entropy(w):
    p = w / w.sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def similarity(X):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = U @ U.T
    T = len(X)
    return float((C.sum() - np.trace(C)) / (T * (T - 1)))


def first_ratio(x):
    return float(x[0] / x[1:].mean())


def analyses(rec):
    """docs/analysis.md's definitions, from the recorded forward pass of one sequence."""
    L = len(rec["patterns"])
    out = {"entropy": [], "entropy_row": [], "importance_ratio": [], "value_norm_ratio": [],
           "hidden_norm_ratio": [], "eigenvalues": []}
    for l in range(L):
        A = rec["patterns"][l]  # (H, T, T)
        a = A.mean(0).sum(0)  # column importance: attention each token receives
        out["entropy"].append(entropy(a))
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = -np.where(A > 0, A * np.log(A), 0.0).sum(-1)
        out["entropy_row"].append(float(rows.mean()))
        out["importance_ratio"].append(first_ratio(a))
        V = rec["values"][l]
        out["value_norm_ratio"].append(first_ratio(np.linalg.norm(V, axis=1)))
        out["hidden_norm_ratio"].append(first_ratio(np.linalg.norm(rec["blocks"][l], axis=1)))
        ev = np.linalg.eigvalsh(V.T @ V / len(V))[::-1]
        out["eigenvalues"].append([float(e) for e in ev[:min(V.shape)]])
    states = rec["hidden"] + rec["blocks"][:-1] + rec["final"]  # output_hidden_states: L + 1
    out["similarity"] = [similarity(X) for X in states]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--tokens", required=True)
    p.add_argument("--analyze", action="store_true")
    a = p.parse_args()
    with open(os.path.join(a.dir, "config.json")) as f:
        c = json.load(f)
    ids = np.array([int(s) for s in a.tokens.split(",")])
    t = read_dir(a.dir)
    rec = {"hidden": [], "values": [], "patterns": [], "blocks": [], "final": []} if a.analyze else None
    logits = gpt2_logits(c, t, ids, rec) if c["model_type"] == "gpt2" else llama_logits(c, t, ids, rec)
    if a.analyze:
        print(json.dumps(analyses(rec)))
        return 0
    lp = log_softmax(logits)
    losses = -lp[np.arange(len(ids) - 1), ids[1:]]
    print(json.dumps({"loss": float(losses.mean()), "count": int(len(ids) - 1)}))


if __name__ == "__main__":
    sys.exit(main())
