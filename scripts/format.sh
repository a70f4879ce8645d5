#!/usr/bin/env bash
# Formats Kiln's C++ (lib/ include/ tools/ runtime/ test/Unit) in place with
# .clang-format, or with --check lists the files it would change and exits 1
# if there are any. clang-format 14 (Debian: /usr/bin/clang-format); set
# CLANG_FORMAT to use another.
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format}
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
if ! command -v "$clang_format" >/dev/null; then
  echo "format.sh: $clang_format not found (apt-get install clang-format)" >&2
  exit 2
fi
# Tracked and new (not ignored) C++ sources only: nothing under build trees.
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
  'lib/*.cpp' 'lib/*.h' 'include/*.h' 'tools/*.cpp' 'tools/*.h' \
  'runtime/*.cpp' 'runtime/*.h' 'test/Unit/*.cpp' 'test/Unit/*.h' |
  while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ "$check" = 1 ]; then
  changed=0
  for f in "${files[@]}"; do
    if ! "$clang_format" "$f" | cmp -s - "$f"; then
      echo "$f"
      changed=1
    fi
  done
  exit "$changed"
fi
"$clang_format" -i "${files[@]}"
