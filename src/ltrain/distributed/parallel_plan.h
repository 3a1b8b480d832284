// The parallel plan: how a model is spread over ranks and devices, decided in one place
// (parallelize) and driven by the training step through one small interface, whatever the
// strategy. Per optimizer step the step calls, in order:
//   prepare(MicroStep::forward(..)) before each micro-batch, finishGradients(unscale),
//   step({lr, clip, found_inf}) (or zeroGradients() for a skipped step);
// the loop reads lastStep() after every step, the reporter gradNorm() and summary();
// checkpoints read and write state().
// Strategies, one file each, are listed in strategies.cpp: ddp_plan.cpp (every rank keeps the
// whole model; gradients all-reduced in buckets while backward runs; one process: nothing to
// reduce), tensor_parallel_plan.cpp (dist.tensor_parallel: each matrix split over a group of
// ranks on one host, DDP across the groups), zero_plan.cpp (ZeRO-1/2: gradients
// reduce-scattered, each rank steps its slice, parameters all-gathered) and zero3_plan.cpp
// (ZeRO-3: parameters stay sharded, gathered unit by unit around each layer's forward and
// backward, sharded_parameters.h), both on zero_sharded_optimizer.h. A new strategy is a new file
// and a row.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ltrain/checkpoint/plan_state.h"
#include "ltrain/common/element_range.h"
#include "ltrain/config/experiment_config.h"
#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/distributed/extra_scalars.h"
#include "ltrain/models/layer_hooks.h"
#include "ltrain/models/model.h"

namespace ltrain::distributed {

// What a plan gives a checkpoint is the checkpoint's interface (checkpoint/plan_state.h).
using checkpoint::PlanState;
using checkpoint::UnitShard;

class ProcessGroup;

// Where the step stands when it calls prepare().
struct MicroStep {
  bool first = false;  // the step's first micro-batch: the gradients are cleared
  // Its backward completes the step's gradients (earlier ones accumulate locally, as DDP's
  // no_sync).
  bool last = false;
  // model.pipeline_schedule 1f1b, >= 0: every micro-batch was prepared with last=false, and the
  // next backward through this pipeline stage completes that stage's gradients.
  int64_t last_backward_of_stage = -1;

  static MicroStep forward(bool first, bool last) { return {first, last, -1}; }
  static MicroStep lastBackwardOf(size_t stage) {
    return {false, false, static_cast<int64_t>(stage)};
  }
};

struct OptimizerStep {
  double lr = 0;
  double clip_grad_norm = 0;  // > 0: the gradients are first scaled to at most this global norm
  // From finishGradients; the step is skipped on the device where it is 1 (undefined: never).
  torch::Tensor found_inf;
};

// What the last step did: read after every step, so nothing here is counted or formatted anew.
struct StepReport {
  int64_t collectives = 0;  // gradient collectives issued
  double wait_s = 0;        // time spent waiting for them
  // dist.expert_parallel: time in the experts' all-to-alls (forward and backward)
  double all_to_all_s = 0;
  // Scalars summed over ranks by the step's last collective (no collective of their own): what
  // they mean is the caller's (PlanSetup::fill_extras). On the gradients' device.
  torch::Tensor extras;
};

// What the plan holds: for the start-up line and summary.json.
struct PlanSummary {
  std::string description;  // "on gloo with 3 gradient buckets"; "" for one process
  int64_t optimizer_state_bytes = 0;
  // After a step: the parameters' .grad, the buckets' buffers and reduced slices, each once.
  int64_t gradient_bytes = 0;
  // Of those, the memory that exists only within a step (a sharded optimizer's reduced slices,
  // freed after its step): LTRAIN_MEMORY_LOG counts it as it comes and goes.
  int64_t gradient_bytes_within_steps = 0;
  int64_t parameter_bytes = 0;      // between steps: the model's, and any flat copies
  int64_t gathered_peak_bytes = 0;  // sharded parameters: the most gathered at once so far
};

class ParallelPlan {
 public:
  // The optimizer of `params`; `decay_ranges` (ZeRO's flat slices): per parameter, the element
  // ranges that belong to matrices (optimizer.decay matrices), else empty.
  using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(
      std::vector<torch::Tensor> params, std::vector<std::vector<ElementRange>> decay_ranges)>;
  virtual ~ParallelPlan() = default;

