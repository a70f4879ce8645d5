"""Prints the attention objects of a .kiln artifact's step program: the
launch, its roles, and the kinds of the ops it replaces (attention-roles.test)."""
import json
import sys

data = open(sys.argv[1], "rb").read()
# The step section is the JSON object with "format": "kiln-step-program"
# whose function is main (docs/artifact.md); find it by its start.
start = data.find(b'{"format":"kiln-step-program"')
depth, end = 0, start
for end in range(start, len(data)):
    c = data[end:end + 1]
    if c == b"{":
        depth += 1
    elif c == b"}":
        depth -= 1
        if depth == 0:
            break
program = json.loads(data[start:end + 1])
ops = program["ops"]
forward_outputs, pairs = set(), 0
for op in ops:
    a = op.get("attention")
    if not a:
        continue
    roles = [r for r in ("q", "k", "v", "o", "do", "dq", "dk", "dv") if r in a]
    kinds = " ".join(ops[i]["op"] for i in sorted(a["replaces"]))
    line = (f"launch {op['kernel']} {a['direction']}{' causal' if a['causal'] else ''}"
            f"{' masked' if a.get('masked') else ''} "
            f"scale {a['scale']:g} roles {' '.join(roles)} replaces {len(a['replaces'])}"
            + (f" ({kinds})" if kinds else "")
            + (f" seq_major {' '.join(a['seq_major'])}" if "seq_major" in a else ""))
    if a["direction"] == "backward":
        # Another implementation writes dk/dv at this launch: their memory
        # must be live from here on.
        here = ops.index(op)
        allocated = {o["result"]: i for i, o in enumerate(ops) if o["op"] == "alloc"}
        early = all(allocated.get(a[r], here + 1) < here for r in ("dq", "dk", "dv"))
        line += " outputs allocated before it" if early else " outputs allocated AFTER it"
    print(line)
    if a["direction"] == "forward":
        forward_outputs.add(a["o"])
    elif a["o"] in forward_outputs:
        pairs += 1
print(f"forward/backward pairs by o: {pairs}")
print(f"program version {program['version']}")
