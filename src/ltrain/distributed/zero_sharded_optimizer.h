// What ZeRO's stages share (dist.zero 1, 2, 3): the optimizer state sharded across ranks. The
// bucket reducer reduce-scatters each bucket, so each rank receives the averaged gradients of its
// 1/world slice; it updates that slice of the flattened parameters with its own optimizer. Per
// element this is plain DDP's arithmetic, so the weights agree to rounding; the optimizer state
// per rank is about 1/world of it. How the updated slices reach the next forward is the stage's:
// ZeRO-1/2 all-gather them at once (zero_plan.cpp), ZeRO-3 keeps only the slices and gathers each
// unit around its forward and backward (zero3_plan.cpp).
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "ltrain/common/element_range.h"
#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/distributed/parallel_plan.h"

namespace ltrain::distributed {

class ShardedOptimizerPlan : public ParallelPlan, protected PlanState {
 public:
  struct Shard {
    BucketLayout bucket;
    torch::Tensor param;  // this rank's slice of the flattened bucket, updated by opt_
    torch::Tensor grad;   // its gradient where the bucket reduces in another dtype
  };
  // The stage's reducer options (given ReducedTensors::of the model, in its parameters' order),
  // and each bucket's first values of this rank's slice `mine` of it (null: the parameters' own,
  // flatSlice). Called during construction: neither may use the stage's own members.
  using Configure = std::function<void(ReducerOptions&, const ReducedTensors&)>;
  using FirstSlice = std::function<torch::Tensor(const Shard&, const ElementRange& mine)>;

  void prepare(const MicroStep& m) override;
  torch::Tensor finishGradients(const torch::Tensor& unscale) override;
  double gradNorm() override { return globalNorm().item<double>(); }
  void step(const OptimizerStep& s) override;
  void zeroGradients() override;
  StepReport lastStep() const override;
  PlanSummary summary() const override;
  PlanState& state() override { return *this; }

 protected:
  ShardedOptimizerPlan(const PlanSetup& s, const Configure& configure,
                       const FirstSlice& first_slice);

  // After the optimizer's step, or a skipped one: whatever the next forward needs of the updated
  // slices, and the step's extras summed over the ranks (into extras_).
  virtual void afterStep() = 0;
  // After every bucket's gradients were reduced.
  virtual void afterBackward() {}
  // The stage's parameter bytes and description.
  virtual void describe(PlanSummary& r) const = 0;
  // On rank 0, `whole` (the gathered state over the whole model) to `write`; ZeRO-3 gathers its
  // parameters around it.
  virtual void writeWhole(torch::optim::Optimizer& whole,
                          const std::function<void(torch::optim::Optimizer&)>& write);

  void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>& write) override;
  void loadWholeOptimizer(const torch::optim::Optimizer& whole) override;
  void loadOptimizerRanges(const RangeSource& source) override;

  // This rank's slice of the flattened, zero-padded concatenation of `per_param` (one tensor per
  // parameter of the bucket, each of that parameter's size, all of one dtype), on their device.
  torch::Tensor flatSlice(const Shard& s, const std::vector<torch::Tensor>& per_param) const;
  // This rank's element range of a bucket's flat layout.
  ElementRange mine(const Shard& s) const { return rankSlice(s.bucket.padded, rank_, world_); }

  std::shared_ptr<torch::nn::Module> model_;
  ProcessGroup& pg_;
  int64_t rank_, world_;
  int64_t stage_;  // 1, 2 or 3
  ParallelPlan::MakeOptimizer make_optimizer_;
  ExtraScalars extras_given_;
  std::unique_ptr<BucketReducer> reducer_;
  std::vector<Shard> shards_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  torch::Tensor extras_;

 private:
  // The norm over every rank's slices: a 0-d double on the device, summed by a collective.
  torch::Tensor globalNorm();
  void freeGradients();
  torch::Tensor weightedSquares() const;
  std::vector<torch::Tensor> shardGradients() const;
  void gatherStateInto(torch::optim::Optimizer& whole);

  bool has_buffers_ = false;
  ProcessGroup* norm_group_;
  std::function<double(const torch::Tensor&)> norm_weight_;
};

}  // namespace ltrain::distributed
