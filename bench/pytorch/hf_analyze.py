"""The papers' path through Hugging Face transformers, as the released scripts run it:
GPT2LMHeadModel with eager attention, one sequence at a time, output_attentions and
output_hidden_states, each block's values caught by a hook on its c_attn, then the measures of
docs/analysis.md in float32 on the same device (gpt2_analyze.summaries: column entropy,
similarity of the L + 1 states, the value covariance's largest eigenvalue, the first token's
importance ratio). Random weights from GPT2Config and a seed (the cost does not depend on them).
Benchmark only: transformers is not one of qkvlab's dependencies (the GPU machine has it).

    python3 bench/pytorch/hf_analyze.py --device cuda --save DIR [--layers 12 --d 768 --heads 12
        --vocab 50257 --seq 1024 --sequences 8] [--attention eager|sdpa] [--compare qkvlab.json]

--attention sdpa runs transformers' scaled_dot_product_attention instead (PyTorch's fused kernels):
it returns no patterns, so only the measures of the states run (similarity, the spectrum), and its
time is what a forward pass with hidden states costs on the card without any pattern.

--save DIR writes the model (save_pretrained: config.json, model.safetensors) and the token
sequences (DIR/tokens.npy, int32, one row each), so that `qkvlab analyze all DIR --tokens
DIR/tokens.npy --seq-len T --sequences 0 --format json` analyses the same model and sequences.

    python3 bench/pytorch/hf_analyze.py --compare QKVLAB.json --means HF.json

prints, per analysis, the largest relative difference over layers between qkvlab's per-layer
means (that command's JSON) and this script's (its JSON, the same sequences).
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers

from gpt2_analyze import summaries, timed


def gpt2(a):
    config = transformers.GPT2Config(n_layer=a.layers, n_embd=a.d, n_head=a.heads, vocab_size=a.vocab,
                                     n_positions=max(a.seq, 1024))
    try:
        model = transformers.GPT2LMHeadModel._from_config(config, attn_implementation=a.attention)
    except TypeError:
        config._attn_implementation = a.attention
        model = transformers.GPT2LMHeadModel(config)
    return model.eval().to(a.device)


def measures(model, ids, values):
    values.clear()
    eager = model.config._attn_implementation == "eager"
    out = model(ids, output_attentions=eager, output_hidden_states=True)
    C = model.config.n_embd
    patterns = out.attentions if eager else [None] * len(values)
    return summaries([(att, v[0, :, 2 * C:]) for att, v in zip(patterns, values)], out.hidden_states)


def compare(ours, path):
    q = json.load(open(path))
    pairs = {"entropy": ("entropy", "mean"), "similarity": ("similarity", "mean"),
             "spectrum_max": ("spectrum", "max"), "sink": ("first_token", "importance_ratio")}
    out = {}
    for name, (part, key) in pairs.items():
        theirs = [layer[key] for layer in q[part]["layers"]]
        out[name] = max(abs(x - y) / abs(y) for x, y in zip(theirs, ours[name]))
    return out


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 12), ("d", 768), ("heads", 12), ("vocab", 50257), ("seq", 1024),
                          ("sequences", 8), ("threads", 16), ("seed", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--save", default="")
    p.add_argument("--compare", default="")
    p.add_argument("--means", default="")
    p.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
    a = p.parse_args()
    if a.compare:
        print(json.dumps(compare(json.load(open(a.means))["means"], a.compare)))
        return
    torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # float products round as float, as qkvlab's
    torch.manual_seed(a.seed)
    model = gpt2(a)
    ids = torch.randint(a.vocab, (a.sequences, a.seq), device=a.device)
    if a.save:
        model.save_pretrained(a.save)
        np.save(os.path.join(a.save, "tokens.npy"), ids.cpu().numpy().astype(np.int32))
    values = []
    for block in model.transformer.h:
        block.attn.c_attn.register_forward_hook(lambda m, i, o: values.append(o))
    per_sequence = []
    with torch.no_grad():
        seconds = timed(lambda i: per_sequence.append(measures(model, ids[i:i + 1], values)), a.sequences,
                        a.device)
    per_sequence = per_sequence[1:]  # the warm-up's
    means = {k: [float(np.mean([s[k][l] for s in per_sequence])) for l in range(len(per_sequence[0][k]))]
             for k in per_sequence[0]}
    result = {"implementation": "transformers " + transformers.__version__ + " (torch " + torch.__version__ +
              ") GPT2LMHeadModel, attention " + model.config._attn_implementation + ", one sequence at a time",
              "device": a.device if a.device == "cpu" else torch.cuda.get_device_name(),
              "layers": a.layers, "d": a.d, "seq": a.seq, "sequences": a.sequences, "seconds": seconds,
              "tokens_per_second": a.sequences * a.seq / seconds, "means": means}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
