// libFuzzer target: the checkpoint reader (checksummed frame, then torch's archive) for the model
// of the seed corpus (an MLP with hidden [8] on 1x6x6 inputs, 10 classes, SGD). Rejections must
// be UsageErrors naming the file.
#include <torch/torch.h>

#include "fuzz_file.h"
#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/rng_streams.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "ltrain/optim/optimizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto cfg = [] {
    auto c = ltrain::config::defaults();
    c.model.hidden = {8};
    return c;
  }();
  auto model = ltrain::models::build(cfg.model, {1, 6, 6}, 10);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, model->parameters());
  const std::string path = ltrain::fuzz::writeScratch(data, size, ".pt");
  try {
    ltrain::checkpoint::LoopState loop;  // and the generators: a resume's components
    ltrain::RngStreams rng(torch::kCPU);
    ltrain::checkpoint::loadCheckpoint(path, *model, *opt, {&loop, &rng});
  } catch (const ltrain::UsageError&) {
  }
  return 0;
}
