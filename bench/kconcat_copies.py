#!/usr/bin/env python3
"""Launches, GEMMs and concatenation copies of a compiled step.

Reads `kiln compile ... --emit=kernel-mlir` of a train step and counts, at
the given sizes, the kernel launches, the GEMMs and the copy kernels that
K-concatenation leaves (docs/design/lora-k-concat.md): whole concatenation
kernels of frozen weights (static 2-D, W with the adapter's block) and of
activations (`[x | t]`, `[dy | dT]`), the `*_columns` copies of one input
into an in-place concatenation, and the `*_adapter_block` kernels that
write an adapter's block into a padded frozen weight. Bytes are what each
launch reads and writes (its ins and outs).

    python3 bench/kconcat_copies.py STEP.kmlir --sizes batch=4,seq=2048
"""

import argparse
import re
import sys
from collections import defaultdict

ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i64": 8, "i32": 4, "i8": 1, "i1": 1,
                 "ui8": 1}
TENSOR = re.compile(r"tensor<([^,>]*?)(?:, #kiln\.dims<\[([^\]]*)\]>)?>")


def tensor_bytes(text, sizes):
    """Bytes of a `tensor<AxBxT, #kiln.dims<[...]>>`: `?` dims from the dims list in order."""
    m = TENSOR.search(text)
    if not m:
        raise ValueError(f"not a tensor type: {text}")
    parts = m.group(1).split("x")
    dtype = parts[-1]
    symbolic = [d.strip() for d in m.group(2).split(",")] if m.group(2) else []
    count = 1
    for d in parts[:-1]:
        if d == "?":
            count *= int(eval(symbolic.pop(0), {}, dict(sizes)))
        else:
            count *= int(d)
    return count * ELEMENT_BYTES[dtype]


def split_types(text):
    """The buffer types of an ins(...)/outs(...) type list."""
    return re.findall(r"!kiln_kernel\.buffer<tensor<[^>]*(?:>[^>]*)?>>", text)


def kernel_classes(lines):
    """Per kernel symbol: 'concat' (a concatenation, with casts, transposes
    or scales of its inputs), 'columns', 'adapter block' or None."""
    classes, name, body = {}, None, []
    for line in lines:
        m = re.match(r"\s*kiln_kernel\.kernel @(\S+)", line)
        if m:
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        if re.match(r"\s*kiln_kernel\.yield", line):
            ops = [l for l in body if "= kiln." in l]
            kind = None
            if name.endswith("_columns"):
                kind = "columns"
            elif name.endswith("_adapter_block"):
                kind = "adapter block"
            elif any("kiln.concat" in l for l in ops):
                # A frozen weight's is told apart at its launch (it reads a
                # kiln_kernel.weight); an activation's only concatenates
                # (casts, transposes, scales of its inputs at most).
                only = ops and "kiln.concat" in ops[-1] and all(
                    re.search(r"kiln\.(concat|transpose|cast|mul)\b", l) for l in ops)
                kind = "concat" if only else "other concat"
            classes[name] = kind
            name = None
            continue
        body.append(line)
    return classes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kmlir")
    p.add_argument("--sizes", default="batch=4,seq=2048")
    args = p.parse_args(argv)
    sizes = dict((k, int(v)) for k, v in (kv.split("=") for kv in args.sizes.split(",")))
    lines = open(args.kmlir).read().splitlines()
    classes = kernel_classes(lines)
    weights = set()
    for line in lines:
        m = re.match(r"\s*(%\S+) = kiln_kernel\.weight ", line)
        if m:
            weights.add(m.group(1))
    launches, gemms, strided = 0, 0, 0
    copies = defaultdict(lambda: [0, 0])
    for line in lines:
        if re.match(r"\s*kiln_kernel\.gemm ", line):
            gemms += 1
            strided += "lds =" in line
            continue
        m = re.match(r"\s*kiln_kernel\.launch @(\S+) ins\((.*?)\) outs\((.*?)\) items", line)
        if not m:
            continue
        launches += 1
        kind = classes.get(m.group(1))
        if kind is None:
            continue
        if kind in ("concat", "other concat"):
            names = m.group(2).split(" : ", 1)[0].replace(" ", "").split(",")
            if weights.intersection(names):
                kind = "weight concat"
            elif kind == "concat":
                kind = "activation concat"
            else:
                continue
        total = 0
        for group in (m.group(2), m.group(3)):
            types = group.split(" : ", 1)[1] if " : " in group else ""
            total += sum(tensor_bytes(t, sizes) for t in split_types(types))
        copies[kind][0] += 1
        copies[kind][1] += total
    print(f"launches {launches}")
    print(f"gemms {gemms} ({strided} with ld)")
    for kind in ("weight concat", "activation concat", "columns", "adapter block"):
        n, b = copies[kind]
        print(f"{kind}: {n} launches, {b / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
