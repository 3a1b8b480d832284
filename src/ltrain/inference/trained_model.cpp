#include "ltrain/inference/trained_model.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/lora.h"

namespace ltrain::inference {

TrainedClassifier loadTrainedClassifier(const config::LoadedConfig& lc, const std::string& weights,
                                        const std::function<void(models::Classifier&)>& at_start) {
  const auto& cfg = lc.cfg;
  if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
  std::error_code ec;
  const bool shards = std::filesystem::exists(weights + "/index.json", ec);  // dist.zero 3's
  if (!weights.empty() && !shards && !std::filesystem::is_regular_file(weights, ec))
    throw UsageError(
        std::filesystem::is_directory(weights, ec)
            ? fmt::format("--checkpoint '{}' is a directory, expected a .pt or .safetensors file "
                          "or a sharded checkpoint's step-N.shards directory",
                          weights)
            : fmt::format("--checkpoint '{}' not found", weights));
  TrainedClassifier t;
  t.splits = data::loadDataset(cfg.data, static_cast<uint64_t>(cfg.seed), cfg.model.block_size,
                               cfg.model.vocab_size);
  torch::manual_seed(static_cast<uint64_t>(cfg.seed));
  t.model = models::build(cfg.model, t.splits.train.modelInputShape(), t.splits.train.num_classes,
                          t.splits.train.tokens);
  if (weights.empty() || at_start) {  // the model as it starts: model.init_from (and its adapter)
    models::loadInitialWeights(t.model, cfg.model);
    models::applyFinetuning(t.model, cfg, /*starting=*/true);
    if (at_start) at_start(t.model);
  } else {
    models::applyFinetuning(t.model, cfg, /*starting=*/false);  // the weights hold the adapters
  }
  if (!weights.empty()) {
    if (weights.size() > 12 && weights.substr(weights.size() - 12) == ".safetensors")
      io::loadModuleState(*t.model, weights);
    else  // read onto the CPU, whatever device saved it
      checkpoint::loadCheckpointModel(weights, *t.model);
  }
  t.devices = compute::chooseDevices(cfg, distributed::Runtime{});
  compute::bindDevice(t.devices.main);
  compute::placeModel(t.model, cfg.model, t.devices);
  t.model->eval();
  return t;
}

}  // namespace ltrain::inference
