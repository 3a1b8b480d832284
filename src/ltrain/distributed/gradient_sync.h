// GradientSync: how the replicas' gradients become one and the optimizer steps, behind one
// interface that the training step calls in the same order whatever the strategy:
//   beforeForward(last) for each micro-batch, then finishBackward(), findInf(), clipGradNorm(),
//   optimizerStep(lr).
// Implementations, one file each: ddp_sync.cpp (every rank keeps the whole model and optimizer;
// gradients all-reduced in buckets during backward; one process: nothing to reduce) and
// zero1_sync.cpp (ZeRO-1/2: gradients reduce-scattered, each rank steps its slice, parameters
// all-gathered; ZeRO-3: the parameters stay sharded and are gathered unit by unit around each
// layer's forward and backward, sharded_parameters.h).
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/models/layer_hooks.h"

namespace ltrain::distributed {

class ProcessGroup;

// dist.zero 3: what one rank holds of the model and the optimizer, unit by unit, for a sharded
// checkpoint (train/sharded_checkpoint.h).
struct UnitShard {
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0;  // where it starts in the unit's flat layout
  };
  std::vector<Param> params;
  int64_t padded = 0;    // the flat layout's length, a multiple of the world size
  int64_t begin = 0;     // where this rank's slice starts in it
  torch::Tensor values;  // the slice of the parameters
  int64_t optimizer_step = 0;
  std::vector<std::pair<std::string, torch::Tensor>> state;  // the slice of each state tensor
};

struct SyncStats {
  int64_t collectives = 0;  // gradient collectives issued in the last step
  double wait_s = 0;        // time finishBackward waited for them
};

class GradientSync {
 public:
  // The optimizer of `params`; `decay_masks` (ZeRO's flat slices): per parameter, 1 where the
  // element belongs to a matrix (optimizer.decay matrices), else empty.
  using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(
      std::vector<torch::Tensor> params, std::vector<torch::Tensor> decay_masks)>;
  virtual ~GradientSync() = default;

  // Before each micro-batch's forward; `last`: its backward completes the step's gradients
  // (earlier ones accumulate locally, as DDP's no_sync). The first one clears the gradients.
  virtual void beforeForward(bool first, bool last) = 0;
  // model.pipeline_schedule 1f1b: every micro-batch went through beforeForward(.., last=false)
  // and the next backward through pipeline stage `stage` completes that stage's gradients (its
  // reduction starts then).
  virtual void beforeLastStageBackward(size_t /*stage*/) {}
  // After the last micro-batch's backward: the gradients are averaged over ranks.
  virtual void finishBackward() = 0;
  // Multiplies the gradients by `unscale` (fp16's 1/scale, a 1-element tensor; undefined: 1) and
  // returns a 1-element tensor that is 1 when any rank's gradients hold inf or nan, else 0: the
  // same on every rank. On the device: nothing waits for it.
  virtual torch::Tensor findInf(const torch::Tensor& unscale) = 0;
  // The global L2 norm of the averaged gradients (collective where they are sharded).
  virtual double gradNorm() = 0;
  // Scales the gradients so that their global norm is at most `max_norm` (clip_grad_norm_), on
  // the device.
  virtual void clipGradNorm(double max_norm) = 0;
  // Steps the optimizer at learning rate `lr`, skipped on the device where `found_inf` (from
  // findInf; undefined: never) is 1; afterwards every rank holds the same parameters.
  virtual void optimizerStep(double lr, const torch::Tensor& found_inf) = 0;
  // A skipped step: its gradients are dropped (zeroed, so that logs report them as 0).
  virtual void discardGradients() = 0;

  // Scalars summed over ranks by the step's last collective (no collective of their own): what
  // they mean is the caller's. `fill` writes them just before that collective is issued;
  // extras() holds the sums after optimizerStep (a tensor on the gradients' device).
  virtual torch::Tensor extras() const = 0;

  // Checkpoints hold the optimizer state whole, in a single process's form, so that a run
  // resumes under any strategy and world size. Collective: every rank calls it; `write` runs on
  // rank 0 with an optimizer over the whole model holding the whole state.
  virtual void withWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>& write) = 0;
  // After every rank loaded the same checkpoint into `whole` (an optimizer over the whole model,
  // its state on the CPU): each rank takes its part, next to its parameters.
  virtual void loadWholeOptimizer(const torch::optim::Optimizer& whole) = 0;
  // dist.zero 3: this rank's units (a checkpoint is then written by every rank, each its own
  // part); empty where every rank holds the whole model.
  virtual std::vector<UnitShard> unitShards() { return {}; }
  // dist.zero 3 (collective): unit by unit, in unitShards()' order, `fn(u, params)` on the main
  // rank with unit u's parameters gathered onto the host, in the order of its UnitShard::params.
  virtual void forEachUnitOnHost(
      bool /*main*/, const std::function<void(size_t, const std::vector<torch::Tensor>&)>& /*fn*/) {
  }
  // Bytes of optimizer state this rank holds.
  virtual int64_t optimizerStateBytes() const = 0;
  // Bytes of gradients this rank holds after a step: the parameters' .grad, the buckets' buffers
  // and its reduced slices, each counted once.
  virtual int64_t gradientBytes() const = 0;
  // Bytes of parameters this rank holds between steps (the model's, and any flat copies).
  virtual int64_t parameterBytes() const = 0;
  // ZeRO-3: the most bytes of gathered units' parameters alive at once so far; else 0.
  virtual int64_t gatheredPeakBytes() const { return 0; }

  virtual SyncStats lastStep() const = 0;
  // For the start-up line: "on gloo with 3 gradient buckets", "" for one process.
  virtual std::string describe() const = 0;
};

// A device's share of the model: its parameters (with their names) and buffers.
struct DeviceShare {
  torch::Device device{torch::kCPU};
  ReducedTensors tensors;
};

struct SyncSetup {
  std::shared_ptr<torch::nn::Module> model;
  // One entry per device the model spans (a pipeline's stages, in order), else one.
  std::vector<DeviceShare> shares;
  GradientSync::MakeOptimizer make_optimizer;
  ProcessGroup* pg = nullptr;  // null: one process
  config::DistConfig dist;
  size_t extra_scalars = 0;
  std::function<void(float*)> fill_extras;
  // dist.zero 3: each top-level layer's parameters, and how to install the hooks that run around
  // each layer's forward (null: uninstall).
  std::vector<std::vector<torch::Tensor>> layer_params;
  std::function<void(std::shared_ptr<models::LayerHooks>)> set_layer_hooks;
};

// DDP's all-reduce, or ZeRO-1/2/3 (dist.zero: 1, 2 or 3) with more than one process.
std::unique_ptr<GradientSync> makeGradientSync(SyncSetup setup);

// One file each; makeGradientSync picks.
std::unique_ptr<GradientSync> makeDdpSync(SyncSetup setup);
std::unique_ptr<GradientSync> makeZero1Sync(SyncSetup setup);

}  // namespace ltrain::distributed
