// ltrain's byte-level BPE against Hugging Face tokenizers itself: tokenizers trains a GPT-2-style
// and a Llama-3-style tokenizer.json on a fortunes file here, encodes text both ways, and the ids
// must be the same; decoding gives the text back. Also the char and byte vocabularies of text
// runs, and the tokenizer files ltrain refuses.
#include <catch2/catch.hpp>

#include <sstream>

#include "ltrain/common/errors.h"
#include "ltrain/data/codec.h"
#include "ltrain/data/text.h"
#include "ltrain/io/json.h"
#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::runProcess;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
const std::string kTools = std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/hf_tools.py";
const std::string kCorpus = "/usr/share/games/fortunes/cookie";

// One line of the file per text, its own line breaks written as \n (hf_tools.py undoes them).
void writeLines(const std::string& path, const std::vector<std::string>& lines) {
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string escaped = lines[i];
    for (size_t p = 0; (p = escaped.find('\n', p)) != std::string::npos;)
      escaped.replace(p, 1, "\\n");
    text += escaped + (i + 1 < lines.size() ? "\n" : "");
  }
  writeText(path, text);
}

// The lines of SentencePiece's tests: spaces where the prefix and "\u2581" matter (leading,
// doubled, trailing), characters the vocabulary lacks (byte fallback: the euro sign, the emoji,
// CJK), and special tokens' text.
const std::vector<std::string> kSpaceLines{"A fortune a day keeps the doctor away.",
                                           "Don't panic!  It's 42 -- or 1234567, isn't it?",
                                           "  leading spaces, double  spaces and trailing   ",
                                           "Ünïcödé \xe2\x82\xac 100 \xf0\x9f\x98\x80 emoji 漢字",
                                           "line one\nline two\n\n  indented",
                                           "</s>after a special token, and <s> inside",
                                           ""};

// `codec` on each of `lines` against the JSON lines {"ids", "text"} of hf_tools.py's answer.
void checkEncodeDecode(const ltrain::data::TextCodec& codec, const std::vector<std::string>& lines,
                       const ltrain::test::ProcessResult& theirs) {
  INFO(theirs.err);
  REQUIRE(theirs.exit_code == 0);
  std::istringstream expected(theirs.out);
  std::string line;
  for (const auto& l : lines) {
    INFO(l);
    REQUIRE(std::getline(expected, line));
    const auto j = ltrain::io::Json::parse(line);
    const auto ids = codec.encode(l);
    CHECK(ids == j["ids"].get<std::vector<int64_t>>());
    CHECK(codec.decode(ids) == j["text"].get<std::string>());
  }
}

std::vector<int64_t> parseIds(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> ids;
  for (int64_t id; in >> id;) ids.push_back(id);
  return ids;
}
}  // namespace

TEST_CASE("byte-level BPE encodes as Hugging Face tokenizers does, GPT-2 and Llama 3 styles",
          "[parity][hf]") {
  TempDir dir;
  // Text the corpus has and text it does not: spaces, digits, punctuation, accents, emoji, tabs,
  // contractions, a special token.
  const std::vector<std::string> lines{
      "A fortune a day keeps the doctor away.",
      "Don't panic!  It's 42 -- or 1234567, isn't it?",
      "  leading spaces,\ttabs\tand trailing   ",
      "Ünïcödé façade naïve coöperate \xe2\x82\xac 100 \xf0\x9f\x98\x80 emoji",
      "UPPER lower MiXeD 3.14159 x^2+y^2",
      "line one\nline two\n\n  indented",
      "<|endoftext|>after the special token"};
  writeLines(dir / "lines.txt", lines);
  for (const std::string kind : {"gpt2", "llama3"}) {
    INFO(kind);
    const std::string tok = dir / (kind + ".json");
    auto made = runProcess({LTRAIN_PYTHON, kTools, "make-tokenizer", tok, kind, "600", kCorpus});
    INFO(made.err);
    REQUIRE(made.exit_code == 0);
    auto theirs = runProcess({LTRAIN_PYTHON, kTools, "encode", tok, dir / "lines.txt"});
    INFO(theirs.err);
    REQUIRE(theirs.exit_code == 0);
    auto bpe = ltrain::data::loadBpe(tok);
    CHECK(bpe->vocabSize() == 600);
    std::istringstream expected(theirs.out);
    std::string line;
    for (const auto& l : lines) {
      INFO(l);
      REQUIRE(std::getline(expected, line));
      const auto ids = bpe->encode(l);
      CHECK(ids == parseIds(line));
      // Llama 3's template puts <|begin_of_text|> first; decoding gives it back as text.
      CHECK(bpe->decode(ids) == (kind == "llama3" ? "<|begin_of_text|>" + l : l));
    }
  }
}

