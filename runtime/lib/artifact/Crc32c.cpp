//===- Crc32c.cpp - CRC-32C (Castagnoli) checksums --------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Table-driven, eight bytes per step ("slicing by 8"): checkpoints of a few
// GiB are checksummed at well over 1 GB/s without CPU-specific instructions.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

using namespace kiln::artifact;

namespace {
/// The reflected Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

/// tables[0] is the classic byte table; tables[k][b] is the CRC of byte b
/// followed by k zero bytes, which lets one step fold eight input bytes.
constexpr Tables makeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    tables[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k)
      tables[k][b] = (tables[k - 1][b] >> 8) ^ tables[0][tables[k - 1][b] & 0xFF];
  return tables;
}

constexpr Tables kTables = makeTables();
} // namespace

uint32_t kiln::artifact::crc32c(uint32_t crc, const void *data, size_t size) {
  const auto *bytes = static_cast<const unsigned char *>(data);
  crc = ~crc;
  while (size >= 8) {
    // Assemble little-endian words byte by byte: correct on any host order.
    uint32_t low =
        (bytes[0] | bytes[1] << 8 | bytes[2] << 16 | static_cast<uint32_t>(bytes[3]) << 24) ^ crc;
    crc = kTables[7][low & 0xFF] ^ kTables[6][(low >> 8) & 0xFF] ^ kTables[5][(low >> 16) & 0xFF] ^
          kTables[4][low >> 24] ^ kTables[3][bytes[4]] ^ kTables[2][bytes[5]] ^
          kTables[1][bytes[6]] ^ kTables[0][bytes[7]];
    bytes += 8;
    size -= 8;
  }
  while (size--)
    crc = (crc >> 8) ^ kTables[0][(crc ^ *bytes++) & 0xFF];
  return ~crc;
}

std::string kiln::artifact::formatCrc32c(uint32_t crc) {
  char text[11];
  std::snprintf(text, sizeof(text), "0x%08x", crc);
  return text;
}
