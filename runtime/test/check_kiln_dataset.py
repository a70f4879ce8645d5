#!/usr/bin/env python3
"""check_kiln_dataset.py KILN_DATASET_PY KILN_RUN: scripts/kiln_dataset.py
on small JSONL files. Each written file is decoded here from docs/data.md's
layout (not with the converter's code) and compared element by element;
bad records give one line and exit 1; prompt/completion text goes through a
Hugging Face tokenizer built on the spot (skipped without transformers);
kiln-run data-stats reads what the converter wrote."""
import json
import os
import struct
import subprocess
import sys
import tempfile

converter, kiln_run = sys.argv[1:3]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def run(*args):
    return subprocess.run([sys.executable, converter, *args], capture_output=True, text=True)


def decode(path):
    """(dtype, documents as [(ids, mask)], header dict) from the raw bytes."""
    data = open(path, "rb").read()
    assert data[:8] == b"KILNDOCS", "magic"
    (version, code, n_docs, n_tokens, counted, max_token, offsets_at, tokens_at,
     mask_at, reserved) = struct.unpack_from("<IIQQQQQQQQ", data, 8)
    width = {1: 2, 2: 4}[code]
    offsets = struct.unpack_from(f"<{n_docs + 1}Q", data, offsets_at)
    tokens = struct.unpack_from(f"<{n_tokens}{'H' if width == 2 else 'I'}", data, tokens_at)
    mask = [data[mask_at + i // 8] >> (i % 8) & 1 for i in range(n_tokens)]
    header = dict(version=version, dtype=code, documents=n_docs, tokens=n_tokens,
                  counted=counted, max_token=max_token, size=len(data),
                  layout=(offsets_at, tokens_at, mask_at, reserved))
    docs = [(list(tokens[offsets[d]:offsets[d + 1]]), mask[offsets[d]:offsets[d + 1]])
            for d in range(n_docs)]
    return header, docs


def write(directory, name, lines):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


with tempfile.TemporaryDirectory() as tmp:
    source = write(tmp, "ok.jsonl", [
        json.dumps({"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8]}),
        "",  # blank lines are skipped
        json.dumps({"input_ids": [9, 10, 11]}),
        json.dumps({"input_ids": [1] * 9, "labels": [-100] * 3 + [1] * 6}),
    ])
    out = os.path.join(tmp, "ok.kdocs")
    r = run(source, "-o", out, "--vocab-size", "12")
    check(r.returncode == 0, f"converter: {r.stderr}")
    check(r.stdout.strip() == f"kiln_dataset: wrote {out}: 3 documents, 16 tokens "
          "(11 with loss), uint16, largest id 11", f"summary: {r.stdout!r}")
    header, docs = decode(out)
    check(header["version"] == 1 and header["dtype"] == 1, "version/dtype")
    check((header["documents"], header["tokens"], header["counted"], header["max_token"]) ==
          (3, 16, 11, 11), f"counts {header}")
    # 80 + 8*4 offsets = 112; 16 uint16 tokens to 144; 2 mask bytes.
    check(header["layout"] == (80, 112, 144, 0) and header["size"] == 146, f"layout {header}")
    check(docs == [([5, 6, 7, 8], [0, 0, 1, 1]), ([9, 10, 11], [1, 1, 1]),
                   ([1] * 9, [0] * 3 + [1] * 6)], f"documents {docs}")

    # uint32 when an id does not fit 16 bits.
    wide = write(tmp, "wide.jsonl", [json.dumps({"input_ids": [70000, 3]})])
    r = run(wide, "-o", os.path.join(tmp, "wide.kdocs"))
    header, docs = decode(os.path.join(tmp, "wide.kdocs"))
    check(r.returncode == 0 and header["dtype"] == 2 and docs == [([70000, 3], [1, 1])],
          f"uint32: {r.stderr} {header} {docs}")
    r = run(wide, "-o", os.path.join(tmp, "w16.kdocs"), "--dtype", "uint16")
    check(r.returncode == 1 and r.stderr.strip() ==
          "kiln_dataset: error: token 70000 does not fit --dtype uint16", f"dtype: {r.stderr!r}")

    # Bad records: one line naming the file, line and position; no output.
    bad = {
        json.dumps({"input_ids": [1, 2], "labels": [1, 3]}):
            "labels[1] = 3 is neither -100 nor input_ids[1] (2): labels mark which tokens "
            "carry loss",
        json.dumps({"input_ids": [1, 2], "labels": [1]}):
            "\"labels\" must be a list as long as \"input_ids\" (2)",
        json.dumps({"input_ids": [1, 300, 2]}):
            "token 300 at position 1 is outside the vocabulary (256 ids)",
        json.dumps({"input_ids": [1, -4]}):
            "input_ids[1] = -4 is not a token id (an integer >= 0)",
        json.dumps({"input_ids": []}): "\"input_ids\" must be a non-empty list of token ids",
        json.dumps({"prompt": "a", "completion": "b"}):
            "prompt/completion text needs --tokenizer",
        json.dumps({"text": "a"}):
            "expected \"input_ids\" (and \"labels\") or \"prompt\" and \"completion\"",
        "{not json": "not JSON (Expecting property name enclosed in double quotes at column 2)",
    }
    for i, (line, message) in enumerate(bad.items()):
        path = write(tmp, f"bad{i}.jsonl", [json.dumps({"input_ids": [1]}), line])
        target = os.path.join(tmp, f"bad{i}.kdocs")
        r = run(path, "-o", target, "--vocab-size", "256")
        check(r.returncode == 1 and r.stderr.strip() == f"kiln_dataset: error: {path}:2: {message}",
              f"bad record {line}: {r.returncode} {r.stderr!r}")
        check(not os.path.exists(target), f"{target} written despite the error")
    empty = write(tmp, "empty.jsonl", [""])
    r = run(empty, "-o", os.path.join(tmp, "e.kdocs"))
    check(r.stderr.strip() == f"kiln_dataset: error: {empty}: no documents", f"empty: {r.stderr!r}")

    # kiln-run reads the converter's file.
    stats = subprocess.run([kiln_run, "data-stats", out, "--seq", "8"], capture_output=True,
                           text=True)
    check(stats.returncode == 0 and f"data {out}: 3 documents, 16 tokens (11 with loss, 68.8%), "
          "uint16, largest id 11" in stats.stdout, f"data-stats: {stats.stdout} {stats.stderr}")

    # prompt/completion through a Hugging Face tokenizer (a word-level one
    # made here): the prompt carries no loss, the completion and EOS do.
    try:
        import tokenizers
        import transformers
    except ImportError:
        print("SKIP: prompt/completion (transformers not installed)")
    else:
        vocab = {"[UNK]": 0, "</s>": 1, "hello": 2, "world": 3, "foo": 4, "bar": 5}
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>",
                                                    unk_token="[UNK]")
        fast.save_pretrained(os.path.join(tmp, "tok"))
        text = write(tmp, "text.jsonl", [json.dumps({"prompt": "hello world",
                                                     "completion": "foo bar"})])
        r = run(text, "-o", os.path.join(tmp, "text.kdocs"), "--tokenizer",
                os.path.join(tmp, "tok"))
        check(r.returncode == 0, f"tokenizer run: {r.stderr}")
        if r.returncode == 0:
            _, docs = decode(os.path.join(tmp, "text.kdocs"))
            check(docs == [([2, 3, 4, 5, 1], [0, 0, 1, 1, 1])], f"prompt/completion {docs}")
        # The tokenizer's size is the default vocabulary.
        ids = write(tmp, "ids.jsonl", [json.dumps({"input_ids": [2, 6]})])
        r = run(ids, "-o", os.path.join(tmp, "ids.kdocs"), "--tokenizer", os.path.join(tmp, "tok"))
        check(r.returncode == 1 and r.stderr.strip().endswith(
            f"{ids}:1: token 6 at position 1 is outside the vocabulary (6 ids)"),
            f"tokenizer vocabulary: {r.stderr!r}")

print("FAIL" if failures else "OK", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
