// libFuzzer target: the safetensors reader, and loading its tensors into the seed corpus's model
// (an MLP with hidden [8] on 1x6x6 inputs, 10 classes). Rejections must be UsageErrors.
#include <torch/torch.h>

#include "fuzz_file.h"
#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto cfg = [] {
    auto c = ltrain::config::defaults();
    c.model.hidden = {8};
    return c;
  }();
  static auto model = ltrain::models::build(cfg.model, {1, 6, 6}, 10);
  const std::string path = ltrain::fuzz::writeScratch(data, size, ".safetensors");
  try {
    ltrain::io::loadModuleState(*model, path);
  } catch (const ltrain::UsageError&) {
  }
  return 0;
}
