#!/usr/bin/env bash
# Regenerates dataset-corpus/, the seeds of kiln-fuzz-dataset: datasets
# written by scripts/kiln_dataset.py (ok-*: accepted) and damaged copies
# (bad-*: refused on open). Small files, committed; the fuzzer grows them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$here/dataset-corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out" && mkdir -p "$out"
convert() { python3 "$repo/scripts/kiln_dataset.py" "$1" -o "$2" >/dev/null; }
cat >"$work/prompts.jsonl" <<'JSONL'
{"input_ids": [1, 2, 3, 4, 5, 6], "labels": [-100, -100, 3, 4, 5, 6]}
{"input_ids": [7, 8, 9, 10, 11], "labels": [-100, -100, -100, 10, 11]}
{"input_ids": [12, 13, 14, 15]}
{"input_ids": [16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35]}
JSONL
convert "$work/prompts.jsonl" "$out/ok-prompts.kdocs"
printf '%s\n' '{"input_ids": [5]}' '{"input_ids": [6, 7]}' '{"input_ids": [8]}' >"$work/short.jsonl"
convert "$work/short.jsonl" "$out/ok-short-documents.kdocs"
printf '%s\n' '{"input_ids": [70000, 3, 999, 4]}' '{"input_ids": [1, 2, 3]}' >"$work/wide.jsonl"
convert "$work/wide.jsonl" "$out/ok-uint32-past-vocabulary.kdocs"
python3 - "$out" <<'PY'
import pathlib, struct, sys
out = pathlib.Path(sys.argv[1])
good = (out / "ok-prompts.kdocs").read_bytes()
def patch(name, at, fmt, value):
    data = bytearray(good)
    struct.pack_into(fmt, data, at, value)
    (out / name).write_bytes(bytes(data))
(out / "bad-truncated.kdocs").write_bytes(good[:-2])
(out / "bad-header-only.kdocs").write_bytes(good[:40])
patch("bad-dtype.kdocs", 12, "<I", 3)
patch("bad-version.kdocs", 8, "<I", 2)
patch("bad-offsets-decreasing.kdocs", 80 + 16, "<Q", 2)
patch("bad-offsets-end.kdocs", 80 + 32, "<Q", 1 << 40)
patch("bad-documents-huge.kdocs", 16, "<Q", (1 << 64) - 1)
patch("bad-max-token.kdocs", 40, "<Q", 1 << 20)
PY
ls "$out"
