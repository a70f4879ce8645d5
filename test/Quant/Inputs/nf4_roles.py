"""Prints the "nf4" roles of a .kiln artifact's step program, one line per
dequantized weight, and checks them against the program itself, independently
of the C++ decoder: the codes and absmax are weights named <w>.nf4_codes and
<w>.nf4_absmax (or the double-quantized triple), the weight buffer has the
[rows, cols] shape, every reader is a GEMM that reads it as A or B, and no
other op reads it. Usage: nf4_roles.py FILE"""

import json
import struct
import sys

data = open(sys.argv[1], "rb").read()
_, _, _, _, count, _, _, _ = struct.unpack_from("<8sIIQIIII", data, 0)
pos, step = 40, None
for _ in range(count):
    offset, length, _, name_length, _ = struct.unpack_from("<QQIHH", data, pos)
    name = data[pos + 24:pos + 24 + name_length].decode()
    pos += 24 + name_length
    if name == "step":
        step = json.loads(data[offset:offset + length])
program = step
ops, buffers = program["ops"], program["buffers"]
names = {}
for binding in program["args"]:
    names[binding["buffer"]] = binding.get("name", "")
for op in ops:
    if op["op"] == "weight":
        names[op["result"]] = op["name"]


def readers_of(buffer):
    found = []
    for i, op in enumerate(ops):
        reads = op.get("args", []) + [op.get(k) for k in ("a", "b", "c", "bias", "source",
                                                            "weight", "hidden")]
        if buffer in reads:
            found.append(i)
    return found


marked = skippable = 0
for index, op in enumerate(ops):
    if "nf4" not in op:
        continue
    roles = op["nf4"]
    marked += 1
    skippable += roles["exclusive"]
    for w in roles["weights"]:
        weight = w["weight"]
        shape = buffers[weight]["shape"]
        assert shape == [str(w["rows"]), str(w["cols"])], (shape, w)
        assert weight in op["args"] and w["codes"] in op["args"]
        codes = names[w["codes"]]
        assert codes.endswith(".nf4_codes"), codes
        base = codes[:-len(".nf4_codes")]
        if "absmax" in w:
            assert names[w["absmax"]] == base + ".nf4_absmax"
            quant = "absmax"
        else:
            for key, suffix in (("absmax_codes", "_codes"), ("absmax_scale", "_scale"),
                                ("absmax_offset", "_offset")):
                assert names[w[key]] == base + ".nf4_absmax" + suffix, (names[w[key]], key)
            quant = "double-quant absmax_block %d" % w["absmax_block"]
        # Every op but the launch that touches the weight is a listed GEMM
        # reading it as A or B.
        others = [i for i in readers_of(weight) if i != index]
        assert others == w["readers"], (others, w["readers"])
        gemms = []
        for r in w["readers"]:
            g = ops[r]
            assert g["op"] == "gemm" and weight in (g["a"], g["b"]) and g["c"] != weight
            side = "b" if g["b"] == weight else "a"
            gemms.append("%s(%s,trans_b=%s,m=%s,n=%s,k=%s)" % (
                r > index and "gemm" or "?", side, str(g["trans_b"]).lower(), g["m"], g["n"],
                g["k"]))
        print("nf4 %s [%d, %d] block %d %s exclusive %s readers %s" % (
            base, w["rows"], w["cols"], w["block"], quant, str(roles["exclusive"]).lower(),
            " ".join(gemms)))
print("nf4 launches %d, exclusive %d" % (marked, skippable))
