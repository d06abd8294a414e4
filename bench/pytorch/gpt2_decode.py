"""Decode throughput of a GPT-2 124M-shaped model with a KV cache: `qkvlab lm generate` against a
plain GPT-2 module in PyTorch (Debian's python3-torch, CPU build; a benchmark-only dependency) in
the same run, with the memory-bandwidth floor of each step (issue 27, "Performance").

Both models have GPT-2 124M's shape (L = 12, d = 768, H = 12, V = 50,257, 1024 positions, tied
head, biases, GELU tanh form) and random weights (the rates do not depend on them; qkvlab's
checkpoint is written by `qkvlab lm init`). Each decodes --new tokens greedily after a prompt of
1024 − (new − 1) tokens, so the last step attends over the full context of 1024, at each batch;
the decode rate is B·(new − 1) / (the decode steps' wall time). The PyTorch module keeps a
preallocated cache of K and V per layer ([B, H, 1024, d_h]) and feeds one token per step.

The floor: a decode step must read every weight it multiplies by (all parameters but the
position embedding, of which it reads one row; the tied embedding once, as the head) and the
cache of all B sequences, so bytes/step = 4·(P − positions·d) + 4·2·L·d·context·B at the step's
mean context; at the bandwidth measured here by a STREAM-like copy (numpy, a 256 MiB array: bytes
read + written over time, best of 5), floor seconds/step = bytes/step ÷ bandwidth. Each line gives
the measured step time over the floor.

    /usr/bin/python3 bench/pytorch/gpt2_decode.py [--qkvlab build/qkvlab] [--batches 1,8] [--new 16]
                                                  [--threads 2] [--repeats 2]

Prints one JSON object (also the load average and the CPU seconds of each side).
"""
import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from decode_bench import run, write_ids  # noqa: E402  (bench/decode_bench.py)

L, D, H, V, POSITIONS = 12, 768, 12, 50257, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, cache_k, cache_v, past):
        """x: [B, T, D] at positions past … past + T − 1; appends K, V to the cache."""
        B, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        cache_k[:, :, past:past + T] = k
        cache_v[:, :, past:past + T] = v
        keys, values = cache_k[:, :, :past + T], cache_v[:, :, :past + T]
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(D // H)
        if T > 1:
            mask = torch.ones(T, past + T, dtype=torch.bool).tril(diagonal=past)
            scores = scores.masked_fill(~mask, float("-inf"))
        att = scores.softmax(dim=-1) @ values
        x = x + self.c_proj(att.transpose(1, 2).reshape(B, T, D))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(POSITIONS, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, ids, caches, past):
        """Logits of the last position of each sequence."""
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(past, past + T))
        for block, (k, v) in zip(self.blocks, caches):
            x = block(x, k, v, past)
        return self.ln_f(x[:, -1]) @ self.wte.weight.T


def torch_decode(model, prompt, new, B):
    caches = [(torch.empty(B, H, POSITIONS, D // H), torch.empty(B, H, POSITIONS, D // H)) for _ in range(L)]
    ids = torch.tensor(prompt).repeat(B, 1)
    with torch.inference_mode():
        t0 = time.perf_counter()
        logits = model(ids, caches, 0)
        prefill = time.perf_counter() - t0
        past = len(prompt)
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(new - 1):
            token = logits.argmax(dim=-1, keepdim=True)
            logits = model(token, caches, past)
            past += 1
        decode, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"prefill_tokens_per_s": B * len(prompt) / prefill, "decode_tokens_per_s": B * (new - 1) / decode,
            "decode_cpu_seconds": cpu, "decode_seconds": decode}


def qkvlab_decode(qkvlab, ckpt, prompt_file, new, B, threads):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = json.loads(run([qkvlab, "lm", "generate", ckpt, "--tokens", prompt_file, "--max-new", str(new), "--batch",
                          str(B), "--threads", str(threads), "--format", "json", "--quiet"]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"prefill_tokens_per_s": out["prefill_tokens_per_s"], "decode_tokens_per_s": out["decode_tokens_per_s"],
            "process_cpu_seconds": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "cache_bytes_per_token": out["cache_bytes_per_token"]}


def copy_bandwidth():
    """Bytes read + written per second by a 256 MiB array copy, best of 5."""
    a = np.ones(64 << 20, dtype=np.float32)
    b = np.empty_like(a)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qkvlab", default="build/qkvlab")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT2().eval()
    params = sum(t.numel() for t in model.parameters())
    prompt = [(7 * i + 3) % V for i in range(POSITIONS - a.new + 1)]
    bandwidth = copy_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, prompt_file = os.path.join(tmp, "gpt2"), os.path.join(tmp, "prompt.npy")
        run([a.qkvlab, "lm", "init", ckpt, "--family", "gpt2", "--layers", str(L), "--d", str(D), "--heads", str(H),
             "--vocab", str(V), "--positions", str(POSITIONS), "--tied", "--bias"])
        write_ids(prompt_file, prompt)
        for B in map(int, a.batches.split(",")):
            mean_context = len(prompt) + (a.new - 1) / 2
            step_bytes = 4 * (params - POSITIONS * D) + 4 * 2 * L * D * mean_context * B
            floor = step_bytes / bandwidth
            for r in range(a.repeats):
                for name, measure in (("qkvlab", lambda: qkvlab_decode(a.qkvlab, ckpt, prompt_file, a.new, B, a.threads)),
                                      ("pytorch", lambda: torch_decode(model, prompt, a.new, B))):
                    m = measure()
                    step = B / m["decode_tokens_per_s"]
                    row = {"implementation": name, "batch": B, "repeat": r, **m, "step_seconds": step,
                           "floor_step_seconds": floor, "step_over_floor": step / floor,
                           "load_average": os.getloadavg()[0]}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    print(json.dumps({"shape": {"layers": L, "d": D, "heads": H, "vocab": V, "positions": POSITIONS,
                                "parameters": params}, "pytorch": torch.__version__, "threads": a.threads,
                      "new": a.new, "prompt_tokens": len(prompt), "copy_bandwidth_bytes_per_s": bandwidth,
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