TEST_CASE(
    "SentencePiece's BPE in a tokenizer.json encodes and decodes as tokenizers does, in both "
    "forms",
    "[parity][hf]") {
  TempDir dir;
  writeLines(dir / "lines.txt", kSpaceLines);
  auto made = runProcess({LTRAIN_PYTHON, kTools, "make-sp-tokenizer", dir / "sp", "400", kCorpus});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  // transformers' fast tokenizer's form (Metaspace), and Llama 2's older one (Prepend and Replace
  // normalizers, <s> first).
  for (const std::string file : {"tokenizer.json", "legacy.json"}) {
    INFO(file);
    const std::string tok = dir / ("sp/" + file);
    auto codec = ltrain::data::loadCodec(tok);
    CHECK(codec->vocabSize() == 400);
    checkEncodeDecode(*codec, kSpaceLines,
                      runProcess({LTRAIN_PYTHON, kTools, "encode-decode", tok, dir / "lines.txt"}));
  }
}

TEST_CASE("a SentencePiece tokenizer.model encodes and decodes as sentencepiece does",
          "[parity][hf]") {
  TempDir dir;
  // SentencePiece's prefix goes before leading spaces too, and it reads special tokens' text as
  // plain characters.
  writeLines(dir / "lines.txt", kSpaceLines);
  auto made = runProcess({LTRAIN_PYTHON, kTools, "make-sp-model", dir / "sp", "400", kCorpus});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  const std::string model = dir / "sp/tokenizer.model";
  auto codec = ltrain::data::loadCodec(model);
  CHECK(codec->vocabSize() == 400);
  checkEncodeDecode(
      *codec, kSpaceLines,
      runProcess({LTRAIN_PYTHON, kTools, "sp-encode-decode", model, dir / "lines.txt"}));
  // A model that normalizes its text (sentencepiece's default, NFKC) is refused by name.
  auto nfkc =
      runProcess({LTRAIN_PYTHON, kTools, "make-sp-tokenizer", dir / "nfkc", "400", kCorpus});
  REQUIRE(nfkc.exit_code == 0);
  CHECK_THROWS_WITH(ltrain::data::loadCodec(dir / "nfkc/tokenizer.model"),
                    Contains("tokenizer.model': normalizer 'nmt_nfkc' (Unicode normalization "
                             "ltrain does not apply)"));
}

TEST_CASE("text runs' vocabularies encode prompts and refuse characters they do not have") {
  TempDir dir;
  ltrain::data::Vocabulary v;
  ltrain::data::tokenize("hello world", ltrain::config::Tokenizer::kChar, v, "t");
  writeText(dir / "vocabulary.json", ltrain::data::vocabularyJson(v));
  auto codec = ltrain::data::loadCodec(dir / "vocabulary.json");
  CHECK(codec->vocabSize() == 8);  // " dehlorw"
  const auto ids = codec->encode("low");
  CHECK(ids == std::vector<int64_t>{4, 5, 7});
  CHECK(codec->decode(ids) == "low");
  CHECK_THROWS_WITH(codec->encode("lot"),
                    Contains("--prompt: character 't' (U+0074) is not in the vocabulary"));
  ltrain::data::Vocabulary bytes;
  bytes.bytes = true;
  writeText(dir / "bytes.json", ltrain::data::vocabularyJson(bytes));
  auto b = ltrain::data::loadCodec(dir / "bytes.json");
  CHECK(b->encode("\xc3\xa9") == std::vector<int64_t>{0xc3, 0xa9});
  CHECK(b->decode({0xc3, 0xa9}) == "\xc3\xa9");
}

TEST_CASE("tokenizer files ltrain does not implement are refused by name") {
  TempDir dir;
  writeText(dir / "wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  CHECK_THROWS_WITH(ltrain::data::loadCodec(dir / "wp.json"),
                    Contains("wp.json': model type 'WordPiece' (ltrain reads byte-level BPE"));
  writeText(dir / "nfkc.json",
            R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true},
                "normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "Metaspace"}})");
  CHECK_THROWS_WITH(ltrain::data::loadCodec(dir / "nfkc.json"), Contains("normalizer 'NFKC'"));
  writeText(dir / "tokenizer.model", "a SentencePiece model");
  CHECK_THROWS_WITH(ltrain::data::loadCodec(dir / "tokenizer.model"),
                    Contains("tokenizer.model' is not a SentencePiece model"));
  writeText(dir / "other.json", R"({"hello": 1})");
  CHECK_THROWS_WITH(ltrain::data::loadCodec(dir / "other.json"),
                    Contains("is neither a vocabulary.json of ltrain's nor a tokenizer.json"));
  CHECK_THROWS_WITH(ltrain::data::loadCodec(dir / "missing.json"), Contains("missing.json"));
}
