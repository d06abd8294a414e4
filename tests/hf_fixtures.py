#!/usr/bin/env python3
"""Tiny Hugging Face checkpoint directories for the tests (tests/lm_hf_test.cpp).

Writes config.json and safetensors files by hand with numpy (no torch, no
safetensors package): an 8-byte little-endian header length, the JSON header,
then the tensors' bytes. Weights are drawn from numpy's PCG64 with a fixed
seed, so every run writes the same bytes.

    hf_fixtures.py gpt2  DIR [--dtype F32|F16|BF16] [--prefix transformer.] [--untied] [--no-buffers]
    hf_fixtures.py llama DIR [--dtype ...] [--shards N] [--prefix model.] [--tied] [--mistral]
    --tiny: a few hundred parameters (the fuzzers' seeds, scripts/fuzz_checkpoints.sh)
options for the error tests: --drop NAME (leave a tensor out), --extra NAME (add an unknown one),
--reshape NAME (store it with a wrong shape), --config KEY=JSON (set a config.json key).
llama: --head-dim N (not hidden_size / heads), --inv-freq DTYPE (old checkpoints' RoPE buffer,
computed in float32 as transformers does, at --inv-freq-theta, default the config's rope_theta).
--head-copy same|other: a tied model's file also stores lm_head.weight, the embedding (same) or not.
--nan NAME:K: element K (in the stored order) of tensor NAME set to NaN; --set NAME:K=X: set to the number X.
"""
import argparse
import json
import os
import sys

import numpy as np


def bf16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def encode(x, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(x, dtype="<f2").tobytes()
    if dtype == "BF16":
        return bf16_bits(x).tobytes()
    if dtype == "F64":
        return np.ascontiguousarray(x, dtype="<f8").tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


def gpt2(rng, untied, buffers, tiny=False):
    V, d, H, L, P = (11, 8, 2, 1, 4) if tiny else (61, 32, 4, 2, 16)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": d, "n_head": H,
              "n_layer": L, "n_positions": P, "n_ctx": P, "vocab_size": V, "layer_norm_epsilon": 1e-5,
              "activation_function": "gelu_new", "n_inner": None, "tie_word_embeddings": not untied}
    w = lambda *s: rng.normal(0, 0.3, s)
    t = {"wte.weight": w(V, d), "wpe.weight": w(P, d)}
    for i in range(L):
        h = f"h.{i}."
        t[h + "ln_1.weight"] = 1 + 0.2 * rng.normal(size=d)
        t[h + "ln_1.bias"] = 0.1 * rng.normal(size=d)
        t[h + "attn.c_attn.weight"] = w(d, 3 * d)
        t[h + "attn.c_attn.bias"] = 0.1 * rng.normal(size=3 * d)
        t[h + "attn.c_proj.weight"] = w(d, d)
        t[h + "attn.c_proj.bias"] = 0.1 * rng.normal(size=d)
        t[h + "ln_2.weight"] = 1 + 0.2 * rng.normal(size=d)
        t[h + "ln_2.bias"] = 0.1 * rng.normal(size=d)
        t[h + "mlp.c_fc.weight"] = w(d, 4 * d)
        t[h + "mlp.c_fc.bias"] = 0.1 * rng.normal(size=4 * d)
        t[h + "mlp.c_proj.weight"] = w(4 * d, d)
        t[h + "mlp.c_proj.bias"] = 0.1 * rng.normal(size=d)
        if buffers:  # causal-mask buffers as older transformers saved them: no parameters
            t[h + "attn.bias"] = np.tril(np.ones((P, P))).reshape(1, 1, P, P)
            t[h + "attn.masked_bias"] = np.array(-1e4)
    t["ln_f.weight"] = 1 + 0.2 * rng.normal(size=d)
    t["ln_f.bias"] = 0.1 * rng.normal(size=d)
    if untied:
        t["lm_head.weight"] = w(V, d)
    return config, t


