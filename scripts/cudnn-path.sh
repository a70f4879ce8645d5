# Sourced by GPU scripts: points KILN_CUDNN_LIBRARY at the newest
# libcudnn.so.9 of two places, unless it is set: the one the loader finds
# (ldconfig) and the one PyTorch's nvidia-cudnn package installs (what
# PyTorch itself runs, so the bench's peers and Kiln use the same cuDNN).
# On the H200 machine the loader's is 9.14 and PyTorch's 9.19: 9.19's
# attention forward is 2% faster in the 1b step (docs/benchmarks.md,
# "Sixteenth session").
if [ -z "${KILN_CUDNN_LIBRARY:-}" ]; then
  cudnn_choice=$(python3 - 2>/dev/null <<'PY'
import ctypes, subprocess
paths = []
try:
    import nvidia.cudnn as m
    paths.append(list(m.__path__)[0] + "/lib/libcudnn.so.9")
except Exception:
    pass
try:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    paths += [l.split("=>")[-1].strip() for l in out.splitlines() if "libcudnn.so.9 " in l]
except Exception:
    pass
best, best_version = "", -1
for p in paths:
    try:
        version = ctypes.CDLL(p).cudnnGetVersion()
    except Exception:
        continue
    if version > best_version:
        best, best_version = p, version
print(best)
PY
  ) || cudnn_choice=""
  # Its sub-libraries (libcudnn_graph, engines) beside it come first too.
  if [ -n "$cudnn_choice" ]; then
    export KILN_CUDNN_LIBRARY=$cudnn_choice
    export LD_LIBRARY_PATH=$(dirname "$cudnn_choice")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  unset cudnn_choice
fi
