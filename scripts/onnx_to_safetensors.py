#!/usr/bin/env python3
"""Writes an ONNX model's initializers as a safetensors file (by ONNX
initializer name, as the artifact's "params" section names them), and with
--pb-inputs DIR OUT writes every DIR/input_K.pb as OUT/<tensor name>.bin (raw
little-endian elements, what `kiln-run train --input NAME=FILE` reads) and a
uint16 token file OUT/tokens.bin of the first input's ids.

Needs python3, onnx and numpy only.

  onnx_to_safetensors.py MODEL.onnx OUT.safetensors
  onnx_to_safetensors.py --pb-inputs test_data_set_0 OUTDIR
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

DTYPES = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
    np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("uint16"): "U16",
    np.dtype("uint32"): "U32", np.dtype("uint64"): "U64", np.dtype("bool"): "BOOL",
}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors:
        array = np.ascontiguousarray(array)
        if array.dtype not in DTYPES:
            sys.exit(f"onnx_to_safetensors: {name}: dtype {array.dtype} has no safetensors name")
        data = array.astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_pb(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return tensor.name, numpy_helper.to_array(tensor)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--pb-inputs":
        src, out = sys.argv[2], sys.argv[3]
        os.makedirs(out, exist_ok=True)
        k = 0
        while os.path.exists(os.path.join(src, f"input_{k}.pb")):
            name, array = read_pb(os.path.join(src, f"input_{k}.pb"))
            np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tofile(
                os.path.join(out, f"{name}.bin"))
            if k == 0:
                if array.min() < 0 or array.max() > 65535:
                    sys.exit("onnx_to_safetensors: input_0 ids do not fit uint16")
                array.astype("<u2").tofile(os.path.join(out, "tokens.bin"))
            print(f"{name}: {list(array.shape)} {array.dtype}")
            k += 1
        if k == 0:
            sys.exit(f"onnx_to_safetensors: no input_0.pb in {src}")
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model = onnx.load(sys.argv[1])
    tensors = [(t.name, numpy_helper.to_array(t)) for t in model.graph.initializer]
    write_safetensors(sys.argv[2], tensors)
    print(f"{sys.argv[2]}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
