#!/usr/bin/env python3
"""Writes a Kiln fine-tuning dataset (docs/data.md) from JSONL.

  scripts/kiln_dataset.py INPUT.jsonl -o OUT.kdocs [--vocab-size N]
                          [--tokenizer NAME_OR_DIR] [--no-eos]
                          [--dtype auto|uint16|uint32]

Each line of INPUT is one document, either

  {"input_ids": [...], "labels": [...]}   token ids; labels as Hugging Face
                                          writes them: -100 (no loss) or the
                                          token itself. Without "labels"
                                          every token carries loss.
  {"prompt": "...", "completion": "..."}  text, tokenized by --tokenizer (a
                                          Hugging Face tokenizer; needs
                                          transformers): the prompt with the
                                          tokenizer's special tokens, then
                                          the completion and EOS; only the
                                          completion (and EOS) carry loss.

A token id at or above --vocab-size (default: the tokenizer's size, if
any) is rejected with its line and position, as is anything else that is
not a document: one line, exit 1. OUT is replaced atomically. kiln-run
train --data OUT.kdocs reads it memory-mapped (--pack packs documents);
kiln-run data-stats OUT.kdocs --seq S reports the padding waste.
Needs only the standard library (and transformers for text).
"""
import argparse
import array
import json
import os
import struct
import sys
import tempfile

MAGIC = b"KILNDOCS"
VERSION = 1
HEADER_SIZE = 80
DTYPES = {"uint16": (1, "H", 1 << 16), "uint32": (2, "I", 1 << 32)}


class BadInput(Exception):
    pass


