#include "ltrain/data/token_shards.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <glob.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/data/codec.h"

namespace ltrain::data {
namespace {

constexpr int32_t kMagicU16 = 20240520, kMagicU32 = 20240801;
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

int32_t headerField(const uint8_t* p, int i) {
  int32_t v;
  std::memcpy(&v, p + 4 * i, 4);  // little-endian on every platform LibTorch ships for
  return v;
}

// A header that is llm.c's in all but its magic: a version, and a count the size agrees with.
bool looksLikeLlmc(const uint8_t* p, size_t size) {
  if (size < kHeaderBytes) return false;
  const int32_t version = headerField(p, 1), count = headerField(p, 2);
  if (version < 1 || version > 64 || count <= 0) return false;
  const auto n = static_cast<size_t>(count);
  return size == kHeaderBytes + 2 * n || size == kHeaderBytes + 4 * n;
}

// The first index in [0, n) whose token is >= vocab, or -1. Parallel over chunks: a corpus is
// checked once, at memory (or disk) speed.
template <class T>
int64_t firstOutside(const T* tokens, int64_t n, int64_t vocab) {
  constexpr int64_t kChunk = 1 << 20;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(static_cast<size_t>(chunks), -1);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
      T top = 0;
      for (int64_t i = lo; i < hi; ++i) top = std::max(top, tokens[i]);  // vectorises
      if (static_cast<int64_t>(top) < vocab) continue;
      for (int64_t i = lo; i < hi; ++i)
        if (static_cast<int64_t>(tokens[i]) >= vocab) {
          first[static_cast<size_t>(c)] = i;
          break;
        }
    }
  });
  for (auto f : first)
    if (f >= 0) return f;
  return -1;
}

}  // namespace

