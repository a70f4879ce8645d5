"""Prints a .kiln artifact's sections and JSON payloads, reading the container
independently of the C++ library (docs/artifact.md), and fails on any
checksum or layout mismatch. Usage: read_kiln.py FILE"""

import json
import struct
import sys


def _table():
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


TABLE = _table()


def crc32c(data, crc=0):
    crc = ~crc & 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ TABLE[(crc ^ byte) & 0xFF]
    return ~crc & 0xFFFFFFFF


data = open(sys.argv[1], "rb").read()
magic, version, flags, size, count, table_size, table_crc, header_crc = struct.unpack_from(
    "<8sIIQIIII", data, 0)
assert magic == b"KILNART\0", magic
assert header_crc == crc32c(data[:36]), "header crc"
assert size == len(data), "size"
assert data[-4:] == b"KEND", "trailer"
assert struct.unpack_from("<I", data, size - 8)[0] == crc32c(data[:size - 8]), "file crc"
assert table_crc == crc32c(data[40:40 + table_size]), "table crc"
print(f"version {version} flags {flags} sections {count}")
pos = 40
for _ in range(count):
    offset, length, crc, name_length, _reserved = struct.unpack_from("<QQIHH", data, pos)
    name = data[pos + 24:pos + 24 + name_length].decode()
    pos += 24 + name_length
    payload = data[offset:offset + length]
    assert offset % 64 == 0 and crc == crc32c(payload), name
    print(f"section {name}")
    if name in ("meta", "guards", "params"):
        print(json.dumps(json.loads(payload), sort_keys=True))
    if name in ("step", "init"):
        # The step program: its shape, not every op (docs/artifact.md).
        program = json.loads(payload)
        kinds = {}
        for op in program["ops"]:
            kinds[op["op"]] = kinds.get(op["op"], 0) + 1
        roles = {}
        for binding in program["args"] + program["results"]:
            roles[binding["role"]] = roles.get(binding["role"], 0) + 1
        print(f"{program['format']} v{program['version']} @{program['function']} "
              f"buffers {len(program['buffers'])} args {len(program['args'])} "
              f"results {len(program['results'])}")
        print("ops " + json.dumps(kinds, sort_keys=True))
        print("roles " + json.dumps(roles, sort_keys=True))
        for op in program["ops"]:
            if op["op"] in ("launch", "gemm"):
                print("first " + json.dumps(op, sort_keys=True))
                break
        for op in program["ops"]:
            if op["op"] == "gemm":
                print("gemm " + json.dumps(op, sort_keys=True))
                break
