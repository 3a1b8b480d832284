#include "ltrain/train/preflight.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "ltrain/common/errors.h"
#include "ltrain/config/hf_config.h"
#include "ltrain/config/model_families.h"
#include "ltrain/config/validate.h"
#include "ltrain/data/chat_examples.h"
#include "ltrain/data/dataset.h"
#include "ltrain/models/layers/layer_graph.h"
#include "ltrain/models/model.h"

namespace ltrain::train {

std::optional<DataShape> describeData(const config::ExperimentConfig& cfg) {
  const auto& d = cfg.data;
  if (d.dataset == "synthetic") return DataShape{d.synthetic_shape, d.synthetic_classes};
  if (d.dataset == "fashion_mnist" || d.dataset == "mnist") return DataShape{{1, 28, 28}, 10};
  if (d.dataset == "cifar10") return DataShape{{3, 32, 32}, 10};
  if (d.dataset == "cifar100") return DataShape{{3, 32, 32}, 100};
  // The vocabulary is model.vocab_size, or the data's, known once it is read (0: not known).
  if (d.dataset == "text" || d.dataset == "tokens" || d.dataset == "chat" ||
      d.dataset == "preference")
    return DataShape{{cfg.model.block_size}, cfg.model.vocab_size, true};
  if (d.dataset == "csv") {
    std::ifstream in(data::resolvedDataPath(d) + "/train.csv");
    std::string header;
    if (!in || !std::getline(in, header)) return std::nullopt;
    const auto columns = std::count(header.begin(), header.end(), ',') + 1;
    return DataShape{{columns - 1}, 0};  // the label column's values say how many classes
  }
  return std::nullopt;
}

void checkPipelineStages(int64_t layers, int64_t stages) {
  if (stages < 2 || stages > layers)
    throw UsageError(
        fmt::format("model.pipeline_stages {}: the model has {} layers to split, expected 2..{}",
                    stages, layers, layers));
}

// "c.yaml:12: " for a layer written on line 12 of the file that set model.layers.
std::string layerWhere(const config::LoadedConfig& lc, int line) {
  if (!lc.explicitly_set.count("model.layers")) return "";
  const std::string& src = lc.sources.at("model.layers");
  const auto colon = src.rfind(':');
  if (line <= 0 || colon == std::string::npos || src.rfind("override", 0) == 0) return src + ": ";
  return fmt::format("{}:{}: ", src.substr(0, colon), line);
}

namespace {

// A data.path that is not there, named where the config sets it (ltrain config says it too).
void checkDataPath(const config::LoadedConfig& lc) {
  const auto& d = lc.cfg.data;
  const std::string& path = d.path;  // (the default location's absence is the loader's to name)
  std::error_code ec;
  if (path.empty() || d.dataset == "synthetic" || std::filesystem::exists(path, ec)) return;
  throw UsageError(fmt::format("{}data.path '{}' does not exist: data.dataset {} reads {}",
                               lc.where("data.path"), path, d.dataset,
                               d.dataset == "text" ? "a text file" : "a directory"));
}

}  // namespace

void preflight(const config::LoadedConfig& lc) {
  const auto& cfg = lc.cfg;
  checkDataPath(lc);
  if ((cfg.data.dataset == "chat" || cfg.data.dataset == "preference") &&
      config::isHfModelDir(cfg.model.init_from))
    data::checkChatMatchesModel(cfg.data.path, cfg.model.init_from);
  const bool pipeline = cfg.model.placement == config::Placement::kPipeline;
  const bool own_model = config::modelFamily(cfg.model.name).users_own;
  if (!pipeline && !own_model) return;
  const auto shape = describeData(cfg);
  if (!shape) return;  // the data will say, at the start of training
  torch::NoGradGuard no_grad;
  models::Classifier model{nullptr};
  try {
    model = models::build(cfg.model, shape->example, shape->classes, shape->tokens);
  } catch (const models::LayerError& e) {
    throw UsageError(layerWhere(lc, e.line) + e.what());
  }
  if (!pipeline) return;
  try {
    checkPipelineStages(static_cast<int64_t>(model->layers->size()), cfg.model.pipeline_stages);
  } catch (const UsageError& e) {
    throw UsageError(lc.where("model.pipeline_stages") + e.what());
  }
}

std::string describeModel(const config::LoadedConfig& lc) {
  const auto& cfg = lc.cfg;
  auto shape = describeData(cfg);
  if (!shape || shape->classes <= 0) {  // the data says: read it
    auto splits = data::loadDataset(cfg.data, static_cast<uint64_t>(cfg.seed), cfg.model.block_size,
                                    cfg.model.vocab_size);
    shape =
        DataShape{splits.train.modelInputShape(), splits.train.num_classes, splits.train.tokens};
  }
  torch::NoGradGuard no_grad;
  try {
    return models::modelSummary(cfg.model, shape->example, shape->classes, shape->tokens);
  } catch (const models::LayerError& e) {
    throw UsageError(layerWhere(lc, e.line) + e.what());
  }
}

}  // namespace ltrain::train
