# Sourced by GPU scripts: points KILN_NCCL_LIBRARY at the libnccl.so.2 that
# PyTorch's nvidia-nccl package installs (site-packages/nvidia/nccl/lib),
# unless it is set or the loader finds one already.
if [ -z "${KILN_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  nccl_dir=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/lib/libnccl.so.2" ]; then
    export KILN_NCCL_LIBRARY=$nccl_dir/lib/libnccl.so.2
  fi
fi