def load_tokenizer(name):
    try:
        import transformers
    except ImportError:
        raise BadInput("--tokenizer needs the transformers package (pip install transformers)")
    try:
        return transformers.AutoTokenizer.from_pretrained(name)
    except Exception as e:  # noqa: BLE001 - any loading failure is one line
        raise BadInput(f"--tokenizer {name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def tokens_of(record, where, tokenizer, eos):
    """(ids, counted) of one JSONL record."""
    if not isinstance(record, dict):
        raise BadInput(f"{where}: a document is a JSON object, got {type(record).__name__}")
    if "input_ids" in record:
        ids = record["input_ids"]
        if not isinstance(ids, list) or not ids:
            raise BadInput(f"{where}: \"input_ids\" must be a non-empty list of token ids")
        for i, t in enumerate(ids):
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise BadInput(f"{where}: input_ids[{i}] = {json.dumps(t)} is not a token id "
                               "(an integer >= 0)")
        labels = record.get("labels")
        if labels is None:
            return ids, [True] * len(ids)
        if not isinstance(labels, list) or len(labels) != len(ids):
            raise BadInput(f"{where}: \"labels\" must be a list as long as \"input_ids\" "
                           f"({len(ids)})")
        for i, (t, label) in enumerate(zip(ids, labels)):
            if label != -100 and label != t:
                raise BadInput(f"{where}: labels[{i}] = {json.dumps(label)} is neither -100 nor "
                               f"input_ids[{i}] ({t}): labels mark which tokens carry loss")
        return ids, [label != -100 for label in labels]
    if "prompt" in record or "completion" in record:
        prompt, completion = record.get("prompt"), record.get("completion")
        if not isinstance(prompt, str) or not isinstance(completion, str):
            raise BadInput(f"{where}: \"prompt\" and \"completion\" must both be strings")
        if tokenizer is None:
            raise BadInput(f"{where}: prompt/completion text needs --tokenizer")
        head = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        tail = tokenizer(completion, add_special_tokens=False)["input_ids"]
        if eos and tokenizer.eos_token_id is not None:
            tail = tail + [tokenizer.eos_token_id]
        if not head + tail:
            raise BadInput(f"{where}: the prompt and completion tokenize to nothing")
        return head + tail, [False] * len(head) + [True] * len(tail)
    raise BadInput(f"{where}: expected \"input_ids\" (and \"labels\") or \"prompt\" and "
                   "\"completion\"")


def write_dataset(path, dtype, offsets, tokens, mask_bytes, counted, max_token):
    code, _, _ = DTYPES[dtype]
    documents, count = len(offsets) - 1, len(tokens)
    width = tokens.itemsize
    offsets_at = HEADER_SIZE
    tokens_at = offsets_at + 8 * (documents + 1)
    mask_at = tokens_at + (width * count + 7) // 8 * 8
    header = MAGIC + struct.pack("<IIQQQQQQQQ", VERSION, code, documents, count, counted,
                                 max_token, offsets_at, tokens_at, mask_at, 0)
    assert len(header) == HEADER_SIZE
    offsets_bytes = array.array("Q", offsets)
    if sys.byteorder != "little":
        offsets_bytes.byteswap()
        tokens.byteswap()
    token_bytes = tokens.tobytes()
    token_bytes += b"\0" * (mask_at - tokens_at - len(token_bytes))
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.lexists(path) and not os.path.isfile(path):
        raise BadInput(f"{path}: exists and is not a regular file; refusing to replace it")
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(offsets_bytes.tobytes())
            f.write(token_bytes)
            f.write(mask_bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def convert(args):
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    vocab = args.vocab_size if args.vocab_size is not None else (
        len(tokenizer) if tokenizer is not None else None)
    ids_all, counted_all, offsets = [], [], [0]
    try:
        source = open(args.input, encoding="utf-8")
    except OSError as e:
        raise BadInput(f"{args.input}: {e.strerror}")
    with source:
        for number, line in enumerate(source, 1):
            where = f"{args.input}:{number}"
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInput(f"{where}: not JSON ({e.msg} at column {e.colno})")
            ids, counted = tokens_of(record, where, tokenizer, not args.no_eos)
            if vocab is not None:
                for i, t in enumerate(ids):
                    if t >= vocab:
                        raise BadInput(f"{where}: token {t} at position {i} is outside the "
                                       f"vocabulary ({vocab} ids)")
            ids_all.extend(ids)
            counted_all.extend(counted)
            offsets.append(len(ids_all))
    if len(offsets) == 1:
        raise BadInput(f"{args.input}: no documents")
    max_token = max(ids_all)
    dtype = args.dtype
    if dtype == "auto":
        dtype = "uint16" if max_token < (1 << 16) else "uint32"
    _, typecode, limit = DTYPES[dtype]
    if max_token >= limit:
        raise BadInput(f"token {max_token} does not fit --dtype {dtype}")
    tokens = array.array(typecode, ids_all)
    mask = bytearray((len(ids_all) + 7) // 8)
    for i, c in enumerate(counted_all):
        if c:
            mask[i >> 3] |= 1 << (i & 7)
    counted = sum(counted_all)
    write_dataset(args.output, dtype, offsets, tokens, bytes(mask), counted, max_token)
    print(f"kiln_dataset: wrote {args.output}: {len(offsets) - 1} documents, {len(ids_all)} "
          f"tokens ({counted} with loss), {dtype}, largest id {max_token}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("input", help="JSONL, one document per line")
    parser.add_argument("-o", "--output", required=True, help="the dataset file to write")
    parser.add_argument("--vocab-size", type=int, help="reject token ids >= N")
    parser.add_argument("--tokenizer", help="Hugging Face tokenizer (name or directory) for "
                        "prompt/completion text")
    parser.add_argument("--no-eos", action="store_true",
                        help="do not append the tokenizer's EOS to each completion")
    parser.add_argument("--dtype", choices=["auto", "uint16", "uint32"], default="auto",
                        help="token width (auto: uint16 when every id fits)")
    args = parser.parse_args()
    if args.vocab_size is not None and args.vocab_size < 1:
        parser.error("--vocab-size must be >= 1")
    try:
        convert(args)
    except BadInput as e:
        print(f"kiln_dataset: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
