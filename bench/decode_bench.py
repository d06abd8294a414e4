#!/usr/bin/env python3
"""Decode throughput and cache size against context length and batch (`qkvlab lm generate`).

For each variant (vanilla, SkipV1, SVFormer, MLA, MLA + SkipV1) a freshly initialized model of the
given shape (`qkvlab lm init`, random weights: throughput does not depend on them) decodes
--new tokens greedily after a prompt of (context − new) tokens, for every context and batch; one
CSV row each: variant, context, batch, cache_bytes_per_token (measured from the allocation),
the whole cache at that context and batch, prefill and decode tokens/s, peak resident bytes.

    python3 bench/decode_bench.py [--qkvlab build/qkvlab] [--contexts 64,128,256] [--batches 1,4]
                                  [--new 16] [--threads 2] [--out decode.csv] [model flags after --]

Defaults: the tiny preset's shape (GPT-2, L = 6, d = 128, H = 4, V = 4096, 1024 positions).
Standard library only (the prompt .npy is written by hand).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

VARIANTS = {
    "vanilla": [],
    "skipv1": ["--variant", "skipv1"],
    "svformer": ["--variant", "svformer"],
    "mla": ["--family", "llama", "--mla", "--d-c", "64", "--d-r", "16"],
    "mla+skipv1": ["--family", "llama", "--mla", "--d-c", "64", "--d-r", "16", "--variant", "skipv1"],
}
SHAPE = ["--layers", "6", "--d", "128", "--heads", "4", "--vocab", "4096", "--positions", "1024"]


def write_ids(path, ids):
    """A 1-D little-endian int32 .npy, version 1.0."""
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%di" % len(ids), *ids))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qkvlab", default="build/qkvlab")
    p.add_argument("--contexts", default="64,128,256")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="-")
    p.add_argument("model", nargs="*", help="model flags replacing the default shape (after --)")
    a = p.parse_args()
    shape = a.model or SHAPE
    rows = ["variant,context,batch,cache_bytes_per_token,cache_bytes,prefill_tokens_per_s,"
            "decode_tokens_per_s,peak_bytes"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in VARIANTS.items():
            ckpt = os.path.join(tmp, name.replace("+", "_"))
            run([a.qkvlab, "lm", "init", ckpt, *shape, *flags])
            for context in map(int, a.contexts.split(",")):
                prompt = os.path.join(tmp, "prompt.npy")
                write_ids(prompt, [(7 * i + 3) % 4096 for i in range(context - a.new)])
                for batch in map(int, a.batches.split(",")):
                    out = json.loads(run([a.qkvlab, "lm", "generate", ckpt, "--tokens", prompt, "--max-new",
                                          str(a.new), "--batch", str(batch), "--threads", str(a.threads),
                                          "--format", "json"]))
                    per_token = out["cache_bytes_per_token"]
                    rows.append("%s,%d,%d,%g,%d,%.1f,%.1f,%d" % (
                        name, context, batch, per_token, per_token * batch * (context - 1),
                        out["prefill_tokens_per_s"], out["decode_tokens_per_s"], out["peak_bytes"]))
                    print(rows[-1], file=sys.stderr)
    text = "\n".join(rows) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
