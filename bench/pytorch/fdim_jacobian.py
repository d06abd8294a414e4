"""The reference `qkvlab fdim`'s Jacobian time is compared with (docs/benchmarks.md, "Functional
dimension"): the same network in PyTorch (Debian's python3-torch, CPU build; a benchmark-only
dependency, never one of qkvlab's), its Jacobian of parameters -> outputs by
torch.autograd.functional.jacobian, in float64, reverse mode vectorized over the outputs (or
forward mode, --strategy forward-mode). The network is fdim/config.hpp's nanoGPT setting
(docs/math/fdim.md, $NANO): learned token and position embeddings, pre-LayerNorm with gains and no
biases (eps 1e-5), causal attention with heads of size d_h, both skips, an exact-erf GELU MLP, a
final LayerNorm and an untied readout, on N random token sequences. Prints one JSON object: the
Jacobian's shape, its wall and CPU time (user + system of the process; medians over --repeat),
and its rank (numpy's tolerance), which must
equal qkvlab fdim's for the network to be the same.

    /usr/bin/python3 bench/pytorch/fdim_jacobian.py --layers 2 --inputs 80 --threads 2
"""
import argparse
import json
import math
import statistics
import time

import torch


def shapes(a):
    s = [("embed", a.vocab, a.d), ("positions", a.seq, a.d)]
    for l in range(a.layers):
        s += [(f"{l}.gain1", 1, a.d)]
        for h in range(a.heads):
            s += [(f"{l}.{h}.{w}", a.d, a.head_dim) for w in ("W_Q", "W_K", "W_V")] + [(f"{l}.{h}.W_O", a.head_dim, a.d)]
        s += [(f"{l}.gain2", 1, a.d), (f"{l}.W_1", a.d, a.ffn), (f"{l}.W_2", a.ffn, a.d)]
    return s + [("final_gain", 1, a.d), ("readout", a.d, a.vocab)]


def network(a, tokens):
    layout, offset = [], 0
    for name, r, c in shapes(a):
        layout.append((name, r, c, offset))
        offset += r * c
    mask = torch.ones(a.seq, a.seq, dtype=torch.bool).tril()

    def norm(x, gain):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * gain

    def f(theta):
        w = {name: theta[o:o + r * c].view(c, r).t() for name, r, c, o in layout}  # column-major, as fdim
        x = w["embed"][tokens] + w["positions"]
        for l in range(a.layers):
            z = norm(x, w[f"{l}.gain1"][0])
            out = 0
            for h in range(a.heads):
                q, k, v = (z @ w[f"{l}.{h}.{m}"] for m in ("W_Q", "W_K", "W_V"))
                s = (q @ k.transpose(-2, -1)) / math.sqrt(a.head_dim)
                p = s.masked_fill(~mask, float("-inf")).softmax(-1)
                out = out + (p @ v) @ w[f"{l}.{h}.W_O"]
            y = x + out
            u = norm(y, w[f"{l}.gain2"][0]) @ w[f"{l}.W_1"]
            x = y + (0.5 * u * (1 + torch.erf(u / math.sqrt(2)))) @ w[f"{l}.W_2"]
        return (norm(x, w["final_gain"][0]) @ w["readout"]).reshape(-1)

    return f, offset


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=2)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--inputs", type=int, default=80)
    p.add_argument("--strategy", choices=["reverse-mode", "forward-mode"], default="reverse-mode")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(a.seed)
    tokens = torch.randint(0, a.vocab, (a.inputs, a.seq), generator=g)
    f, P = network(a, tokens)
    theta = torch.randn(P, dtype=torch.float64, generator=g) / math.sqrt(a.d)
    times, cpu = [], []
    for _ in range(a.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        J = torch.autograd.functional.jacobian(f, theta, vectorize=True, strategy=a.strategy)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    rank = int(torch.linalg.matrix_rank(J).item())
    print(json.dumps({"parameters": P, "outputs": J.shape[0], "rank": rank, "deficiency": P - rank,
                      "jacobian_seconds_median": statistics.median(times), "jacobian_seconds": times,
                      "jacobian_cpu_seconds_median": statistics.median(cpu), "jacobian_cpu_seconds": cpu,
                      "strategy": a.strategy, "threads": a.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
