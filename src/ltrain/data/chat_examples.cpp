#include "ltrain/data/chat_examples.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/data/token_shards.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"

namespace ltrain::data {
namespace {

namespace fs = std::filesystem;

// How a file's sequences become examples: one a block; in pairs, chosen then rejected (data.dataset
// preference); or packed, as many consecutive ones to a block as fit (data.packing).
enum class Layout { kOne, kPairs, kPacked };

// The examples of one file, whole in memory (an instruction set is small next to a corpus).
class ChatExamples final : public ExampleSource {
 public:
  ChatExamples(torch::Tensor tokens, torch::Tensor mask, torch::Tensor offsets, int64_t block_size,
               Layout layout)
      : tokens_(std::move(tokens)),
        mask_(std::move(mask)),
        offsets_(std::move(offsets)),
        block_size_(block_size),
        layout_(layout) {
    const int64_t n = offsets_.numel() - 1;
    const auto* off = offsets_.data_ptr<int64_t>();
    // First fit in order: a block takes the next sequences while their tokens fit (a longer one
    // alone fills a block and is cut there, as unpacked).
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1, used = off[i + 1] - off[i];
      if (layout_ == Layout::kPacked)
        for (; j < n && used + off[j + 1] - off[j] <= block_size_; ++j) used += off[j + 1] - off[j];
      else if (layout_ == Layout::kPairs)
        j = i + 2;
      firsts_.push_back(i);
      i = j;
    }
    firsts_.push_back(n);
  }
  int64_t size() const override { return static_cast<int64_t>(firsts_.size()) - 1; }
  // Pairs: [2, T], the chosen sequence and the rejected one. Packed: [2, T], the tokens and each
  // one's position in its example (models/packing.h).
  std::vector<int64_t> exampleShape() const override {
    return layout_ == Layout::kOne ? std::vector<int64_t>{block_size_}
                                   : std::vector<int64_t>{2, block_size_};
  }
  std::vector<int64_t> modelInputShape() const override { return {block_size_}; }
  torch::ScalarType inputType() const override { return torch::kLong; }
  std::vector<int64_t> targetShape() const override {
    return layout_ == Layout::kPairs ? exampleShape() : std::vector<int64_t>{block_size_};
  }
  void shift(int64_t) override {}  // examples are whole: nothing to re-cut

  void gather(const int64_t* indices, int64_t count, torch::Tensor& inputs,
              torch::Tensor& targets) const override {
    const int64_t t = block_size_;
    auto* in = inputs.data_ptr<int64_t>();
    auto* out = targets.data_ptr<int64_t>();
    for (int64_t b = 0; b < count; ++b) {
      const int64_t first = firsts_[indices[b]], last = firsts_[indices[b] + 1];
      if (layout_ == Layout::kPacked) {
        int64_t* x = in + b * 2 * t;
        int64_t* y = out + b * t;
        int64_t at = 0;
        for (int64_t seq = first; seq < last; ++seq)
          at += write(seq, x + at, y + at, t - at, x + t + at);
        for (; at < t; ++at) x[at] = 0, y[at] = kIgnoredTarget, x[t + at] = 0;  // padding
        continue;
      }
      for (int64_t seq = first; seq < last; ++seq) {  // one sequence a row
        const int64_t row = b * (last - first) + (seq - first);
        const int64_t n = write(seq, in + row * t, out + row * t, t, nullptr);
        for (int64_t j = n; j < t; ++j) in[row * t + j] = 0, out[row * t + j] = kIgnoredTarget;
      }
    }
  }

 private:
  // Sequence `seq`'s first `room` tokens into x and their next-token targets into y (the next
  // token where the mask learns it, else -100), its positions into `pos` when given: how many
  // written. After the written tokens: padding, token 0 and never a target (causal attention
  // keeps it from the tokens before it).
  int64_t write(int64_t seq, int64_t* x, int64_t* y, int64_t room, int64_t* pos) const {
    const auto* tok = tokens_.data_ptr<int32_t>();
    const auto* mask = mask_.data_ptr<uint8_t>();
    const auto* off = offsets_.data_ptr<int64_t>();
    const int64_t begin = off[seq], n = std::min(off[seq + 1] - begin, room);
    const int64_t whole = off[seq + 1] - begin;
    for (int64_t j = 0; j < n; ++j) {
      x[j] = tok[begin + j];
      y[j] = j + 1 < whole && mask[begin + j + 1] ? tok[begin + j + 1] : kIgnoredTarget;
      if (pos) pos[j] = j;
    }
    return n;
  }