int64_t TokenShard::token(int64_t i) const {
  const uint8_t* p = file->data() + header_bytes + static_cast<size_t>(i) * width;
  if (width == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

TokenShard openShard(const std::string& path, config::TokenFormat format) {
  TokenShard s;
  s.file = io::MappedFile::open(path);
  const uint8_t* p = s.file->data();
  const size_t size = s.file->size();
  const int32_t magic = size >= kHeaderBytes ? headerField(p, 0) : 0;
  const bool known = magic == kMagicU16 || magic == kMagicU32;
  const bool llmc = format == config::TokenFormat::kLlmC ||
                    (format == config::TokenFormat::kAuto && (known || looksLikeLlmc(p, size)));
  if (!llmc) {  // nanoGPT: the whole file is uint16 tokens
    if (size % 2 != 0)
      throw UsageError(fmt::format(
          "data file '{}' has {} bytes, an odd number: expected uint16 tokens (nanoGPT's "
          ".bin) or an llm.c shard",
          path, size));
    s.count = static_cast<int64_t>(size / 2);
    return s;
  }
  if (size < kHeaderBytes)
    throw UsageError(
        fmt::format("data file '{}' has {} bytes, fewer than the 1024 of an llm.c shard's header "
                    "(data.token_format "
                    "llm_c)",
                    path, size));
  if (!known)
    throw UsageError(fmt::format(
        "data file '{}': magic number {} in its header, expected {} (llm.c shard of uint16 "
        "tokens) or {} (uint32)",
        path, magic, kMagicU16, kMagicU32));
  s.header_bytes = kHeaderBytes;
  s.width = magic == kMagicU16 ? 2 : 4;
  s.count = headerField(p, 2);
  const size_t expect =
      kHeaderBytes + static_cast<size_t>(std::max(0, headerField(p, 2))) * s.width;
  if (s.count < 0 || size != expect)
    throw UsageError(fmt::format(
        "data file '{}': its header says {} tokens ({} bytes with the header), but the file has "
        "{} bytes{}",
        path, headerField(p, 2), expect, size, size < expect ? " (truncated?)" : ""));
  return s;
}

void checkTokens(const TokenShard& s, int64_t vocab) {
  const uint8_t* p = s.file->data() + s.header_bytes;
  const int64_t bad = s.width == 2
                          ? firstOutside(reinterpret_cast<const uint16_t*>(p), s.count, vocab)
                          : firstOutside(reinterpret_cast<const uint32_t*>(p), s.count, vocab);
  if (bad >= 0)
    throw UsageError(fmt::format(
        "data file '{}': token {} at offset {} (byte {}) is outside the model's vocabulary of {} "
        "(model.vocab_size)",
        s.file->path(), s.token(bad), bad, s.header_bytes + static_cast<size_t>(bad) * s.width,
        vocab));
}

std::vector<std::string> globShards(const std::string& dir, const std::string& pattern,
                                    const std::string& key) {
  namespace fs = std::filesystem;
  const std::string full =
      fs::path(pattern).is_absolute() || dir.empty() ? pattern : (fs::path(dir) / pattern).string();
  glob_t g{};
  const int rc = ::glob(full.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);  // sorted by glob
  globfree(&g);
  std::error_code ec;
  out.erase(std::remove_if(out.begin(), out.end(),
                           [&](const std::string& f) { return fs::is_directory(f, ec); }),
            out.end());
  if (out.empty())
    throw UsageError(fmt::format("{} '{}' matches no file{}", key, full,
                                 !dir.empty() && !fs::is_directory(dir, ec)
                                     ? fmt::format(" (data.path '{}' is not a directory)", dir)
                                     : " (expected token shards: train.bin, fineweb_train_*.bin)"));
  return out;
}

TokenBlocks::TokenBlocks(std::vector<TokenShard> shards, int64_t block_size)
    : shards_(std::move(shards)), block_size_(block_size) {
  const int64_t t = block_size;
  for (const auto& s : shards_) {
    // As the text dataset cuts: as many blocks (each with the token after it) as fit after the
    // largest offset, so that every epoch has as many; a shard too short to shift keeps offset 0.
    Span sp{total_, (s.count - t) / t, true};
    if (sp.blocks < 1) sp = {total_, std::max<int64_t>(0, (s.count - 1) / t), false};
    spans_.push_back(sp);
    total_ += sp.blocks;
  }
}

int64_t TokenBlocks::tokenCount() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += s.count;
  return n;
}

void TokenBlocks::gather(const int64_t* indices, int64_t count, torch::Tensor& inputs,
                         torch::Tensor& targets) const {
  const int64_t t = block_size_;
  auto* in = inputs.data_ptr<int64_t>();
  auto* tg = targets.data_ptr<int64_t>();
  std::vector<int64_t> row(static_cast<size_t>(t + 1));
  for (int64_t r = 0; r < count; ++r) {
    const int64_t block = indices[r];
    const auto it = std::upper_bound(spans_.begin(), spans_.end(), block,
                                     [](int64_t b, const Span& sp) { return b < sp.first_block; });
    const auto k = static_cast<size_t>(it - spans_.begin() - 1);
    const Span& sp = spans_[k];
    const TokenShard& s = shards_[k];
    const int64_t start = (sp.shifts ? offset_ : 0) + (block - sp.first_block) * t;
    const uint8_t* p = s.file->data() + s.header_bytes + static_cast<size_t>(start) * s.width;
    if (s.width == 2)
      for (int64_t i = 0; i <= t; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        row[static_cast<size_t>(i)] = v;
      }
    else
      for (int64_t i = 0; i <= t; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        row[static_cast<size_t>(i)] = v;
      }
    std::memcpy(in + r * t, row.data(), sizeof(int64_t) * t);
    std::memcpy(tg + r * t, row.data() + 1, sizeof(int64_t) * t);
  }
}

DataVocabulary dataVocabulary(const std::string& dir, int64_t vocab) {
  namespace fs = std::filesystem;
  const std::string tok = (fs::path(dir) / "tokenizer.json").string();
  std::error_code ec;
  const bool has = fs::is_regular_file(tok, ec);
  if (vocab <= 0 && !has)
    throw UsageError(fmt::format(
        "model.vocab_size is not set and data.path '{}' has no tokenizer.json to take it from: "
        "set model.vocab_size to the tokenizer's vocabulary (50257 for GPT-2's)",
        dir));
  return {vocab > 0 ? vocab : tokenizerVocabSize(tok), has ? tok : ""};
}

Splits loadTokens(const config::DataConfig& cfg, int64_t block_size, int64_t vocab_size) {
  const auto [vocab, tokenizer] = dataVocabulary(cfg.path, vocab_size);
  Splits out;
  out.tokenizer_file = tokenizer;
  for (auto [split, key, pattern] : {std::tuple{&out.train, "data.train_files", cfg.train_files},
                                     std::tuple{&out.test, "data.val_files", cfg.val_files}}) {
    std::vector<TokenShard> shards;
    for (const auto& f : globShards(cfg.path, pattern, key)) {
      shards.push_back(openShard(f, cfg.token_format));
      checkTokens(shards.back(), vocab);
    }
    auto blocks = std::make_shared<TokenBlocks>(std::move(shards), block_size);
    if (blocks->size() == 0)
      throw UsageError(
          fmt::format("{} '{}' hold {} tokens: too few for one block of model.block_size {} (+1)",
                      key, pattern, blocks->tokenCount(), block_size));
    split->source = blocks;
    split->tokens = true;
    split->num_classes = vocab;
  }
  return out;
}

}  // namespace ltrain::data
