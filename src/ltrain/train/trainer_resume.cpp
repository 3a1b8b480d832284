// How a run starts from its checkpoint and is spread over its ranks: the checkpoint rank 0 chose
// (if any) loaded into the model, the optimizer and the components, the model placed and handed to
// the parallel plan, and the optimizer state following it into the plan.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "ltrain/checkpoint/sharded_checkpoint.h"
#include "ltrain/common/memory_phase.h"
#include "ltrain/compute/devices.h"
#include "ltrain/models/layerwise.h"
#include "ltrain/models/lora.h"
#include "ltrain/models/tensor_parallel.h"
#include "ltrain/train/startup.h"
#include "ltrain/train/trainer_parts.h"

namespace ltrain::train {

bool Trainer::resumeAndSpread(const distributed::ParallelPlan::MakeOptimizer& make_optimizer) {
  auto whole = make_optimizer(model_->parameters(), {});  // what a checkpoint's state loads into
  // A model built deferred resumes from a sharded checkpoint by ranges (each rank reads its own
  // slices when the plan makes them). A whole .pt (another strategy's) is read by rank 0 alone,
  // into a model of its own, and written as a sharded checkpoint of one rank that every rank then
  // reads its ranges of: no other rank holds the whole model. Under tensor parallelism the same,
  // into the whole model's twin (models/tensor_parallel.h), of which each rank keeps its part.
  std::shared_ptr<const checkpoint::ShardedCheckpointReader> shards;
  std::string converted;  // that copy, removed once every rank has read it
  auto load = [&](const std::string& path) {
    if (!model_->deferred && !model_->tp)
      return checkpoint::loadCheckpoint(path, *model_, *whole, parts());
    std::string from = path;
    if (!checkpoint::isShardedCheckpoint(path)) {
      from = run_.path + "/checkpoints/.resume-from-whole.shards";
      if (rt_.isMain()) {
        // Its random initialisation must not move the generator the other ranks keep.
        auto gen = at::detail::getDefaultCPUGenerator();
        const auto rng = gen.get_state();
        auto scratch = models::build(cfg_.model, splits_.train.modelInputShape(),
                                     splits_.train.num_classes, splits_.train.tokens);
        models::applyFinetuning(scratch, cfg_, /*starting=*/false);  // the run's adapters
        gen.set_state(rng);
        auto opt = make_optimizer(scratch->parameters(), {});
        checkpoint::loadCheckpoint(path, *scratch, *opt, parts());
        checkpoint::saveAsShardedCheckpoint(from, *scratch, *opt, parts());
      }
      converted = from;
    }
    auto into = models::wholeModel(model_);
    shards = checkpoint::resumeDeferred(from, into, *whole, parts());
  };
  bool resumed = false;
  {
    // The other ranks learn only inside whether rank 0 chose a checkpoint.
    std::optional<MemoryPhase> phase;
    if (run_.resume_from || !rt_.isMain()) phase.emplace("resume");
    resumed = resumeIfAny(run_, load, rt_, pg_.get(), reporter_);
  }
  readTally();  // what a summary written before the first report says
  adoptWorldSize();
  {
    // A deferred model's values are made or read here, unit by unit, as the plan shards it.
    MemoryPhase phase(!model_->deferred               ? "place"
                      : shards                        ? "resume"
                      : !cfg_.model.init_from.empty() ? "init_from"
                                                      : "build");
    compute::placeModel(model_, cfg_.model, devices_);
    const auto compute =
        cfg_.train.precision == config::Precision::kBf16 ? torch::kBFloat16 : torch::kFloat;
    plan_ =
        distributed::parallelize(model_, cfg_.dist, pg_.get(),
                                 {make_optimizer, {StopVote::kScalars, StopVote::fill}, compute});
    setKeptMemory([this] { return keptMemory(); });
    if (shards)
      plan_->state().loadOptimizerRanges(checkpoint::rangeSource(shards));
    else if (resumed)
      plan_->state().loadWholeOptimizer(*whole);
  }
  if (!converted.empty()) {
    if (pg_) pg_->allreduceSum({0.0});  // every rank has read its ranges
    if (rt_.isMain()) checkpoint::removeShardedCheckpoint(converted);
  }
  return resumed;
}

}  // namespace ltrain::train
