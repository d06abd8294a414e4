#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu, .cuh) into C++ that g++ compiles against the
emulator's cuda_runtime.h (scripts/cuda_emulation/README.md):

  kernel<<<grid, block[, shmem[, stream]]>>>(args)
      -> ::cuda_emu::launch(::cuda_emu::config(grid, block[, shmem[, stream]]), "kernel",
                            CUDA_EMU_KERNEL_KEY(kernel),
                            [&](auto&... cuda_emu_args) { kernel(cuda_emu_args...); }, args)
  extern __shared__ [__align__(n)] T name[];
      -> T* name = static_cast<T*>(::cuda_emu::dynamic_shared());
  __shared__ T name[...];            (inside a function: an indented line)
      -> static T name[...]; ::cuda_emu::note_shared(name);

cuda_runtime.h is included first, as nvcc does. Line numbers are kept (a rewrite never adds or removes a newline) and a #line
directive names the original file, so compiler errors and gdb point at it.
Comments and string literals are left alone.

usage: convert_cu.py INPUT OUTPUT
"""
import re
import sys


def code_mask(text):
    """mask[i] is True where text[i] is code (not in a comment or a string/char literal)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            mask[k] = False
        i = j
    return mask


def matching(text, start, open_char, close_char):
    """Index just past the bracket that closes text[start] (== open_char)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced {open_char} at offset {start}")


def kernel_start(text, end):
    """Start of the kernel expression ending at text[end] (just before <<<):
    identifiers, ::, and template argument lists such as reduce_kernel<K>."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    while i > 0:
        c = text[i - 1]
        if c == ">":  # a template argument list: walk back to its <
            depth = 0
            while i > 0:
                i -= 1
                if text[i] == ">":
                    depth += 1
                elif text[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        elif c.isalnum() or c in "_:":
            i -= 1
        else:
            break
    return i


def split_top_level(text):
    """Splits on commas outside (), [], {}."""
    parts, depth, current = [], 0, ""
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    parts.append(current)
    return parts


def rewrite_launches(text):
    out, pos = [], 0
    mask = code_mask(text)
    while True:
        at = text.find("<<<", pos)
        while at >= 0 and not mask[at]:
            at = text.find("<<<", at + 3)
        if at < 0:
            break
        begin = kernel_start(text, at)
        kernel = text[begin:at].strip()
        close = text.find(">>>", at + 3)
        config = text[at + 3:close]
        paren = close + 3
        while text[paren].isspace():
            paren += 1
        if text[paren] != "(":
            raise ValueError(f"no argument list after the launch of {kernel}")
        end = matching(text, paren, "(", ")")
        args = text[paren + 1:end - 1]
        if not 2 <= len(split_top_level(config)) <= 4:
            raise ValueError(f"launch of {kernel}: expected <<<grid, block[, shmem[, stream]]>>>, got <<<{config}>>>")
        call = (f'::cuda_emu::launch(::cuda_emu::config({config}), "{kernel}", CUDA_EMU_KERNEL_KEY({kernel}), '
                f'[&](auto&... cuda_emu_args) {{ {kernel}(cuda_emu_args...); }}')
        call += f", {args})" if args.strip() else ")"
        out.append(text[pos:begin])
        out.append(call)
        pos = end
    out.append(text[pos:])
    return "".join(out)


EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:(?:__align__|alignas)\s*\(\s*\w+\s*\)\s+)?([\w:<>, ]+?)\s*\b(\w+)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(r"^([ \t]+)__shared__\s+([^;=(){}]*?\w[\s*&>]*?)\b(\w+)((?:\s*\[[^\];]*\])*)\s*;",
                           re.MULTILINE)


def rewrite_shared(text):
    def extern(m):
        if not code_mask(text)[m.start()]:
            return m.group(0)
        type_, name = m.group(1).strip(), m.group(2)
        return f"{type_}* {name} = static_cast<{type_}*>(::cuda_emu::dynamic_shared());"

    text = EXTERN_SHARED.sub(extern, text)
    mask = code_mask(text)

    def static(m):
        if not mask[m.start(0) + len(m.group(1))] or "," in m.group(2):
            return m.group(0)  # a comment, or several declarators: left to the __shared__ macro
        indent, type_, name, dims = m.groups()
        return f"{indent}static {type_}{name}{dims}; ::cuda_emu::note_shared({name});"

    return STATIC_SHARED.sub(static, text)


def main():
    source, target = sys.argv[1], sys.argv[2]
    text = open(source).read()
    text = rewrite_shared(text)
    text = rewrite_launches(text)
    with open(target, "w") as f:
        # nvcc includes cuda_runtime.h in every .cu implicitly.
        f.write(f'#include <cuda_runtime.h>\n#line 1 "{source}"\n' + text)


if __name__ == "__main__":
    main()
