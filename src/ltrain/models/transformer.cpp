#include "ltrain/models/transformer.h"

#include <fmt/format.h>

#include "ltrain/config/option_builder.h"
#include "ltrain/config/validate.h"

namespace ltrain::models {

std::vector<config::Option> transformerOptions() {
  return {
      LT_OPT(model.n_layer, "transformer blocks", int64_t{4}).atLeast(1),
      LT_OPT(model.n_head, "attention heads (dividing model.n_embd)", int64_t{4}).atLeast(1),
      LT_OPT(model.n_embd, "embedding width", int64_t{128}).atLeast(1),
      LT_OPT(model.block_size,
             "context length in tokens; text and token shards are cut into blocks of this length",
             int64_t{128})
          .atLeast(1),
      LT_OPT(model.tie_weights,
             "the output head reuses the token embedding matrix (GPT-2's weight tying)", true),
      LT_OPT(model.vocab_size,
             "vocabulary size; 0: the data's (a text file's characters, or the tokenizer.json "
             "beside token shards); larger pads it (nanoGPT's 50304)",
             int64_t{0})
          .atLeast(0),
  };
}

std::vector<std::string> transformerKeys() {
  std::vector<std::string> out;
  for (const auto& o : transformerOptions()) out.push_back(o.path);
  return out;
}

void headsDivideWidth(const config::LoadedConfig& lc) {
  const auto& m = lc.cfg.model;
  if (m.n_embd % m.n_head != 0)
    config::refuse(lc, config::setOne(lc, "model.n_head", "model.n_embd"),
                   fmt::format("model.n_embd ({}) must be a multiple of model.n_head ({})",
                               m.n_embd, m.n_head));
}

void tensorParallelDivides(const config::LoadedConfig& lc, int64_t n, const std::string& key,
                           int64_t v) {
  if (v % n != 0)
    config::refuse(lc, config::setOne(lc, key, "dist.tensor_parallel"),
                   fmt::format("dist.tensor_parallel {} must divide {} ({}): each rank holds "
                               "whole heads and 1/{} of the rest",
                               n, key, v, n));
}

double transformerFlops(const config::ModelConfig& m, int64_t params, int64_t lookup_only,
                        int64_t head_dim, int64_t attended) {
  return 6.0 * static_cast<double>(params - lookup_only) +
         12.0 * static_cast<double>(m.n_layer * m.n_head) * static_cast<double>(head_dim) *
             static_cast<double>(attended);
}

}  // namespace ltrain::models
