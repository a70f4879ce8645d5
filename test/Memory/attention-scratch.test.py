"""Checks the cuDNN attention line of --memory-report against the sizing
formula: args REPORT batch seq heads kv_heads head_dim layers."""
import re
import sys

report = open(sys.argv[1]).read()
b, s, h, hkv, d, layers = map(int, sys.argv[2:])
total = re.search(r"(\d+) \+ (\d+) \+ (\d+) = (\d+) bytes: what kiln-run allocates", report)
line = re.search(r"cuDNN attention \((\d+) calls, where it runs\): statistics and workspace "
                 r"\S+ \S+ in the plan's free space, (\d+) bytes beside it: planned peak (\d+) bytes",
                 report)
assert total and line, report
calls, beside, peak = map(int, line.groups())
workspace_bytes = int(total.group(3))
stats = b * h * s * 4
workspace = b * h * s * d * 4 + (2 * b * h * s * d * 2 if h != hkv else 0) + b * h * s * 4
assert calls == 2 * layers, calls
assert peak == int(total.group(4)) + beside, (peak, total.group(4), beside)
# Each forward's statistics are either in the arena or beside it, whole;
# the workspace is beside it only when neither the GEMM workspace nor the
# arena holds it.
outside_workspace = beside % stats if stats else 0
assert beside <= layers * stats + (workspace if workspace > workspace_bytes else 0), beside
assert outside_workspace in (0, workspace % stats), (beside, stats, workspace)
print("ok", calls, beside, peak)
