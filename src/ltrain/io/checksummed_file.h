// A framed file: magic, payload length and the payload's CRC-32 before the payload, so that a
// truncated or bit-flipped file is caught before anything parses it (torch's zip reader checks
// only some of its records, and none of the structure around them).
//
// Layout: 8 bytes magic | uint64 LE payload length | uint32 LE CRC-32 (zlib) | payload.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ltrain::io {

inline constexpr size_t kChecksumHeaderBytes = 20;

// Receives the payload piece by piece.
using ByteSink = std::function<void(const void* data, size_t size)>;

// Writes the framed file atomically (see files.h): `produce(sink)` streams the payload. Throws
// std::runtime_error naming the file on a full disk or an unwritable directory; the previous file
// at `path` is then untouched. `magic` is exactly 8 bytes.
void writeChecksummed(const std::string& path, std::string_view magic,
                      const std::function<void(const ByteSink&)>& produce);

// Checks `bytes` (a whole framed file) and returns its payload. Throws std::runtime_error with a
// one-line reason ("truncated: ...", "checksum mismatch ...", "not a ... file").
std::string_view verifyChecksummed(std::string_view bytes, std::string_view magic,
                                   std::string_view what);

}  // namespace ltrain::io
