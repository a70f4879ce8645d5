#!/usr/bin/env python3
"""Prints a --train regex matching exactly the ONNX initializers that hold
the parameters PyTorch trained, from a fixture's meta.json."""
import json
import re
import sys

meta = json.load(open(sys.argv[1]))
names = sorted(p["initializer"] for p in meta["params"].values())
print("^(" + "|".join(re.escape(n) for n in names) + ")$")
