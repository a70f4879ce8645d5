# Sourced by GPU scripts: points KILN_CUDNN_LIBRARY at the libcudnn.so.9 that
# PyTorch's nvidia-cudnn package installs, unless it is set or the loader
# finds one already.
if [ -z "${KILN_CUDNN_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
  cudnn_dir=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [ -n "$cudnn_dir" ] && [ -f "$cudnn_dir/lib/libcudnn.so.9" ]; then
    export KILN_CUDNN_LIBRARY=$cudnn_dir/lib/libcudnn.so.9
  fi
fi
