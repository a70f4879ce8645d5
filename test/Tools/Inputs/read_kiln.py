"""Prints a .kiln artifact's sections and JSON payloads, reading the container
independently of the C++ library (docs/artifact.md), and fails on any
checksum or layout mismatch. Usage: read_kiln.py FILE"""

import json
import struct
import sys


def _table():
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


TABLE = _table()


def crc32c(data, crc=0):
    crc = ~crc & 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ TABLE[(crc ^ byte) & 0xFF]
    return ~crc & 0xFFFFFFFF


data = open(sys.argv[1], "rb").read()
magic, version, flags, size, count, table_size, table_crc, header_crc = struct.unpack_from(
    "<8sIIQIIII", data, 0)
assert magic == b"KILNART\0", magic
assert header_crc == crc32c(data[:36]), "header crc"
assert size == len(data), "size"
assert data[-4:] == b"KEND", "trailer"
assert struct.unpack_from("<I", data, size - 8)[0] == crc32c(data[:size - 8]), "file crc"
assert table_crc == crc32c(data[40:40 + table_size]), "table crc"
print(f"version {version} flags {flags} sections {count}")
sections = {}
pos = 40
for _ in range(count):
    offset, length, crc, name_length, _reserved = struct.unpack_from("<QQIHH", data, pos)
    name = data[pos + 24:pos + 24 + name_length].decode()
    pos += 24 + name_length
    payload = data[offset:offset + length]
    assert offset % 64 == 0 and crc == crc32c(payload), name
    print(f"section {name}")
    if name in ("meta", "guards", "params"):
        print(json.dumps(json.loads(payload), sort_keys=True))
    if name in ("step", "init") or name.startswith("step/"):
        # A step program (a shape bucket's: step/<function>): its shape, not
        # every op (docs/artifact.md).
        program = json.loads(payload)
        kinds = {}
        for op in program["ops"]:
            kinds[op["op"]] = kinds.get(op["op"], 0) + 1
        roles = {}
        for binding in program["args"] + program["results"]:
            roles[binding["role"]] = roles.get(binding["role"], 0) + 1
        print(f"{program['format']} v{program['version']} @{program['function']} "
              f"buffers {len(program['buffers'])} args {len(program['args'])} "
              f"results {len(program['results'])}")
        print("ops " + json.dumps(kinds, sort_keys=True))
        print("roles " + json.dumps(roles, sort_keys=True))
        for op in program["ops"]:
            if op["op"] in ("launch", "gemm"):
                print("first " + json.dumps(op, sort_keys=True))
                break
        for op in program["ops"]:
            if op["op"] == "gemm":
                print("gemm " + json.dumps(op, sort_keys=True))
                break
        if "--launches" in sys.argv[2:]:
            # Each kernel's first launch: its shape and launch variants.
            seen = set()
            for op in program["ops"]:
                if op["op"] == "launch" and op["kernel"] not in seen:
                    seen.add(op["kernel"])
                    shapes = " ".join(f"{v['per']}/{v['block']}" for v in op.get("variants", []))
                    print(f"launch {op['kernel']} {op['per']}/{op['block']} variants [{shapes}]")
    sections[name] = payload


def evaluate(expr, values):
    """A size expression (docs/artifact.md) at values: Python reads it as is."""
    return eval(expr, {"__builtins__": {}}, dict(values))


if "memory_plan" in sections:
    # The chain (docs/artifact.md, "The memory plan"), evaluated here
    # independently and checked against the step program's liveness.
    plan = json.loads(sections["memory_plan"])
    at = plan["planned_at"]
    align = plan["alignment"]
    print(f"{plan['format']} v{plan['version']} alignment {align} planned_at "
          f"{json.dumps(at, sort_keys=True)} buffers {len(plan['buffers'])}")
    print(f"arena_bytes {plan['arena_bytes']} persistent_bytes {plan['persistent_bytes']} "
          f"workspace_bytes {plan['workspace_bytes']}")
    up = lambda n: (max(n, 1) + align - 1) // align * align
    offset, end = {}, {}
    for b in plan["buffers"]:
        offset[b["buffer"]] = 0 if b["base"] < 0 else end[b["base"]]
        end[b["buffer"]] = offset[b["buffer"]] + up(evaluate(b["size"], at))
    assert max(end.values(), default=0) == plan["arena_bytes"], "chain arena size"
    step = json.loads(sections["step"])
    elements = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U64": 8, "I32": 4,
                "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1}
    root = list(range(len(step["buffers"])))
    first, last = {}, {}
    for i, op in enumerate(step["ops"]):
        used = [op.get(k) for k in ("source", "target", "a", "b", "bias", "c")] + op.get("args", [])
        if op["op"] == "linear_cross_entropy":  # every buffer it names, -1: none
            used += [op[k] for k in ("hidden", "weight", "labels", "grad", "loss", "hidden_grad",
                                     "weight_grad", "chunk", "stats", "weight_accum") if op[k] >= 0]
        if op["op"] == "alloc":
            first[op["result"]] = last[op["result"]] = i
        if op["op"] == "view":
            root[op["result"]] = root[op["source"]]
        for u in used:
            if u is not None:
                last[root[u]] = max(last.get(root[u], 0), i)
    for r in step["results"]:
        last[root[r["buffer"]]] = len(step["ops"])
    assert set(first) == set(offset), "memory_plan buffers are the step's allocs"
    size = {}
    for b, info in enumerate(step["buffers"]):
        n = elements[info["dtype"]]
        for d in info["shape"]:
            n *= evaluate(d, at)
        size[b] = max(n, 1)
    spans = sorted(first)
    for i, x in enumerate(spans):
        for y in spans[i + 1:]:
            if first[y] <= last[x] and first[x] <= last[y]:
                assert not (offset[x] < offset[y] + size[y] and offset[y] < offset[x] + size[x]), \
                    f"buffers {x} and {y} overlap"
    print("memory_plan chain checked: no buffers live at once overlap")
