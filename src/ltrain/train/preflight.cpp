#include "ltrain/train/preflight.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <fstream>

#include "ltrain/common/errors.h"
#include "ltrain/config/validate.h"
#include "ltrain/data/dataset.h"
#include "ltrain/models/model.h"

namespace ltrain::train {

std::optional<DataShape> describeData(const config::ExperimentConfig& cfg) {
  const auto& d = cfg.data;
  if (d.dataset == "synthetic") return DataShape{d.synthetic_shape, d.synthetic_classes};
  if (d.dataset == "fashion_mnist" || d.dataset == "mnist") return DataShape{{1, 28, 28}, 10};
  if (d.dataset == "cifar10") return DataShape{{3, 32, 32}, 10};
  if (d.dataset == "cifar100") return DataShape{{3, 32, 32}, 100};
  // The vocabulary is the text's: any size stands in for the layer count.
  if (d.dataset == "text") return DataShape{{cfg.model.block_size}, 256};
  if (d.dataset == "csv") {
    std::ifstream in(data::resolvedDataPath(d) + "/train.csv");
    std::string header;
    if (!in || !std::getline(in, header)) return std::nullopt;
    const auto columns = std::count(header.begin(), header.end(), ',') + 1;
    return DataShape{{columns - 1}, 2};
  }
  return std::nullopt;
}

void checkPipelineStages(int64_t layers, int64_t stages) {
  if (stages < 2 || stages > layers)
    throw UsageError(fmt::format(
        "model.pipeline_stages {}: the model has {} layers to split, expected 2..{}", stages,
        layers, layers));
}

void preflight(const config::LoadedConfig& lc) {
  const auto& cfg = lc.cfg;
  if (cfg.model.placement != config::Placement::kPipeline) return;
  const auto shape = describeData(cfg);
  if (!shape) return;  // the data will say, at the start of training
  torch::NoGradGuard no_grad;
  auto model = models::build(cfg.model, shape->example, shape->classes);
  try {
    checkPipelineStages(static_cast<int64_t>(model->layers->size()), cfg.model.pipeline_stages);
  } catch (const UsageError& e) {
    throw UsageError(lc.where("model.pipeline_stages") + e.what());
  }
}

}  // namespace ltrain::train