  // Before each micro-batch's forward, or a 1F1B stage's last backward (MicroStep).
  virtual void prepare(const MicroStep& m) = 0;
  // After the last micro-batch's backward: the gradients are averaged over ranks and multiplied
  // by `unscale` (fp16's 1/scale, a 1-element tensor; undefined: 1). Returns a 1-element tensor,
  // the same on every rank, that is 1 when any rank's gradients hold inf or nan, else 0; on the
  // device, so that nothing waits for it.
  virtual torch::Tensor finishGradients(const torch::Tensor& unscale) = 0;
  // The global L2 norm of the averaged gradients (collective where they are sharded).
  virtual double gradNorm() = 0;
  // Clips (clip_grad_norm_) and steps the optimizer; afterwards every rank holds the same
  // parameters.
  virtual void step(const OptimizerStep& s) = 0;
  // A skipped step: its gradients are dropped (zeroed, so that logs report them as 0).
  virtual void zeroGradients() = 0;
  // After step() or zeroGradients().
  virtual StepReport lastStep() const = 0;
  virtual PlanSummary summary() const = 0;
  virtual PlanState& state() = 0;
  // Collective, between steps (at each log window): where ranks hold copies of parameters that
  // nothing but equal arithmetic keeps equal (tensor parallelism's replicated ones), a comparison
  // of them; std::runtime_error naming the parameter and the rank that left the others.
  virtual void checkReplicas() {}
};

// A device's share of the model: its parameters (with their names) and buffers.
struct DeviceShare {
  torch::Device device{torch::kCPU};
  ReducedTensors tensors;
};

// What a strategy is given to make its plan.
struct PlanSetup {
  std::shared_ptr<torch::nn::Module> model;
  // One entry per device the model spans (a pipeline's stages, in order), else one.
  std::vector<DeviceShare> shares;
  ParallelPlan::MakeOptimizer make_optimizer;
  ProcessGroup* pg = nullptr;  // null: one process
  config::DistConfig dist;
  ExtraScalars extras;                              // PlanHooks::extras
  torch::ScalarType compute_dtype = torch::kFloat;  // PlanHooks::compute_dtype
  // Each top-level layer's parameters (the units of sharded parameters are made of them), and how
  // to install the hooks that run around each layer's forward (null: uninstall).
  std::vector<std::vector<torch::Tensor>> layer_params;
  std::function<void(std::shared_ptr<models::LayerHooks>)> set_layer_hooks;
  // Set when the model was built deferred (its parameters have no memory yet): writes layer i's
  // values into its parameters, once they have memory. Only a strategy that shards the
  // parameters takes such a model.
  std::function<void(size_t layer, const models::WantedElements& wanted)> fill_layer;
  // Tensor parallelism: this plan's ranks hold parts of a larger model, the rest on the ranks of
  // `norm_group`. The gradients' squared norm is then also summed over that group, each
  // parameter's squares weighted by norm_weight (1/size for one every rank of it holds whole).
  ProcessGroup* norm_group = nullptr;
  std::function<double(const torch::Tensor& param)> norm_weight;
};

// A way of spreading a model. The first strategy in strategies() that claims a setup makes its
// plan.
struct Strategy {
  std::string name;
  std::function<bool(const PlanSetup&)> claims;
  std::function<std::unique_ptr<ParallelPlan>(PlanSetup)> make;
};

// The strategies in the order they are tried (strategies.cpp lists them; a test may put its own
// first).
std::vector<Strategy>& strategies();
std::unique_ptr<ParallelPlan> planFor(PlanSetup setup);

// What the trainer adds to a plan: the optimizer, and the extra scalars its stop vote rides on.
struct PlanHooks {
  ParallelPlan::MakeOptimizer make_optimizer;
  ExtraScalars extras;  // StepReport::extras gives them back summed over the ranks
  // The dtype the forward computes in (train.precision): sharded parameters are gathered in it,
  // the fp32 values staying in the shards only (FSDP2's MixedPrecisionPolicy.param_dtype).
  torch::ScalarType compute_dtype = torch::kFloat;
};

// Whether the plan parallelize() makes for dist.* keeps the parameters sharded (dist.zero 3 with a
// process group): the model is then built deferred (models/layerwise.h). Asked before the group
// exists.
bool shardsParameters(const config::DistConfig& dist, bool grouped);

// The one call that decides how a placed model is spread over `pg`'s ranks (null: one process):
// its devices (a pipeline's stages), its layers, and dist.* pick the strategy.
std::unique_ptr<ParallelPlan> parallelize(models::Classifier& model, const config::DistConfig& dist,
                                          ProcessGroup* pg, PlanHooks hooks);

// One file each; strategies.cpp lists them.
std::unique_ptr<ParallelPlan> makeDdpPlan(PlanSetup setup);
std::unique_ptr<ParallelPlan> makeZeroPlan(PlanSetup setup);   // dist.zero 1 and 2
std::unique_ptr<ParallelPlan> makeZero3Plan(PlanSetup setup);  // dist.zero 3
std::unique_ptr<ParallelPlan> makeTensorParallelPlan(PlanSetup setup);
std::unique_ptr<ParallelPlan> makeExpertParallelPlan(PlanSetup setup);  // dist.expert_parallel

}  // namespace ltrain::distributed
