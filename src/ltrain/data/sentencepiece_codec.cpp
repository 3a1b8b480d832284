// A SentencePiece model file (tokenizer.model: Llama 2's, Mistral's, Gemma's) through the
// sentencepiece library itself (Debian's libsentencepiece), so that its normalisation, whitespace
// handling and byte fallback are SentencePiece's own. encode puts the model's BOS first, as
// transformers' LlamaTokenizer does by default.
#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "ltrain/common/errors.h"
#include "ltrain/data/codec.h"

namespace ltrain::data {
namespace {

class SentencePieceCodec final : public TextCodec {
 public:
  explicit SentencePieceCodec(const std::string& path) {
    const auto status = sp_.Load(path);
    if (!status.ok())
      throw UsageError(fmt::format("tokenizer file '{}' is not a SentencePiece model: {}", path,
                                   status.ToString()));
  }
  int64_t vocabSize() const override { return sp_.GetPieceSize(); }
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int> pieces;
    const auto status = sp_.Encode(text, &pieces);
    if (!status.ok()) throw UsageError("--prompt: SentencePiece: " + status.ToString());
    std::vector<int64_t> ids;
    if (sp_.bos_id() >= 0) ids.push_back(sp_.bos_id());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> pieces;
    for (auto id : ids)  // an id the model may emit but the tokenizer never made: left out
      if (id >= 0 && id < sp_.GetPieceSize()) pieces.push_back(static_cast<int>(id));
    std::string out;
    if (!sp_.Decode(pieces, &out).ok()) return {};
    return out;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<TextCodec> loadSentencePiece(const std::string& path) {
  return std::make_unique<SentencePieceCodec>(path);
}

}  // namespace ltrain::data
