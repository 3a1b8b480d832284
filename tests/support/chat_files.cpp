#include "support/chat_files.h"

#include <torch/torch.h>

#include "ltrain/io/safetensors.h"

namespace ltrain::test {

void writeChatExamples(const std::string& file, int64_t count, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  auto tokens = torch::randint(1, 50, {count, 10}, torch::kInt);
  tokens.narrow(1, 4, 6).copy_(torch::arange(7, 13, torch::kInt).view({1, 6}));
  auto mask = torch::ones({count, 10}, torch::kByte);
  mask.narrow(1, 0, 4).zero_();
  io::saveSafetensors(file,
                      {{"tokens", tokens.reshape({-1})},
                       {"mask", mask.reshape({-1})},
                       {"offsets", torch::arange(0, count * 10 + 1, 10, torch::kLong)}},
                      {{"format", "ltrain-chat"}});
}

}  // namespace ltrain::test
