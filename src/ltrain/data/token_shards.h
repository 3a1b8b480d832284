// data.dataset tokens: a pre-tokenised corpus in shards, memory-mapped and never read whole into
// memory. A shard is nanoGPT's raw uint16 array (train.bin, val.bin) or llm.c's format: 256 int32
// of header (magic 20240520 with uint16 tokens or 20240801 with uint32, version, token count),
// then the tokens. Examples are blocks of block_size + 1 tokens (inputs, and targets one token
// later) inside one shard, re-cut per epoch as the text dataset's are.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/data/dataset.h"
#include "ltrain/io/mapped_file.h"

namespace ltrain::data {

struct TokenShard {
  std::shared_ptr<const io::MappedFile> file;
  size_t header_bytes = 0;  // 1024 for llm.c, 0 for nanoGPT
  int width = 2;            // bytes per token
  int64_t count = 0;        // tokens
  int64_t token(int64_t i) const;
};

// Opens and checks one shard: UsageError naming the file for a wrong magic, a token count that
// the file's size contradicts, or a file that is not whole tokens.
TokenShard openShard(const std::string& path, config::TokenFormat format);
// UsageError naming the file and the offset of the first token >= `vocab`.
void checkTokens(const TokenShard& shard, int64_t vocab);

// The files a pattern names: a glob (fineweb_train_*.bin), relative to `dir` unless absolute,
// sorted. UsageError when it names none.
std::vector<std::string> globShards(const std::string& dir, const std::string& pattern,
                                    const std::string& key);

// The blocks of a list of shards, as the loader's ExampleSource.
class TokenBlocks final : public ExampleSource {
 public:
  TokenBlocks(std::vector<TokenShard> shards, int64_t block_size);
  int64_t size() const override { return total_; }
  std::vector<int64_t> exampleShape() const override { return {block_size_}; }
  torch::ScalarType inputType() const override { return torch::kLong; }
  std::vector<int64_t> targetShape() const override { return {block_size_}; }
  void gather(const int64_t* indices, int64_t count, torch::Tensor& inputs,
              torch::Tensor& targets) const override;
  void shift(int64_t offset) override { offset_ = offset; }
  int64_t tokenCount() const;

 private:
  struct Span {
    int64_t first_block, blocks;
    bool shifts;  // long enough for every offset in [0, block_size)
  };
  std::vector<TokenShard> shards_;
  std::vector<Span> spans_;
  int64_t block_size_, total_ = 0, offset_ = 0;
};

// The vocabulary of pre-tokenised data in `dir`: `vocab` (model.vocab_size) when set, else the size
// of dir's tokenizer.json (UsageError when there is none); and that file, "" when absent.
struct DataVocabulary {
  int64_t size;
  std::string tokenizer_file;
};
DataVocabulary dataVocabulary(const std::string& dir, int64_t vocab);

// Train and validation splits (data.train_files, data.val_files under data.path) for a model of
// `vocab` tokens (0: the size of data.path's tokenizer.json).
Splits loadTokens(const config::DataConfig& cfg, int64_t block_size, int64_t vocab);

}  // namespace ltrain::data
