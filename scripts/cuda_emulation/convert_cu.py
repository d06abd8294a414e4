#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu, .cuh) into C++ that g++ compiles against the
emulator's cuda_runtime.h (scripts/cuda_emulation/README.md):

  kernel<<<grid, block[, shmem[, stream]]>>>(args)
      -> ::cuda_emu::launch(::cuda_emu::config(grid, block[, shmem[, stream]]), "kernel",
                            CUDA_EMU_KERNEL_KEY(kernel),
                            [&](auto&... cuda_emu_args) { kernel(cuda_emu_args...); }, args)
  extern __shared__ [__align__(n)] T name[];
      -> T* name = static_cast<T*>(::cuda_emu::dynamic_shared());
  [volatile] __shared__ T a[...], *p, s;   (inside a function, anywhere on a line)
      -> static T a[...]; ::cuda_emu::note_shared(a); static T *p; ::cuda_emu::note_shared(p); ...
         (each declarator poisoned before every block and counted against the 48 KiB limit)

A __shared__ it cannot rewrite faithfully (outside a function, with an initializer, in a macro
or an expression, a declarator it cannot read) is refused: "convert_cu.py: FILE:LINE: why" on
stderr, exit status 1, nothing written.

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


def split_top_level(text, angles=False):
    """Splits on commas outside (), [], {} and, with angles, outside <> at depth 0."""
    parts, depth, angle, current = [], 0, 0, ""
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif angles and depth == 0 and c in "<>":
            angle += 1 if c == "<" else -1
        if c == "," and depth == 0 and angle == 0:
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


class ConversionError(ValueError):
    """A construct the converter cannot rewrite faithfully, at a line of the source."""

    def __init__(self, line, message):
        super().__init__(f"{line}: {message}")


EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:(?:__align__|alignas)\s*\(\s*\w+\s*\)\s+)?([\w:<>, ]+?)\s*\b(\w+)\s*\[\s*\]\s*$")
# Words that may stand before __shared__ in a declaration (they join its type).
SHARED_PREFIX = re.compile(r"(?<!\w)(?:(?:extern|volatile|static|__align__\s*\(\s*\w+\s*\)|alignas\s*\(\s*\w+\s*\))\s+)*$")
ALIGNMENT = re.compile(r"(?:__align__|alignas)\s*\(\s*\w+\s*\)\s*")
# One declarator: pointers, the name, array dimensions (the first one's text also holds the type).
DECLARATOR = re.compile(r"[\s*&]*\b(?P<name>[A-Za-z_]\w*)(?P<dims>(?:\s*\[[^\[\]]*\])*)\s*$")


def line_of(text, position):
    return text.count("\n", 0, position) + 1


def in_function(text, mask, position):
    """Whether position lies inside a function body (a brace that opens no namespace, class or
    extern "C" block), which is where a __shared__ variable becomes a function-local static."""
    code = "".join(c if m else " " for c, m in zip(text[:position], mask))  # "C" of extern "C" blanked
    kinds, boundary = [], 0
    for i in range(position):
        if not mask[i] or text[i] not in ";{}":
            continue
        if text[i] == "{":
            head = re.sub(r"^[ \t]*#.*$", "", code[boundary:i], flags=re.MULTILINE)
            scope = re.search(r"^\s*(?:inline\s+)?namespace\b|^\s*extern\s*$|\b(?:struct|class|union|enum)\b[^()]*$", head)
            kinds.append("scope" if scope else "block")
        elif text[i] == "}" and kinds:
            kinds.pop()
        boundary = i + 1
    return "block" in kinds


def statement_start(text, mask, position):
    """Where the declaration whose __shared__ is at position begins (its prefix words included),
    or None when what precedes it is not the end of a statement, a block's brace, a label or a
    preprocessor line (a macro's body, an expression, ...)."""
    line_start = text.rfind("\n", 0, position) + 1
    prefix = SHARED_PREFIX.search(text, line_start, position)
    start = prefix.start() if prefix else position
    i = start - 1
    while i >= 0 and (text[i].isspace() or not mask[i]):
        i -= 1
    if i < 0 or text[i] in ";{}" or (text[i] == ":" and (i == 0 or text[i - 1] != ":")):
        return start
    before = text[text.rfind("\n", 0, i) + 1:i + 1]
    if before.lstrip().startswith("#") and not before.endswith("\\") and "\n" in text[i:start]:
        return start
    return None


