//===- Crc32c.h - CRC-32C (Castagnoli) checksums ----------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The checksum of .kiln artifacts and of the tensors in Kiln's safetensors
// checkpoints. CRC-32C detects every burst error up to 32 bits (a flipped
// bit or byte always), and is what storage systems use for the same job.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_CRC32C_H
#define KILN_ARTIFACT_CRC32C_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::artifact {

/// Extends \p crc (the value returned for the bytes before) by \p size bytes
/// at \p data. Start with 0: crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void *data, size_t size);

/// "0x1234abcd": how checksums appear in text (inspect, safetensors metadata).
std::string formatCrc32c(uint32_t crc);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_CRC32C_H
