#!/usr/bin/env python3
"""Recomputes the papers' parameter and KV-cache numbers with `qkvlab params`
and `qkvlab kv` (docs/accounting.md): one line per printed figure, with the
exact count, the command that gives it and how it compares.

    scripts/accounting_table.py [path/to/qkvlab]     (default build/qkvlab)

Prints a Markdown table; docs/accounting.md holds its output and says which
counting rule and dtype reproduce each printed number. Another argument, or one
that is not an executable, is refused in one line (exit status 2) before any
command runs; a qkvlab command that fails is named in one line (exit status 1).
"""
import json
import shutil
import subprocess
import sys

USAGE = "usage: scripts/accounting_table.py [path/to/qkvlab]"


def fail(message, status):
    print(f"accounting_table.py: {message}", file=sys.stderr)
    sys.exit(status)


def qkvlab_binary(args):
    """The program named by the one optional argument (default build/qkvlab)."""
    if args in (["-h"], ["--help"]):
        print(__doc__.strip())
        sys.exit(0)
    if len(args) > 1 or (args and args[0].startswith("-")):
        fail(f"{' '.join(args)}: {USAGE}", 2)
    binary = args[0] if args else "build/qkvlab"
    if shutil.which(binary) is None:
        fail(f"{binary} is not an executable ({USAGE})", 2)
    return binary


QKVLAB = qkvlab_binary(sys.argv[1:])

# Configurations (flags of qkvlab params / kv).
GPT2_355M = "--family gpt2 --layers 24 --d 1024 --heads 16 --vocab 50257 --positions 1024 --tied --bias"
GQA = GPT2_355M + " --kv-heads 8"
MLA = GPT2_355M + " --mla --d-c 256 --d-r 32"
LLAMA = {  # SkipV1Former Table 4 (App. B.2) and LLaMA-7B; vocabulary 32,000, untied (LlamaConfig's defaults)
    "60M": "--layers 8 --d 512 --heads 8 --ffn 1376",
    "130M": "--layers 12 --d 768 --heads 12 --ffn 2048",
    "350M": "--layers 24 --d 1024 --heads 16 --ffn 2736",
    "1.3B": "--layers 24 --d 2048 --heads 32 --ffn 5461",
    "3B": "--layers 32 --d 2560 --heads 32 --ffn 6848",
    "7B": "--layers 32 --d 4096 --heads 32 --ffn 11008",
}
RESFORMER = {  # ResFormer Table 4: SwiGLU, RoPE, vocabulary 50,277, untied
    "2M": "--layers 4 --d 16 --heads 2 --ffn 56",
    "82M": "--layers 8 --d 512 --heads 8 --ffn 1792",
    "180M": "--layers 12 --d 768 --heads 12 --ffn 2688",
    "468M": "--layers 24 --d 1024 --heads 16 --ffn 3584",
}
NANOGPT = "--family gpt2 --layers 12 --heads 12 --vocab 50304 --positions 1024 --tied"  # bias=False


def run(command, args):
    argv = [QKVLAB, command] + args.split() + ["--format", "json"]
    done = subprocess.run(argv, capture_output=True, text=True)
    try:
        if done.returncode == 0:
            return json.loads(done.stdout)
    except ValueError:
        pass
    fail(f"`{' '.join(argv)}` failed (exit {done.returncode}): {(done.stderr.strip() or 'no JSON').splitlines()[0]}", 1)


def params(args):
    return run("params", args)


def kv(args):
    return run("kv", args)


def m(n):
    return f"{n / 1e6:.2f}M"


rows = []


def row(source, printed, exact, command):
    rows.append((source, printed, exact, command))


