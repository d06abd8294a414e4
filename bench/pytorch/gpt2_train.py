"""The reference the language model's CPU training throughput is compared with
(bench/README.md): a plain GPT-2 module in PyTorch (Debian's python3-torch, CPU
build; a benchmark-only dependency, never one of qkvlab's) with eager attention,
trained in float32 with AdamW on random tokens, at the same configuration and
batch as `lm_bench` (default: L = 6, d = 128, H = 4, T = 128, V = 4096, 16
sequences a step, tied head, biases, GELU tanh form). Prints one JSON object
with the median tokens/s over the timed steps.

    /usr/bin/python3 bench/pytorch/gpt2_train.py --threads 1 [--steps 10] [--warmup 3]

On a GPU (bench/gpu_suite.sh, issue 29): --device cuda, --compile (torch.compile of the model, its
compilation in the warm-up steps, not timed), --autocast bf16 (products in bfloat16 under
torch.autocast, float32 master weights and optimizer). TF32 is off, so float32 products round as
float32, as qkvlab's. Each timed step ends with a device synchronization. A step whose loss is not
finite is a failure (one line on stderr, exit 1, no JSON), as in lm_bench and lm_gpu_bench.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def attention(self, x, record=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)  # eager attention
        if record is not None:  # bench/pytorch/gpt2_analyze.py: the patterns and values, as output_attentions
            record.append((att, v))
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x, record=None):
        x = x + self.attention(self.ln_1(x), record)
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, d, heads, vocab, positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids, targets):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 6), ("d", 128), ("heads", 4), ("seq", 128), ("batch", 16), ("vocab", 4096),
                          ("threads", 1), ("steps", 10), ("warmup", 3)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--autocast", default="none", choices=["none", "bf16"])
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0:
        p.error(f"--steps must be at least 1 and --warmup at least 0 (got {a.steps} and {a.warmup})")
    torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1)
    model = GPT2(a.layers, a.d, a.heads, a.vocab, max(a.seq, 1024)).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    run = torch.compile(model) if a.compile else model
    ids = torch.randint(a.vocab, (a.batch, a.seq), device=a.device)
    targets = torch.randint(a.vocab, (a.batch, a.seq), device=a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = run(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(loss.detach())  # checked after the timing: reading it here would synchronize
    finite = torch.isfinite(torch.stack(losses).float()).tolist()
    if not all(finite):
        sys.exit(f"gpt2_train.py: the loss of step {finite.index(False) + 1} of {len(finite)} (warm-up included) "
                 "is not finite: nothing is reported")
    step_time = statistics.median(times)
    mode = ("torch.compile" if a.compile else "eager") + (", bf16 autocast" if a.autocast == "bf16" else ", float32")
    print(json.dumps({"implementation": "pytorch " + torch.__version__ + " " + mode, "threads": a.threads,
                      "device": a.device if a.device == "cpu" else torch.cuda.get_device_name(),
                      "layers": a.layers, "d": a.d, "heads": a.heads, "seq": a.seq, "batch": a.batch,
                      "vocab": a.vocab, "step_seconds_median": step_time, "step_seconds_min": min(times),
                      "tokens_per_second": a.batch * a.seq / step_time}))


if __name__ == "__main__":
    main()
