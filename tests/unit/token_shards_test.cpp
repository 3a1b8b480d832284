// data.dataset tokens on shards written here: nanoGPT's raw uint16 files and llm.c's headers
// (uint16 and uint32), blocks within each shard and their per-epoch cut, many shards by glob, and
// the shards it must refuse with the file and, for a token, its offset.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/data/dataset.h"
#include "ltrain/data/loader.h"
#include "ltrain/data/text.h"
#include "ltrain/data/token_shards.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;

namespace {

// An llm.c shard: 256 int32 of header (magic, version, count), then the tokens.
template <class T>
void writeLlmc(const std::string& path, const std::vector<T>& tokens, int32_t magic,
               int32_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = sizeof(T) == 2 ? 1 : 7;
  header[2] = count >= 0 ? count : static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(T)));
}

void writeRaw(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * 2));
}

template <class T>
std::vector<T> counting(size_t n, T from = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(from + i);
  return v;
}

ltrain::config::DataConfig tokensConfig(const std::string& dir) {
  auto d = ltrain::config::defaults().data;
  d.dataset = "tokens";
  d.path = dir;
  return d;
}

}  // namespace

TEST_CASE("tokens: nanoGPT and llm.c shards become blocks shifted by one, re-cut per epoch") {
  TempDir dir;
  writeRaw(dir / "train.bin", counting<uint16_t>(40));               // nanoGPT's
  writeLlmc(dir / "val.bin", counting<uint16_t>(7, 100), 20240520);  // llm.c's, uint16
  auto s = ltrain::data::loadDataset(tokensConfig(dir.path()), 0, 4, 200);
  CHECK(s.train.tokens);
  CHECK(s.train.num_classes == 200);
  // 40 tokens: blocks of 4 (+1) at any offset 0..3 -> (40 - 4) / 4 = 9 blocks.
  REQUIRE(s.train.size() == 9);
  CHECK(s.train.exampleShape() == std::vector<int64_t>{4});
  std::vector<int64_t> idx{0, 8};
  auto b = ltrain::data::makeBatch(s.train, idx.data(), 2);
  CHECK(b.inputs.equal(torch::tensor({0, 1, 2, 3, 32, 33, 34, 35}, torch::kLong).view({2, 4})));
  CHECK(b.targets.equal(torch::tensor({1, 2, 3, 4, 33, 34, 35, 36}, torch::kLong).view({2, 4})));
  ltrain::data::shiftBlocks(s.train, 3);  // another epoch's cut: as many blocks, 3 tokens later
  REQUIRE(s.train.size() == 9);
  b = ltrain::data::makeBatch(s.train, idx.data(), 2);
  CHECK(b.inputs[1].equal(torch::tensor({35, 36, 37, 38}, torch::kLong)));
  CHECK(b.targets[1].equal(torch::tensor({36, 37, 38, 39}, torch::kLong)));
  // Validation: 7 tokens, too few to shift (a block of 4 needs 5 tokens at every offset up to
  // 3, 8 in all): it keeps offset 0 and its (7 - 1) / 4 = 1 block, whatever the cut.
  REQUIRE(s.test.size() == 1);
  CHECK(s.test.exampleShape() == std::vector<int64_t>{4});
  ltrain::data::shiftBlocks(s.test, 3);
  std::vector<int64_t> zero{0};
  CHECK(ltrain::data::makeBatch(s.test, zero.data(), 1)
            .targets[0]
            .equal(torch::tensor({101, 102, 103, 104}, torch::kLong)));
}

TEST_CASE("tokens: many llm.c shards by glob, uint32 tokens, blocks never across shards") {
  TempDir dir;
  writeLlmc(dir / "fineweb_train_000002.bin", counting<uint32_t>(13, 70000), 20240801);
  writeLlmc(dir / "fineweb_train_000001.bin", counting<uint32_t>(13, 0), 20240801);
  writeLlmc(dir / "fineweb_val_000000.bin", counting<uint32_t>(13, 500), 20240801);
  auto cfg = tokensConfig(dir.path());
  cfg.train_files = "fineweb_train_*.bin";
  cfg.val_files = "fineweb_val_*.bin";
  auto s = ltrain::data::loadDataset(cfg, 0, 4, 100000);
  // Each shard: (13 - 4) / 4 = 2 blocks; shard 000001 first (sorted by name).
  REQUIRE(s.train.size() == 4);
  std::vector<int64_t> idx{0, 1, 2, 3};
  auto b = ltrain::data::makeBatch(s.train, idx.data(), 4);
  CHECK(b.inputs[1].equal(torch::tensor({4, 5, 6, 7}, torch::kLong)));
  CHECK(b.inputs[2].equal(torch::tensor({70000, 70001, 70002, 70003}, torch::kLong)));
  CHECK(b.targets[3].equal(torch::tensor({70005, 70006, 70007, 70008}, torch::kLong)));
  // The loader's threads build the same batches.
  ltrain::data::Loader loader(s.train, idx, 2, false, /*num_workers=*/2, 2);
  ltrain::data::Batch first;
  REQUIRE(loader.next(first));
  CHECK(first.inputs.equal(b.inputs.narrow(0, 0, 2)));
}

