"""Column attention entropy (docs/analysis.md) of a Llama-shaped model at long context through Hugging
Face transformers, the reference `qkvlab analyze entropy` is timed against on the same card (issue 29,
bench/gpu_suite.sh): LlamaForCausalLM with eager attention and output_attentions (every layer's
patterns kept, H·T² floats a layer), one sequence at a time, the entropy of each layer's head-mean
column importance computed on the device; or with --attention sdpa, PyTorch's fused attention, which
returns no patterns: the forward pass alone, the floor any pattern-forming path sits above. Random
weights from LlamaConfig and a seed (the cost does not depend on them; qkvlab's model is its own
`qkvlab lm init` of the same shape). Benchmark only: transformers is not one of qkvlab's dependencies.

    python3 bench/pytorch/hf_llama_entropy.py --device cuda [--layers 16 --d 2048 --heads 32 --kv-heads 8
        --ffn 8192 --vocab 32000 --seq 4096 --sequences 2 --attention eager|sdpa]

Prints one JSON object: implementation, device, seconds (after one warm-up sequence), tokens_per_second,
peak_memory_bytes (torch.cuda.max_memory_allocated), and the per-layer entropies' means (eager).
"""
import argparse
import json

import torch
import transformers

from gpt2_analyze import timed


def llama(a):
    config = transformers.LlamaConfig(hidden_size=a.d, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                                      vocab_size=a.vocab, max_position_embeddings=a.seq, rope_theta=10000.0,
                                      tie_word_embeddings=False)
    with torch.device(a.device):
        try:
            model = transformers.LlamaForCausalLM._from_config(config, attn_implementation=a.attention)
        except TypeError:
            config._attn_implementation = a.attention
            model = transformers.LlamaForCausalLM(config)
    return model.eval()


def entropies(model, ids, eager):
    out = model(ids, output_attentions=eager)
    if not eager:
        return []
    result = []
    for att in out.attentions:
        a = att[0].mean(0).sum(0)  # column importance of the head-mean pattern
        p = a / a.sum()
        result.append(float(-(p * p.clamp_min(1e-30).log()).sum()))
    return result


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 16), ("d", 2048), ("heads", 32), ("kv-heads", 8), ("ffn", 8192),
                          ("vocab", 32000), ("seq", 4096), ("sequences", 2), ("seed", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # float products round as float, as qkvlab's
    torch.manual_seed(a.seed)
    model = llama(a)
    ids = torch.randint(a.vocab, (a.sequences, a.seq), device=a.device)
    eager = a.attention == "eager"
    per_sequence = []
    with torch.no_grad():
        seconds = timed(lambda i: per_sequence.append(entropies(model, ids[i:i + 1], eager)), a.sequences, a.device)
    per_sequence = per_sequence[1:]  # the warm-up's
    means = [sum(s[l] for s in per_sequence) / len(per_sequence) for l in range(len(per_sequence[0]))]
    cuda = a.device == "cuda"
    print(json.dumps({"implementation": "transformers " + transformers.__version__ + " (torch " + torch.__version__ +
                      ") LlamaForCausalLM, attention " + a.attention + ", one sequence at a time",
                      "device": torch.cuda.get_device_name() if cuda else "cpu", "layers": a.layers, "d": a.d,
                      "heads": a.heads, "kv_heads": a.kv_heads, "seq": a.seq, "sequences": a.sequences,
                      "seconds": seconds, "tokens_per_second": a.sequences * a.seq / seconds,
                      "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
                      "means": {"entropy": means}}))


if __name__ == "__main__":
    main()
