#!/usr/bin/env python3
"""packed_documents.py CONFIG_DIR OUT: three documents (token ids with a
loss mask: the first tokens are a prompt), written as the inputs of an
export with --position-ids (input_ids, position_ids, labels = the next
tokens, -100 where the mask is 0, at padding and never across a document's
end):

  OUT/packed/input_K.pb   one row of 16: the documents packed in order,
                          positions restarting at each, then padding (a
                          block of its own, labels -100)
  OUT/doc_D/input_K.pb    each document alone, one row of its own length
  OUT/counts.txt          the counted labels of each document
  OUT/docs.jsonl          the documents for scripts/kiln_dataset.py

This is the layout docs/data.md specifies; runtime/test/check_packed_dump.py
checks that kiln-run's packing of OUT/docs.jsonl is exactly OUT/packed."""
import json
import pathlib
import sys

import numpy as np
import transformers
from onnx import numpy_helper

config_dir, out = map(pathlib.Path, sys.argv[1:3])
vocab = transformers.AutoConfig.from_pretrained(config_dir).vocab_size
rng = np.random.default_rng(5)
# (tokens, prompt length): the prompt's tokens carry no loss.
docs = [(rng.integers(0, vocab, 6), 2), (rng.integers(0, vocab, 5), 3),
        (rng.integers(0, vocab, 4), 0)]
seq = 16


def rows(doc):
    tokens, prompt = doc
    counted = np.arange(len(tokens)) >= prompt
    ids = tokens[:-1]
    labels = np.where(counted[1:], tokens[1:], -100)
    return ids, np.arange(len(ids)), labels


def write(directory, ids, positions, labels):
    directory.mkdir(parents=True, exist_ok=True)
    for k, t in enumerate([ids, positions, labels]):
        (directory / f"input_{k}.pb").write_bytes(
            numpy_helper.from_array(np.asarray(t, dtype=np.int64)[None, :]).SerializeToString())


packed = [np.concatenate(parts) for parts in zip(*map(rows, docs))]
pad = seq - len(packed[0])
write(out / "packed", np.concatenate([packed[0], np.zeros(pad, np.int64)]),
      np.concatenate([packed[1], np.arange(pad)]),
      np.concatenate([packed[2], np.full(pad, -100)]))
counts = []
for d, doc in enumerate(docs):
    ids, positions, labels = rows(doc)
    write(out / f"doc_{d}", ids, positions, labels)
    counts.append(int((labels != -100).sum()))
(out / "counts.txt").write_text(" ".join(map(str, counts)) + "\n")
with open(out / "docs.jsonl", "w") as f:
    for tokens, prompt in docs:
        f.write(json.dumps({"input_ids": tokens.tolist(),
                            "labels": [-100] * prompt + tokens[prompt:].tolist()}) + "\n")
