"""The papers' path for the analyses of trained models, the reference `qkvlab analyze all` is
timed against (docs/benchmarks.md): PyTorch eager attention (Debian's python3-torch; benchmark
only), one sequence at a time, every layer's attention probabilities, values and hidden states
kept (as output_attentions / output_hidden_states give them), then the measures of
docs/analysis.md in float32: column entropy, hidden-state similarity, value spectrum (eigvalsh),
first-token ratios. Random GPT-2 weights (the measures' cost does not depend on them).

    /usr/bin/python3 bench/pytorch/gpt2_analyze.py --threads 2 [--layers 12 --d 768 --heads 12
        --vocab 50257 --seq 1024 --sequences 2]
"""
import argparse
import json
import time

import torch

from gpt2_train import GPT2


def measures(model, ids):
    record, hidden = [], []
    T = ids.shape[1]
    x = model.wte(ids) + model.wpe(torch.arange(T))
    hidden.append(x)
    for block in model.blocks:
        x = block(x, record)
        hidden.append(x)
    hidden[-1] = model.ln_f(x)
    out = {"entropy": [], "similarity": [], "spectrum_max": [], "sink": []}
    for att, v in record:
        a = att[0].mean(0).sum(0)  # column importance
        p = a / a.sum()
        out["entropy"].append(float(-(p * p.clamp_min(1e-30).log()).sum()))
        out["sink"].append(float(a[0] / a[1:].mean()))
        V = v[0].transpose(0, 1).reshape(T, -1)
        out["spectrum_max"].append(float(torch.linalg.eigvalsh(V.T @ V / T)[-1]))
    for h in hidden:
        u = torch.nn.functional.normalize(h[0], dim=-1)
        s = u.sum(0)
        out["similarity"].append(float((s @ s - T) / (T * (T - 1))))
    return out


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 12), ("d", 768), ("heads", 12), ("vocab", 50257), ("seq", 1024),
                          ("sequences", 2), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT2(a.layers, a.d, a.heads, a.vocab, max(a.seq, 1024)).eval()
    ids = torch.randint(a.vocab, (a.sequences, a.seq))
    with torch.no_grad():
        measures(model, ids[:1])  # warm-up
        t0 = time.perf_counter()
        for i in range(a.sequences):
            measures(model, ids[i:i + 1])
        seconds = time.perf_counter() - t0
    print(json.dumps({"implementation": "pytorch " + torch.__version__ + " eager, one sequence at a time",
                      "threads": a.threads, "layers": a.layers, "d": a.d, "seq": a.seq, "sequences": a.sequences,
                      "seconds": seconds, "tokens_per_second": a.sequences * a.seq / seconds}))


if __name__ == "__main__":
    main()
