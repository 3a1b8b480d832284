#include "ltrain/checkpoint/checkpointing.h"

#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "ltrain/checkpoint/sharded_checkpoint.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/io/safetensors.h"

namespace ltrain::checkpoint {

// model.safetensors of a run with sharded parameters, written on the main rank as the units come,
// one at a time: the whole model is never in one place. A failed write does not leave the gathers
// early (the others are still in them); once every unit went by, every rank learns of it and raises
// it, so that no rank goes on into the next step alone.
void Checkpointer::saveWeightsStreaming(models::Classifier& model, PlanState& plan,
                                        const std::vector<UnitShard>& units, int64_t step) {
  std::unique_ptr<io::SafetensorsStream> out;
  std::exception_ptr failure;
  if (main_) {
    std::vector<io::SafetensorsStream::Entry> entries;
    for (const auto& u : units)
      for (const auto& p : u.params) entries.push_back({p.name, u.values.scalar_type(), p.shape});
    for (const auto& b : model->named_buffers())
      entries.push_back({b.key(), b.value().scalar_type(), b.value().sizes().vec()});
    try {
      out = std::make_unique<io::SafetensorsStream>(
          run_dir_ + "/model.safetensors", entries,
          std::map<std::string, std::string>{{"step", std::to_string(step)}, {"format", "pt"}});
    } catch (...) {
      failure = std::current_exception();
    }
  }
  plan.forEachUnitOnHost(main_, [&](size_t, const std::vector<torch::Tensor>& params) {
    if (failure || !out) return;
    try {
      for (const auto& p : params) out->write(p);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (main_ && !failure) {
    try {
      for (const auto& b : model->named_buffers()) out->write(b.value());
      out->commit();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  raiseEverywhere(failure, run_dir_ + "/model.safetensors");
}

// Rank 0 alone writes: every rank learns of its failure at once and fails with it, rather than
// going on into a step rank 0 never joins and waiting there for dist.timeout_s.
void Checkpointer::raiseEverywhere(const std::exception_ptr& failure, const std::string& what) {
  const bool failed = pg_ ? pg_->allreduceSum({failure ? 1.0 : 0.0})[0] > 0 : failure != nullptr;
  if (failure) std::rethrow_exception(failure);
  if (failed) throw std::runtime_error("rank 0 could not write " + what + " (its log says why)");
}

void Checkpointer::save(models::Classifier& model, PlanState& plan, int64_t step,
                        const Components& parts) {
  const std::string dir = run_dir_ + "/checkpoints";
  // Where the parameters are sharded (always so on every rank of a run), no rank holds the
  // whole model: every rank writes its own part, at once; then the weights for Python, one unit
  // at a time.
  if (const auto units = plan.unitShards(); !units.empty()) {
    if (!pg_) throw std::logic_error("sharded parameters without a process group");
    last_saved_ = shardedCheckpointPath(dir, step);
    saveShardedCheckpoint(last_saved_, units, *model, parts, *pg_);
    if (main_) pruneCheckpoints(dir, keep_);
    saveWeightsStreaming(model, plan, units, step);
    return;
  }
  last_saved_ = checkpointPath(dir, step);
  std::exception_ptr failure;  // rank 0's, caught so that the plan's collectives still complete
  plan.saveWholeOptimizer([&](torch::optim::Optimizer& whole) {
    if (!main_) return;
    try {
      if (before_write_) before_write_(step);
      saveCheckpoint(last_saved_, *model, whole, parts);
      pruneCheckpoints(dir, keep_);
      // The newest weights, readable by Python (safetensors or torch) under PyTorch's names.
      io::saveSafetensors(run_dir_ + "/model.safetensors", io::moduleState(*model),
                          {{"step", std::to_string(step)}, {"format", "pt"}});
    } catch (...) {
      failure = std::current_exception();
    }
  });
  raiseEverywhere(failure, last_saved_);
}

}  // namespace ltrain::checkpoint
