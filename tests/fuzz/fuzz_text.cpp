// libFuzzer target: the text reader (UTF-8 decoding, vocabulary, blocks). Rejections must be
// UsageErrors; accepted files must give tokens inside the vocabulary and blocks whose targets are
// their inputs shifted by one.
#include <torch/torch.h>

#include <cstdint>

#include "fuzz_file.h"
#include "ltrain/common/errors.h"
#include "ltrain/data/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ltrain::fuzz::writeScratch(data, size, ".txt");
  for (auto tokenizer : {ltrain::config::Tokenizer::kChar, ltrain::config::Tokenizer::kByte}) {
    try {
      auto s = ltrain::data::loadText(path, tokenizer, 0.25, 4);
      for (auto* d : {&s.train, &s.test}) {
        if (d->inputs.size(1) != 4 || d->inputs.min().item<int64_t>() < 0 ||
            d->inputs.max().item<int64_t>() >= d->num_classes)
          std::abort();
        if (!d->inputs.narrow(1, 1, 3).equal(d->targets.narrow(1, 0, 3))) std::abort();
        ltrain::data::shiftBlocks(*d, 3);
        if (!d->inputs.narrow(1, 1, 3).equal(d->targets.narrow(1, 0, 3))) std::abort();
      }
    } catch (const ltrain::UsageError&) {
    }
  }
  return 0;
}
