// libFuzzer target: the IDX reader (raw or gzip). Rejections must be UsageErrors; no input may
// crash it or make it allocate more than the file can hold.
#include <cstdint>

#include "fuzz_file.h"
#include "ltrain/common/errors.h"
#include "ltrain/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ltrain::fuzz::writeScratch(data, size, ".idx.gz");
  try {
    auto a = ltrain::data::readIdx(path);
    size_t n = 1;
    for (auto d : a.dims) n *= static_cast<size_t>(d);
    if (n != a.bytes.size()) std::abort();  // accepted files hold exactly what they declare
  } catch (const ltrain::UsageError&) {
  }
  return 0;
}
