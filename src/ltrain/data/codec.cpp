// The char and byte vocabularies of text runs as codecs, and loadCodec's choice of kind.
#include "ltrain/data/codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "ltrain/common/errors.h"
#include "ltrain/data/text.h"
#include "ltrain/data/utf8.h"
#include "ltrain/io/json.h"

namespace ltrain::data {
namespace {

std::string utf8(char32_t cp) {
  std::string out;
  appendUtf8(out, static_cast<uint32_t>(cp));
  return out;
}

class VocabularyCodec final : public TextCodec {
 public:
  VocabularyCodec(Vocabulary v, std::string path) : v_(std::move(v)), path_(std::move(path)) {}
  int64_t vocabSize() const override { return v_.size(); }
  std::vector<int64_t> encode(const std::string& text) const override {
    if (v_.bytes) {
      std::vector<int64_t> ids;
      for (unsigned char c : text) ids.push_back(c);
      return ids;
    }
    Vocabulary scratch;
    std::vector<int64_t> ids;
    // The prompt's characters looked up in the run's vocabulary, not a new one.
    const auto points = tokenize(text, config::Tokenizer::kChar, scratch, "--prompt");
    for (auto i : points) {
      const char32_t cp = scratch.chars[static_cast<size_t>(i)];
      auto it = std::lower_bound(v_.chars.begin(), v_.chars.end(), cp);
      if (it == v_.chars.end() || *it != cp)
        throw UsageError(fmt::format(
            "--prompt: character '{}' (U+{:04X}) is not in the vocabulary of the training text "
            "({})",
            utf8(cp), static_cast<uint32_t>(cp), path_));
      ids.push_back(it - v_.chars.begin());
    }
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string out;
    for (auto id : ids) {
      if (id < 0 || id >= v_.size()) continue;
      if (v_.bytes)
        out += static_cast<char>(id);
      else
        out += utf8(v_.chars[static_cast<size_t>(id)]);
    }
    return out;
  }

 private:
  Vocabulary v_;
  std::string path_;
};

}  // namespace

std::string vocabularyJson(const Vocabulary& v) {
  io::Json j;
  j["tokenizer"] = v.bytes ? "byte" : "char";
  if (!v.bytes) {
    j["chars"] = io::Json::array();
    for (char32_t cp : v.chars) j["chars"].push_back(utf8(cp));
  }
  return j.dump(1) + "\n";
}

std::unique_ptr<TextCodec> loadCodec(const std::string& path) {
  if (path.size() > 6 && path.compare(path.size() - 6, 6, ".model") == 0)
    return loadSentencePiece(path);
  const io::Json j = io::readJsonFile(path);
  if (j.is_object() && j.contains("model")) return loadBpe(path);
  if (!j.is_object() || !j.contains("tokenizer"))
    throw UsageError(fmt::format(
        "'{}' is neither a vocabulary.json of ltrain's nor a tokenizer.json of Hugging Face's",
        path));
  Vocabulary v;
  const std::string kind = j["tokenizer"].is_string() ? j["tokenizer"].get<std::string>() : "";
  if (kind == "byte") {
    v.bytes = true;
  } else if (kind == "char" && j.contains("chars") && j["chars"].is_array()) {
    for (const auto& c : j["chars"]) {
      Vocabulary one;
      const auto s = c.is_string() ? c.get<std::string>() : "";
      const auto t =
          s.empty() ? std::vector<int64_t>{} : tokenize(s, config::Tokenizer::kChar, one, path);
      if (t.size() != 1)
        throw UsageError(fmt::format("'{}': chars must hold one character each", path));
      v.chars.push_back(one.chars[0]);
    }
    if (std::adjacent_find(v.chars.begin(), v.chars.end(), std::greater_equal<>()) != v.chars.end())
      throw UsageError(fmt::format("'{}': chars must be in code-point order, each once", path));
  } else {
    throw UsageError(
        fmt::format("'{}': tokenizer must be \"char\" (with chars) or \"byte\"", path));
  }
  return std::make_unique<VocabularyCodec>(std::move(v), path);
}

}  // namespace ltrain::data