  torch::Tensor tokens_, mask_, offsets_;
  int64_t block_size_;
  Layout layout_;
  std::vector<int64_t> firsts_;  // each example's first sequence, and the end
};

constexpr const char* kPreferenceFormat = "ltrain-preference";

// `pairs`: data.dataset preference, whose files prepare_chat.py marks with its format; `packed`:
// several sequences to a block (data.packing's training split).
std::shared_ptr<ChatExamples> openExamples(const std::string& file, int64_t block_size,
                                           int64_t vocab, bool pairs, bool packed) {
  const char* dataset = pairs ? "preference" : "chat";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw UsageError(fmt::format(
        "data.dataset {}: '{}' not found; make the examples with scripts/prepare_chat.py "
        "JSONL --model HF_DIR --out {}",
        dataset, file, fs::path(file).parent_path().string()));
  const io::SafetensorsFile st(file);
  const auto format = st.metadata().find("format");
  const bool holds_pairs = format != st.metadata().end() && format->second == kPreferenceFormat;
  if (holds_pairs != pairs)
    throw UsageError(fmt::format(
        "'{}' holds {}, not the {} data.dataset {} reads; {}", file,
        holds_pairs ? "preference pairs (prompt/chosen/rejected)" : "chat or instruction examples",
        pairs ? "pairs" : "examples", dataset,
        holds_pairs ? "set data.dataset: preference and finetune.method: dpo"
                    : "prepare JSONL of prompt/chosen/rejected records with prepare_chat.py"));
  auto need = [&](const char* name, torch::ScalarType dtype) {
    const auto* e = st.find(name);
    if (!e || e->dtype != dtype || e->shape.size() != 1)
      throw UsageError(fmt::format(
          "'{}' has no 1-d {} tensor '{}': not the examples scripts/prepare_chat.py writes", file,
          c10::toString(dtype), name));
    return st.read(name);
  };
  auto tokens = need("tokens", torch::kInt), mask = need("mask", torch::kByte),
       offsets = need("offsets", torch::kLong);
  const int64_t n = offsets.numel() - 1;
  if (pairs && n % 2 != 0)
    throw UsageError(
        fmt::format("'{}' holds {} sequences, not whole chosen/rejected pairs", file, n));
  const auto* off = offsets.data_ptr<int64_t>();
  if (n < 1 || off[0] != 0 || off[n] != tokens.numel() || mask.numel() != tokens.numel())
    throw UsageError(fmt::format(
        "'{}': offsets, tokens ({}) and mask ({}) do not agree (offsets must run from 0 to the "
        "token count)",
        file, tokens.numel(), mask.numel()));
  if (tokens.numel() > 0) {
    const int64_t top = tokens.max().item<int64_t>(), low = tokens.min().item<int64_t>();
    if (top >= vocab || low < 0)
      throw UsageError(fmt::format("'{}' holds token {}, outside the model's vocabulary of {}",
                                   file, top >= vocab ? top : low, vocab));
  }
  const auto* m = mask.data_ptr<uint8_t>();
  auto example = [&](int64_t i) {
    return pairs ? fmt::format("pair {}'s {} sequence", i / 2, i % 2 ? "rejected" : "chosen")
                 : fmt::format("example {}", i);
  };
  for (int64_t i = 0; i < n; ++i) {
    if (off[i + 1] < off[i])
      throw UsageError(fmt::format("'{}': the offsets of {} run backwards", file, example(i)));
    int64_t first = -1;  // the first position whose token the loss learns (0 cannot be a target)
    for (int64_t j = off[i] + 1; j < off[i + 1] && first < 0; ++j)
      if (m[j]) first = j - off[i];
    if (first < 0)
      throw UsageError(fmt::format("'{}': {} has a loss mask that leaves no token to learn from",
                                   file, example(i)));
    if (first > block_size)
      throw UsageError(
          fmt::format("'{}': {} learns nothing before token {}, beyond model.block_size {}: raise "
                      "model.block_size, or drop long examples with prepare_chat.py --max-length",
                      file, example(i), first, block_size));
  }
  return std::make_shared<ChatExamples>(tokens, mask, offsets, block_size,
                                        pairs    ? Layout::kPairs
                                        : packed ? Layout::kPacked
                                                 : Layout::kOne);
}

// The chat template a Hugging Face directory gives its tokenizer: chat_template.jinja, or
// tokenizer_config.json's chat_template.
std::string templateOf(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec))
    return io::readFile((dir / "chat_template.jinja").string());
  if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
    const auto j = io::readJsonFile((dir / "tokenizer_config.json").string());
    if (j.contains("chat_template") && j["chat_template"].is_string())
      return j["chat_template"].get<std::string>();
  }
  return "";
}

}  // namespace

Splits loadChat(const config::DataConfig& cfg, int64_t block_size, int64_t vocab_size) {
  const bool pairs = cfg.dataset == "preference";
  const fs::path dir(cfg.path);
  const auto [vocab, tokenizer] = dataVocabulary(cfg.path, vocab_size);
  Splits out;
  out.tokenizer_file = tokenizer;
  for (auto [split, name] :
       {std::pair{&out.train, "train.safetensors"}, std::pair{&out.test, "val.safetensors"}}) {
    split->source = openExamples((dir / name).string(), block_size, vocab, pairs,
                                 cfg.packing && split == &out.train);
    split->tokens = true;
    split->pairs = pairs;
    split->num_classes = vocab;
  }
  return out;
}

void checkChatMatchesModel(const std::string& data_path, const std::string& model_dir) {
  const fs::path data(data_path), model(model_dir);
  std::error_code ec;
  const auto mine = data / "tokenizer.json", theirs = model / "tokenizer.json";
  if (!fs::is_regular_file(mine, ec) || !fs::is_regular_file(theirs, ec)) return;
  if (io::readFile(mine.string()) != io::readFile(theirs.string()))
    throw UsageError(fmt::format(
        "data.path '{}' was tokenised with another tokenizer than model.init_from's ('{}'): "
        "prepare it again with scripts/prepare_chat.py --model {}",
        data_path, theirs.string(), model_dir));
  const auto used = data / "chat_template.jinja";
  if (fs::is_regular_file(used, ec) && io::readFile(used.string()) != templateOf(model))
    throw UsageError(fmt::format(
        "data.path '{}' was rendered with a chat template ('{}') that is not model.init_from's "
        "tokenizer's ('{}'): prepare it again with scripts/prepare_chat.py --model {}",
        data_path, used.string(), model_dir, model_dir));
}

}  // namespace ltrain::data