TEST_CASE("tokens: a bad shard is one error naming the file (and a bad token's offset)") {
  TempDir dir;
  auto cfg = tokensConfig(dir.path());
  auto load = [&](int64_t vocab = 1000) { return ltrain::data::loadDataset(cfg, 0, 4, vocab); };
  writeLlmc(dir / "val.bin", counting<uint16_t>(20), 20240520);

  // A header like llm.c's but with another magic number.
  writeLlmc(dir / "train.bin", counting<uint16_t>(20), 12345);
  CHECK_THROWS_WITH(load(), Contains("train.bin': magic number 12345 in its header, expected "
                                     "20240520 (llm.c shard of uint16 tokens) or 20240801"));
  // A count the size contradicts: a truncated shard.
  writeLlmc(dir / "train.bin", counting<uint16_t>(20), 20240520, /*count=*/30);
  CHECK_THROWS_WITH(load(), Contains("train.bin': its header says 30 tokens (1084 bytes with the "
                                     "header), but the file has 1064 bytes (truncated?)"));
  // A token past the vocabulary: named with its offset.
  auto tokens = counting<uint16_t>(20);
  tokens[17] = 1000;
  writeLlmc(dir / "train.bin", tokens, 20240520);
  CHECK_THROWS_WITH(load(), Contains("train.bin': token 1000 at offset 17 (byte 1058) is outside "
                                     "the model's vocabulary of 1000 (model.vocab_size)"));
  CHECK_NOTHROW(load(1001));
  // nanoGPT's raw file of an odd size is not whole uint16 tokens.
  { std::ofstream(dir / "train.bin", std::ios::binary) << "abc"; }
  CHECK_THROWS_WITH(load(), Contains("train.bin' has 3 bytes, an odd number"));
  // data.token_format llm_c: a raw file is refused for its magic.
  writeRaw(dir / "train.bin", counting<uint16_t>(600));
  cfg.token_format = ltrain::config::TokenFormat::kLlmC;
  CHECK_THROWS_WITH(load(), Contains("train.bin': magic number 65536 in its header"));
  cfg.token_format = ltrain::config::TokenFormat::kAuto;
  // Nothing matches the glob.
  cfg.train_files = "fineweb_train_*.bin";
  CHECK_THROWS_WITH(
      load(), Contains("data.train_files '" + (dir / "fineweb_train_*.bin") + "' matches no file"));
  cfg.train_files = "*train*.bin";
  // Too short for one block.
  writeRaw(dir / "train.bin", counting<uint16_t>(4));
  CHECK_THROWS_WITH(load(), Contains("data.train_files '*train*.bin' hold 4 tokens: too few"));
  // No vocabulary size and no tokenizer.json to take it from.
  writeRaw(dir / "train.bin", counting<uint16_t>(40));
  CHECK_THROWS_WITH(load(0), Contains("model.vocab_size is not set and data.path"));
}

TEST_CASE("tokens: the vocabulary size comes from data.path's tokenizer.json when not set") {
  TempDir dir;
  writeRaw(dir / "train.bin", counting<uint16_t>(40));
  writeRaw(dir / "val.bin", counting<uint16_t>(40));
  ltrain::test::writeText(dir / "tokenizer.json",
                          R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 41}},
                              "added_tokens": [{"id": 50, "content": "<|endoftext|>"}]})");
  auto s = ltrain::data::loadDataset(tokensConfig(dir.path()), 0, 4, 0);
  CHECK(s.train.num_classes == 51);
  CHECK(s.tokenizer_file == dir / "tokenizer.json");
}
