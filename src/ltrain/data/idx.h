// Reader for the IDX format of MNIST and Fashion-MNIST (gzip-compressed or raw).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ltrain::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // row-major, dims multiplied out
};

// Reads an unsigned-byte IDX file. Throws UsageError naming the file and what was expected when it
// is missing, truncated, has a wrong magic number or trailing bytes.
IdxArray readIdx(const std::string& path);

}  // namespace ltrain::data
