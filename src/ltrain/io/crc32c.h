// CRC-32C is written here because Debian 12 ships no C++ CRC32C library (libcrc32c-dev is not in
// bookworm) and zlib's crc32 uses a different polynomial, while TFRecord framing requires CRC-32C.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ltrain::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78). Pass a previous result as `crc` to
// continue over a further piece: crc32c(b, nb, crc32c(a, na)) == crc32c(a+b, na+nb).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The CRC-32C of a whole file, read in pieces (a sharded checkpoint's rank file, checked before it
// loads). std::runtime_error naming the file when it cannot be read.
uint32_t crc32cOfFile(const std::string& path);

// TensorFlow's masked form, stored in TFRecord framing: a CRC computed over data that itself
// contains CRCs is weak, so TFRecord rotates and offsets it.
uint32_t maskedCrc32c(const void* data, size_t n);

}  // namespace ltrain::io
