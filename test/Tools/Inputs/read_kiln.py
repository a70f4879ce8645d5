"""Prints a .kiln artifact's sections and JSON payloads, reading the container
independently of the C++ library (docs/artifact.md), and fails on any
checksum or layout mismatch. Usage: read_kiln.py FILE"""

import json
import struct
import sys


def crc32c(data, crc=0):
    crc = ~crc & 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
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
