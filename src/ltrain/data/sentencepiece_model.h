// A SentencePiece tokenizer.model (Llama 2's, Mistral's) read without libsentencepiece: linked
// into ltrain, Debian's library hung LibTorch's TorchScript interpreter. The file is a protobuf
// ModelProto; the fields a BPE model needs are read off its wire format here (a dozen fields do
// not justify protobuf and generated code), and bpe_tokenizer.cpp lays them out as the
// tokenizer.json transformers makes of such a model (its LlamaConverter).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ltrain::data {

struct SentencePieceModel {
  enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  // Its score is not read: a BPE model's scores fall with the id, which orders the merges.
  struct Piece {
    std::string text;
    int type = kNormal;
  };
  std::vector<Piece> pieces;  // by id
  // TrainerSpec (proto2 defaults where a field is absent).
  int model_type = 1;  // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false, treat_whitespace_as_suffix = false;
  int64_t unk_id = 0, bos_id = 1;
  // NormalizerSpec.
  std::string normalizer;  // "identity", "nmt_nfkc", ...
  bool has_charsmap = false, add_dummy_prefix = true, remove_extra_whitespaces = true,
       escape_whitespaces = true;
};

// UsageError naming the file when it is not a well-formed ModelProto.
SentencePieceModel readSentencePieceModel(const std::string& path);

}  // namespace ltrain::data
