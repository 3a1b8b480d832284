// Prompts to token ids and generated ids back to text (ltrain generate): the char or byte
// vocabulary a text run saves in its run directory (vocabulary.json), a BPE tokenizer.json of
// Hugging Face tokenizers (byte-level as GPT-2's and Llama 3's, or SentencePiece's as Llama 2's
// and Mistral's).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ltrain::data {

struct Vocabulary;

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // UsageError naming what in `text` has no token.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocabSize() const = 0;
};

// vocabulary.json (a text run's), tokenizer.json (BPE) or a SentencePiece .model; UsageError
// naming the file when it is none of them or uses what ltrain does not implement.
std::unique_ptr<TextCodec> loadCodec(const std::string& path);
// The BPE of a tokenizer.json.
std::unique_ptr<TextCodec> loadBpe(const std::string& path);
// A SentencePiece tokenizer.model (BPE, identity normalizer: Llama 2's, Mistral's), encoding and
// decoding as the sentencepiece library does, with <s> first as transformers adds it.
std::unique_ptr<TextCodec> loadSentencePiece(const std::string& path);
// The JSON a text run writes as vocabulary.json: {"tokenizer": "char", "chars": [...]} or
// {"tokenizer": "byte"}.
std::string vocabularyJson(const Vocabulary& v);
// The vocabulary size a tokenizer.json defines (the largest id + 1, added tokens included).
int64_t tokenizerVocabSize(const std::string& path);

}  // namespace ltrain::data
