"""The papers' path for the analyses of trained models, the reference `qkvlab analyze all` is
timed against (docs/benchmarks.md): PyTorch eager attention (Debian's python3-torch on the CPU;
the device machine's PyTorch with --device cuda; benchmark only), one sequence at a time, every
layer's attention probabilities, values and hidden states kept (as output_attentions /
output_hidden_states give them), then the measures of docs/analysis.md in float32 on the same
device: column entropy, hidden-state similarity, value spectrum (eigvalsh), first-token ratios.
Random GPT-2 weights (the measures' cost does not depend on them). hf_analyze.py does the same
through Hugging Face transformers' GPT2LMHeadModel.

    /usr/bin/python3 bench/pytorch/gpt2_analyze.py --threads 2 [--device cpu|cuda --layers 12 --d 768
        --heads 12 --vocab 50257 --seq 1024 --sequences 2]
"""
import argparse
import json
import time

import torch

from gpt2_train import GPT2


def summaries(record, hidden):
    """Per layer from one sequence: record holds (pattern [1, H, T, T], values [T, H·d_h]) per
    layer, hidden the L + 1 states [1, T, d] as output_hidden_states gives them."""
    out = {"entropy": [], "similarity": [], "spectrum_max": [], "sink": []}
    for att, V in record:
        T = V.shape[0]
        if att is not None:  # None: SDPA (hf_analyze.py --attention sdpa) gives no patterns
            a = att[0].mean(0).sum(0)  # column importance
            p = a / a.sum()
            out["entropy"].append(float(-(p * p.clamp_min(1e-30).log()).sum()))
            out["sink"].append(float(a[0] / a[1:].mean()))
        out["spectrum_max"].append(float(torch.linalg.eigvalsh(V.T @ V / T)[-1]))
    for h in hidden:
        T = h.shape[1]
        u = torch.nn.functional.normalize(h[0], dim=-1)
        s = u.sum(0)
        out["similarity"].append(float((s @ s - T) / (T * (T - 1))))
    return out


def measures(model, ids):
    record, hidden = [], []
    T = ids.shape[1]
    x = model.wte(ids) + model.wpe(torch.arange(T, device=ids.device))
    hidden.append(x)
    for block in model.blocks:
        x = block(x, record)
        hidden.append(x)
    hidden[-1] = model.ln_f(x)
    return summaries([(att, v[0].transpose(0, 1).reshape(T, -1)) for att, v in record], hidden)


def timed(run, sequences, device):
    """Seconds for run(i), i = 0 … sequences − 1, after one warm-up run (the device synchronized)."""
    run(0)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(sequences):
        run(i)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 12), ("d", 768), ("heads", 12), ("vocab", 50257), ("seq", 1024),
                          ("sequences", 2), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # float products round as float, as qkvlab's
    torch.manual_seed(1)
    model = GPT2(a.layers, a.d, a.heads, a.vocab, max(a.seq, 1024)).eval().to(a.device)
    ids = torch.randint(a.vocab, (a.sequences, a.seq), device=a.device)
    with torch.no_grad():
        seconds = timed(lambda i: measures(model, ids[i:i + 1]), a.sequences, a.device)
    print(json.dumps({"implementation": "pytorch " + torch.__version__ + " eager, one sequence at a time",
                      "device": a.device if a.device == "cpu" else torch.cuda.get_device_name(),
                      "threads": a.threads, "layers": a.layers, "d": a.d, "seq": a.seq, "sequences": a.sequences,
                      "seconds": seconds, "tokens_per_second": a.sequences * a.seq / seconds}))


if __name__ == "__main__":
    main()
