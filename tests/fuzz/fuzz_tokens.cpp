// libFuzzer target: the language-model inputs users bring, a token shard (llm.c's header or
// nanoGPT's raw uint16), a tokenizer.json (BPE) and a SentencePiece tokenizer.model (protobuf).
// Rejections must be UsageErrors; an accepted shard's size must be its header plus its tokens, and
// every block gathered from it must be its tokens; an accepted tokenizer must encode text to ids
// inside its vocabulary.
#include <torch/torch.h>

#include <cstdint>

#include "fuzz_file.h"
#include "ltrain/common/errors.h"
#include "ltrain/data/codec.h"
#include "ltrain/data/token_shards.h"

namespace {

void fuzzShard(const std::string& path) {
  using ltrain::config::TokenFormat;
  for (auto format : {TokenFormat::kAuto, TokenFormat::kLlmC, TokenFormat::kNanoGpt}) {
    try {
      auto shard = ltrain::data::openShard(path, format);
      if (shard.file->size() !=
          shard.header_bytes + static_cast<size_t>(shard.count) * static_cast<size_t>(shard.width))
        std::abort();
      ltrain::data::checkTokens(shard, 1 << 16);
      if (shard.count < 5) continue;
      const int64_t first = shard.token(0), fifth = shard.token(4);
      ltrain::data::TokenBlocks blocks({shard}, 4);
      if (blocks.size() < 1) std::abort();
      const int64_t index = 0;
      torch::Tensor inputs = torch::empty({1, 4}, torch::kLong),
                    targets = torch::empty({1, 4}, torch::kLong);
      blocks.gather(&index, 1, inputs, targets);
      if (inputs[0][0].item<int64_t>() != first || targets[0][3].item<int64_t>() != fifth)
        std::abort();
    } catch (const ltrain::UsageError&) {
    }
  }
}

void fuzzTokenizer(const std::string& path) {
  try {
    auto codec = ltrain::data::loadCodec(path);
    for (const char* text : {"Hello, world!", " 12 ab\n\ncd", "\xc3\xa9t\xc3\xa9"}) {
      try {
        for (int64_t id : codec->encode(text))
          if (id < 0 || id >= codec->vocabSize()) std::abort();
      } catch (const ltrain::UsageError&) {
      }
    }
  } catch (const ltrain::UsageError&) {
  }
}

}  // namespace

// The first byte chooses: even, a shard; 5 modulo 8, a tokenizer.model; else a tokenizer.json.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0)
    fuzzShard(ltrain::fuzz::writeScratch(data + 1, size - 1, ".bin"));
  else if (data[0] % 8 == 5)
    fuzzTokenizer(ltrain::fuzz::writeScratch(data + 1, size - 1, ".model"));
  else
    fuzzTokenizer(ltrain::fuzz::writeScratch(data + 1, size - 1, ".json"));
  return 0;
}
