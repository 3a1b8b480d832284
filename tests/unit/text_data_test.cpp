// The text reader on small files written here: char- and byte-level tokens, blocks and their
// shifted targets, the validation split, and files it must refuse.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/data/loader.h"
#include "ltrain/data/text.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;
using ltrain::test::writeText;

TEST_CASE("text: characters become tokens, blocks are shifted by one, the end is validation") {
  TempDir dir;
  // 40 characters; 10% validation = the last 4; blocks of 3 tokens.
  std::string text;
  for (int i = 0; i < 40; ++i) text += static_cast<char>('a' + i % 5);
  writeText(dir / "t.txt", text);
  auto s = ltrain::data::loadText(dir / "t.txt", ltrain::config::Tokenizer::kChar, 0.1, 3);
  CHECK(s.train.num_classes == 5);  // a..e
  CHECK(s.train.tokens);
  // 36 training tokens give 11 blocks at any offset 0..2 (the last needs its next token).
  REQUIRE(s.train.inputs.sizes() == torch::IntArrayRef({11, 3}));
  REQUIRE(s.train.targets.sizes() == torch::IntArrayRef({11, 3}));
  CHECK(s.train.inputs[0].equal(torch::tensor({0, 1, 2}, torch::kLong)));
  CHECK(s.train.targets[0].equal(torch::tensor({1, 2, 3}, torch::kLong)));
  CHECK(s.train.inputs[1].equal(torch::tensor({3, 4, 0}, torch::kLong)));
  // Another epoch's offset cuts the text elsewhere, into as many blocks.
  auto shifted = s.train;
  ltrain::data::shiftBlocks(shifted, 2);
  REQUIRE(shifted.inputs.sizes() == torch::IntArrayRef({11, 3}));
  CHECK(shifted.inputs[0].equal(torch::tensor({2, 3, 4}, torch::kLong)));
  CHECK(shifted.targets[10].equal(torch::tensor({3, 4, 0}, torch::kLong)));  // tokens 33..35
  std::set<int64_t> offsets;
  for (int e = 0; e < 20; ++e) offsets.insert(ltrain::data::blockOffset(9, e, 3));
  CHECK(offsets == std::set<int64_t>{0, 1, 2});
  CHECK(ltrain::data::blockOffset(9, 4, 3) == ltrain::data::blockOffset(9, 4, 3));
  // Validation: characters 36..39 ("bcde"), one block.
  REQUIRE(s.test.size() == 1);
  CHECK(s.test.inputs[0].equal(torch::tensor({1, 2, 3}, torch::kLong)));
  CHECK(s.test.targets[0].equal(torch::tensor({2, 3, 4}, torch::kLong)));
  // The loader's batches are token ids, unchanged.
  std::vector<int64_t> idx{1, 0};
  auto b = ltrain::data::makeBatch(s.train, idx.data(), 2);
  CHECK(b.inputs.scalar_type() == torch::kLong);
  CHECK(b.inputs[1].equal(s.train.inputs[0]));
  CHECK(b.targets[0].equal(s.train.targets[1]));
}

TEST_CASE("text: UTF-8 characters are one token each, bytes are 256 tokens") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20; ++i) text += "h\xc3\xa9\xe2\x82\xac";  // h, é (2 bytes), € (3 bytes)
  writeText(dir / "u.txt", text);
  ltrain::data::Vocabulary v;
  auto tokens = ltrain::data::tokenize(text, ltrain::config::Tokenizer::kChar, v, "u.txt");
  CHECK(tokens.size() == 60);
  REQUIRE(v.size() == 3);
  CHECK(v.chars == std::vector<char32_t>{U'h', U'\u00e9', U'\u20ac'});
  CHECK(tokens[1] == 1);
  auto bytes = ltrain::data::tokenize(text, ltrain::config::Tokenizer::kByte, v, "u.txt");
  CHECK(bytes.size() == 120);
  CHECK(v.size() == 256);
  CHECK(bytes[1] == 0xc3);
  auto s = ltrain::data::loadText(dir / "u.txt", ltrain::config::Tokenizer::kByte, 0.25, 8);
  CHECK(s.train.num_classes == 256);
}

TEST_CASE("text: broken and unusable files are refused with the file named") {
  TempDir dir;
  using ltrain::UsageError;
  using ltrain::data::loadText;
  CHECK_THROWS_WITH(loadText(dir / "missing.txt", ltrain::config::Tokenizer::kChar, 0.1, 4),
                    Contains("missing.txt' not found"));
  CHECK_THROWS_WITH(loadText(dir.path(), ltrain::config::Tokenizer::kChar, 0.1, 4),
                    Contains("is a directory"));
  CHECK_THROWS_WITH(loadText("", ltrain::config::Tokenizer::kChar, 0.1, 4),
                    Contains("data.path is empty"));
  writeText(dir / "short.txt", "abcdefghij");
  CHECK_THROWS_WITH(loadText(dir / "short.txt", ltrain::config::Tokenizer::kChar, 0.1, 8),
                    Contains("has 10 tokens: too few for one block of model.block_size 8"));
  std::string bad(100, 'a');
  bad[57] = '\xff';
  writeText(dir / "bad.txt", bad);
  CHECK_THROWS_WITH(loadText(dir / "bad.txt", ltrain::config::Tokenizer::kChar, 0.1, 4),
                    Contains("invalid UTF-8 at byte 57"));
  CHECK_NOTHROW(loadText(dir / "bad.txt", ltrain::config::Tokenizer::kByte, 0.1, 4));
  // Truncated and overlong sequences, and encoded surrogates, are not characters either.
  for (std::string seq : {"\xc3", "\xc0\xaf", "\xed\xa0\x80"}) {
    std::string t(50, 'a');
    t += seq;
    writeText(dir / "seq.txt", t);
    CHECK_THROWS_WITH(loadText(dir / "seq.txt", ltrain::config::Tokenizer::kChar, 0.1, 4),
                      Contains("at byte 50"));
  }
  writeText(dir / "one.txt", std::string(100, 'x'));
  CHECK_THROWS_WITH(loadText(dir / "one.txt", ltrain::config::Tokenizer::kChar, 0.1, 4),
                    Contains("single distinct character"));
}