# SkipV1Former Table 2: GQA and MLA with and without SkipV1, "GPT2-355M".
for name, base in (("GQA", GQA), ("MLA", MLA)):
    for variant, label in (("vanilla", "Transformer-" + name), ("skipv1", "SkipV1Former-" + name)):
        args = f"{base} --variant {variant}"
        p = params(args)
        bias_free = " (MLA's dkv, uk, uv, kr, qr bias-free under --bias)" if name == "MLA" else ""
        row(f"SkipV1Former Table 2, {label}, params{bias_free}", {"GQA": {"vanilla": "334.7 M", "skipv1": "328.9 M"},
                                              "MLA": {"vanilla": "337.4 M", "skipv1": "334.4 M"}}[name][variant],
            f"{p['total']:,} ({m(p['total'])})", f"qkvlab params {args}")
        for dtype in ("f32", "bf16"):
            k = kv(f"{args} --dtype {dtype}")
            printed = {"GQA": {"vanilla": "98 304 B", "skipv1": "74 752 B, -24.0%"},
                       "MLA": {"vanilla": "13 824 B", "skipv1": "7 680 B, -44.4%"}}[name][variant]
            exact = f"{k['bytes_per_token']:,} B" + (f", -{100 * k['saving']:.2f}%" if variant != "vanilla" else "")
            row(f"SkipV1Former Table 2, {label}, KV bytes/token ({dtype})", printed, exact, f"qkvlab kv {args} --dtype {dtype}")
for variant in ("vanilla", "skipv1"):  # the other rule that reproduces the GQA rows: 16 cached heads in bf16
    args = f"{GPT2_355M} --variant {variant} --dtype bf16"
    k = kv(args)
    row(f"SkipV1Former Table 2, GQA rows counted with all 16 heads (MHA), bf16, {variant}",
        "98 304 B" if variant == "vanilla" else "74 752 B, -24.0%",
        f"{k['bytes_per_token']:,} B" + (f", -{100 * k['saving']:.2f}%" if variant != "vanilla" else ""),
        f"qkvlab kv {args}")

# SkipV1Former §6.2/§6.3: ~25% KV saving and ~4% fewer parameters across the LLaMA sizes.
for size, flags in LLAMA.items():
    args = f"--family llama {flags} --vocab 32000 --positions 1024"
    k = kv(f"{args} --variant skipv1 --dtype bf16")
    row(f"SkipV1Former §6.3, LLaMA-{size}, KV saving of SkipV1", "~25%",
        f"-{100 * k['saving']:.2f}% ({k['vanilla_bytes_per_token']:,} -> {k['bytes_per_token']:,} B/token bf16)",
        f"qkvlab kv {args} --variant skipv1 --dtype bf16")
    a, b = params(args)["total"], params(args + " --variant skipv1")["total"]
    row(f"SkipV1Former §6.2, LLaMA-{size}, parameter saving of SkipV1", "around 4%",
        f"-{100 * (1 - b / a):.2f}% ({a:,} -> {b:,})", f"qkvlab params {args} [--variant skipv1]")

# ResFormer (and SVFormer): SVFormer's "nearly half" of the KV cache, Table 4's sizes.
for size, flags in RESFORMER.items():
    args = f"--family llama {flags} --vocab 50277 --positions 2048"
    p = params(args)
    row(f"ResFormer Table 4, {size} model, params", size, f"{p['total']:,} ({m(p['total'])})", f"qkvlab params {args}")
    k = kv(f"{args} --variant svformer --dtype bf16")
    row(f"ResFormer §3.5, {size} model, SVFormer KV saving", "nearly half",
        f"-{100 * k['saving']:.2f}% ({k['vanilla_bytes_per_token']:,} -> {k['bytes_per_token']:,} B/token bf16)",
        f"qkvlab kv {args} --variant svformer --dtype bf16")

# Query-weight elimination Table 2: five nanoGPT configurations, total and non-embedding.
for label, flags, total, non_emb in (
        ("Baseline (smaller MLP)", "--d 768 --mlp-ratio 3.5", "117.30M", "77.88M"),
        ("Baseline (smaller d)", "--d 744", "117.92M", "79.73M"),
        ("Reduced (117M)", "--d 768 --variant q-identity", "117.30M", "77.88M"),
        ("Baseline (124M)", "--d 768", "124.37M", "84.95M"),
        ("Reduced (larger MLP)", "--d 768 --mlp-ratio 4.5 --variant q-identity", "124.37M", "84.95M")):
    args = f"{NANOGPT} {flags}"
    p = params(args)
    row(f"Query-weight elimination Table 2, {label}", f"{total} / {non_emb}",
        f"{p['total']:,} / {p['non_embedding']:,} ({m(p['total'])} / {m(p['non_embedding'])})", f"qkvlab params {args}")

print("| printed figure | printed | exact (qkvlab) | command (+ `--format json`) |")
print("|---|---|---|---|")
for source, printed, exact, command in rows:
    print(f"| {source} | {printed} | {exact} | `{command}` |")