def llama(rng, tied, mistral, tiny=False, head_dim=None):
    V, d, H, G, L, r, P = (13, 8, 2, 1, 1, 12, 8) if tiny else (53, 32, 4, 2, 2, 48, 32)
    dh = head_dim or d // H
    config = {"model_type": "mistral" if mistral else "llama",
              "architectures": ["MistralForCausalLM" if mistral else "LlamaForCausalLM"],
              "hidden_size": d, "intermediate_size": r, "num_hidden_layers": L, "num_attention_heads": H,
              "num_key_value_heads": G, "max_position_embeddings": P, "vocab_size": V, "rms_norm_eps": 1e-5,
              "rope_theta": 1000.0, "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": tied,
              "torch_dtype": "bfloat16"}
    if head_dim:
        config["head_dim"] = head_dim
    if mistral:
        config["sliding_window"] = None
    else:
        config.update({"attention_bias": False, "mlp_bias": False})
    w = lambda *s: rng.normal(0, 0.3, s)
    t = {"embed_tokens.weight": w(V, d)}
    for i in range(L):
        h = f"layers.{i}."
        t[h + "input_layernorm.weight"] = 1 + 0.2 * rng.normal(size=d)
        t[h + "self_attn.q_proj.weight"] = w(H * dh, d)
        t[h + "self_attn.k_proj.weight"] = w(G * dh, d)
        t[h + "self_attn.v_proj.weight"] = w(G * dh, d)
        t[h + "self_attn.o_proj.weight"] = w(d, H * dh)
        t[h + "post_attention_layernorm.weight"] = 1 + 0.2 * rng.normal(size=d)
        t[h + "mlp.gate_proj.weight"] = w(r, d)
        t[h + "mlp.up_proj.weight"] = w(r, d)
        t[h + "mlp.down_proj.weight"] = w(d, r)
    t["norm.weight"] = 1 + 0.2 * rng.normal(size=d)
    if not tied:
        t["lm_head.weight"] = w(V, d)
    return config, t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("family", choices=["gpt2", "llama"])
    p.add_argument("dir")
    p.add_argument("--dtype", default=None)
    p.add_argument("--prefix", default=None)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--tied", action="store_true")
    p.add_argument("--mistral", action="store_true")
    p.add_argument("--no-buffers", action="store_true")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tiny", action="store_true", help="a few hundred parameters (fuzzing seeds)")
    p.add_argument("--drop", action="append", default=[])
    p.add_argument("--extra", action="append", default=[])
    p.add_argument("--reshape", action="append", default=[])
    p.add_argument("--config", action="append", default=[])
    p.add_argument("--head-dim", type=int, default=None)
    p.add_argument("--inv-freq", default=None)
    p.add_argument("--inv-freq-theta", type=float, default=None)
    p.add_argument("--head-copy", choices=["same", "other"], default=None)
    p.add_argument("--nan", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    if a.family == "gpt2":
        config, t = gpt2(rng, a.untied, not a.no_buffers, a.tiny)
        dtype, prefix = a.dtype or "F32", "transformer." if a.prefix is None else a.prefix
    else:
        config, t = llama(rng, a.tied, a.mistral, a.tiny, a.head_dim)
        dtype, prefix = a.dtype or "BF16", "model." if a.prefix is None else a.prefix
    for kv in a.config:
        key, value = kv.split("=", 1)
        config[key] = json.loads(value)
    inv_freq = {}
    if a.inv_freq:  # transformers: 1 / (base ** (torch.arange(0, dim, 2).float() / dim)), in float32
        dh = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        base = np.float32(a.inv_freq_theta or config["rope_theta"])
        x = np.float32(1) / (base ** (np.arange(0, dh, 2, dtype=np.float32) / np.float32(dh)))
        for i in range(config["num_hidden_layers"]):
            inv_freq[f"layers.{i}.self_attn.rotary_emb.inv_freq"] = x
    if a.head_copy:
        embedding = t["wte.weight" if a.family == "gpt2" else "embed_tokens.weight"]
        t["lm_head.weight"] = embedding if a.head_copy == "same" else 2 * embedding
    for spec in a.nan + a.set:
        place, value = spec.split("=", 1) if "=" in spec else (spec, "nan")
        name, k = place.rsplit(":", 1)
        x = np.array(t[name], dtype=np.float64)
        x.reshape(-1)[int(k)] = float(value)
        t[name] = x
    for name in a.drop:
        del t[name]
    for name in a.extra:
        t[name] = np.zeros(3)
    for name in a.reshape:
        t[name] = t[name].reshape(-1)[:-1]
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors = []
    for name, x in t.items():
        full = name if name == "lm_head.weight" else prefix + name
        tensors.append((full, dtype, x.shape, encode(x, dtype)))
    for name, x in inv_freq.items():
        tensors.append((prefix + name, a.inv_freq, x.shape, encode(x, a.inv_freq)))
    if a.shards == 1:
        write_safetensors(os.path.join(a.dir, "model.safetensors"), tensors, {"format": "pt"})
        return
    weight_map, per = {}, -(-len(tensors) // a.shards)
    for k in range(a.shards):
        part = tensors[k * per:(k + 1) * per]
        file = f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors"
        write_safetensors(os.path.join(a.dir, file), part, {"format": "pt"})
        for name, *_ in part:
            weight_map[name] = file
    total = sum(len(b) for *_, b in tensors)
    with open(os.path.join(a.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