def static_shared(declaration, line):
    """`[prefix] __shared__ T a[n], *b, c;` -> a static and a note_shared call for each declarator."""
    prefix, rest = declaration.split("__shared__", 1)
    prefix = re.sub(r"\bstatic\s+", "", prefix)
    if "=" in rest or "(" in re.sub(r"\[[^\[\]]*\]", "", rest).replace("__align__(", "").replace("alignas(", ""):
        raise ConversionError(line, "a __shared__ declaration with an initializer or a function declarator "
                                    "(CUDA allows neither)")
    parts = split_top_level(rest, angles=True)
    first = DECLARATOR.search(parts[0])
    type_ = parts[0][:first.start()] if first else ""
    if not first or not re.search(r"\w", type_):
        raise ConversionError(line, f"cannot read the type and name of '{declaration.strip()}'")
    alignment = "".join(a.strip() + " " for a in ALIGNMENT.findall(prefix + type_))
    prefix, type_ = ALIGNMENT.sub("", prefix), ALIGNMENT.sub("", type_)
    one_line_type = " ".join((prefix + type_).split())
    out = []
    for k, part in enumerate(parts):
        match = DECLARATOR.fullmatch(part) if k else first
        if not match:
            raise ConversionError(line, f"cannot read the declarator '{part.strip()}' of a __shared__ declaration")
        if k == 0:
            out.append(f"{alignment}{prefix}static{type_}{part[first.start():]};")
        else:
            out.append(f" {alignment}static {one_line_type} {part};")
        out.append(f" ::cuda_emu::note_shared({match.group('name')});")
    return "".join(out)


def rewrite_shared(text, name):
    """Rewrites every __shared__ declaration (see the module's comment) or refuses it, naming
    name:line: one it cannot convert faithfully must not fall back to a plain static, which would
    be neither poisoned nor counted against the 48 KiB limit."""
    mask = code_mask(text)
    out, pos = [], 0
    for m in re.finditer(r"\b__shared__\b", text):
        if not mask[m.start()]:
            continue
        where = f"{name}:{line_of(text, m.start())}"
        start = statement_start(text, mask, m.start())
        end = text.find(";", m.end())
        while end >= 0 and not mask[end]:
            end = text.find(";", end + 1)
        if start is None or end < 0 or start < pos:
            raise ConversionError(where, "a __shared__ that does not begin a declaration statement "
                                         "(in a macro or an expression?) is not converted")
        declaration = text[start:end]
        extern = EXTERN_SHARED.fullmatch(declaration)
        if not in_function(text, mask, start):
            raise ConversionError(where, "a __shared__ variable outside a function is not emulated")
        if extern:
            type_, var = extern.group(1).strip(), extern.group(2)
            replacement = f"{type_}* {var} = static_cast<{type_}*>(::cuda_emu::dynamic_shared())"
            replacement += "\n" * declaration.count("\n")
        elif re.match(r"\s*extern\b", declaration):
            raise ConversionError(where, f"cannot read the extern __shared__ declaration '{declaration.strip()}'")
        else:
            replacement = static_shared(declaration, where)[:-1]  # its last ';' is the source's
        out.append(text[pos:start])
        out.append(replacement)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def main():
    source, target = sys.argv[1], sys.argv[2]
    text = open(source).read()
    try:
        text = rewrite_launches(rewrite_shared(text, source))
    except ValueError as e:
        sys.exit(f"convert_cu.py: {e}" if isinstance(e, ConversionError) else f"convert_cu.py: {source}: {e}")
    with open(target, "w") as f:
        # nvcc includes cuda_runtime.h in every .cu implicitly.
        f.write(f'#include <cuda_runtime.h>\n#line 1 "{source}"\n' + text)


if __name__ == "__main__":
    main()
