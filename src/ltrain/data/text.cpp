#include "ltrain/data/text.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ltrain/common/errors.h"
#include "ltrain/data/codec.h"
#include "ltrain/data/utf8.h"

namespace ltrain::data {
namespace {

std::string readText(const std::string& path) {
  std::error_code ec;
  if (path.empty())
    throw UsageError("data.path is empty (dataset 'text' needs the text file to train on)");
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(fmt::format("data.path '{}' is a directory, expected a text file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError(
        fmt::format("data file '{}' not found or unreadable (dataset 'text' reads "
                    "the text file in data.path)",
                    path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The blocks of `d.token_stream` starting at `offset`, every `t` tokens: inputs [N, T] and targets
// shifted by one, as views (no copy; the loader gathers a batch's rows). N is as many blocks (each
// with the token after it) as fit after the largest offset, t - 1, so that it does not depend on
// the offset; a split too short to shift keeps offset 0 and all the blocks that fit there.
void cut(Dataset& d, int64_t t, int64_t offset) {
  const int64_t length = d.token_stream.size(0);
  int64_t n = (length - t) / t;
  if (n < 1) n = (length - 1) / t, offset = 0;
  d.inputs = d.token_stream.narrow(0, offset, n * t).view({n, t});
  d.targets = d.token_stream.narrow(0, offset + 1, n * t).view({n, t});
}

Dataset blocks(const torch::Tensor& stream, int64_t block_size, int64_t num_classes) {
  Dataset d;
  d.token_stream = stream;
  d.tokens = true;
  d.num_classes = num_classes;
  cut(d, block_size, 0);
  return d;
}

}  // namespace

std::vector<int64_t> tokenize(const std::string& text, config::Tokenizer tokenizer,
                              Vocabulary& vocab, const std::string& path) {
  std::vector<int64_t> tokens;
  tokens.reserve(text.size());
  vocab = Vocabulary{};
  if (tokenizer == config::Tokenizer::kByte) {
    vocab.bytes = true;
    for (unsigned char c : text) tokens.push_back(c);
    return tokens;
  }
  std::vector<char32_t> points;
  points.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    const int64_t cp = decodeUtf8(text, i);
    if (cp < 0)
      throw UsageError(fmt::format(
          "data file '{}': invalid UTF-8 at byte {} (data.tokenizer: byte reads any file)", path,
          at));
    points.push_back(static_cast<char32_t>(cp));
  }
  vocab.chars = points;
  std::sort(vocab.chars.begin(), vocab.chars.end());
  vocab.chars.erase(std::unique(vocab.chars.begin(), vocab.chars.end()), vocab.chars.end());
  for (char32_t cp : points)
    tokens.push_back(std::lower_bound(vocab.chars.begin(), vocab.chars.end(), cp) -
                     vocab.chars.begin());
  return tokens;
}

Splits loadText(const std::string& path, config::Tokenizer tokenizer, double val_fraction,
                int64_t block_size, int64_t vocab_size) {
  const std::string text = readText(path);
  Vocabulary vocab;
  std::vector<int64_t> tokens = tokenize(text, tokenizer, vocab, path);
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction);
  // Each split needs one block plus the token after it.
  if (n - n_val < block_size + 1 || n_val < block_size + 1)
    throw UsageError(fmt::format(
        "data file '{}' has {} tokens: too few for one block of model.block_size {} (+1) in "
        "training and in validation (data.val_fraction {:g} holds out {})",
        path, n, block_size, val_fraction, n_val));
  if (vocab.size() < 2)
    throw UsageError(fmt::format("data file '{}' holds a single distinct character", path));
  // A larger vocabulary is padding (as nanoGPT's 50304 for GPT-2's 50257): logits never trained.
  if (vocab_size > 0 && vocab_size < vocab.size())
    throw UsageError(
        fmt::format("model.vocab_size {} is smaller than the {} distinct tokens of data file '{}'",
                    vocab_size, vocab.size(), path));
  const int64_t classes = vocab_size > 0 ? vocab_size : vocab.size();
  auto stream = torch::from_blob(tokens.data(), {n}, torch::kLong).clone();
  Splits s;
  s.train = blocks(stream.narrow(0, 0, n - n_val), block_size, classes);
  s.test = blocks(stream.narrow(0, n - n_val, n_val), block_size, classes);
  s.vocabulary_json = vocabularyJson(vocab);
  return s;
}

int64_t blockOffset(uint64_t seed, int64_t epoch, int64_t block_size) {
  // splitmix64 of (seed, epoch): well spread for consecutive epochs.
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(epoch) + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int64_t>(z % static_cast<uint64_t>(block_size));
}

void shiftBlocks(Dataset& ds, int64_t offset) {
  if (ds.source) return ds.source->shift(offset);
  cut(ds, ds.inputs.size(1), offset);
}

}  // namespace ltrain::data
