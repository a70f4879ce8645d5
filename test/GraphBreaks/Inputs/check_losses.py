#!/usr/bin/env python3
"""Compares `step K: loss L` lines (stdin) with expected losses (one per
line in FILE) within 1e-5 relative. usage: check_losses.py FILE < log"""
import re
import sys

expected = [float(l) for l in open(sys.argv[1]) if l.strip()]
got = [float(m.group(1)) for m in re.finditer(r"step \d+: loss (\S+)", sys.stdin.read())]
ok = len(got) == len(expected) and all(
    abs(g - e) <= 1e-5 * abs(e) for g, e in zip(got, expected))
print(("OK" if ok else "MISMATCH") + f" losses {got} vs reference {expected}")
sys.exit(0 if ok else 1)
