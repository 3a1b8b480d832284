// dist.zero 3 (FSDP): the parameters themselves sharded across ranks. The model's top-level layers
// are grouped into units (dist.fsdp_unit); a unit's parameters are laid out flat and padded as its
// reducer bucket lays out their gradients, every rank keeps only its 1/world slice of that (the
// tensor its optimizer steps), and the parameters are views of one full flat buffer per unit
// whose memory exists only while the unit is gathered:
//   - all-gathered just before its first layer's forward, freed after its last layer's;
//   - gathered again when backward reaches its last layer's output (an autograd node there),
//     freed once all of its gradients are in its bucket (which the reducer then
//     reduce-scatters);
//   - with prefetch, gathering a unit issues the next one's all-gather (the next in forward, or
//     in backward), so that it travels while this unit computes.
// Memory is handed back by emptying the buffer's storage (as FSDP's _free_storage); the autograd
// graph keeps the parameters it saved, and finds them filled again when its backward runs.
// Under bf16 the full buffers are bf16 (each rank casts its fp32 slice before the all-gather, as
// FSDP2's MixedPrecisionPolicy(param_dtype=bf16)): the parameters are bf16 while gathered, their
// gradients bf16, and the fp32 values exist only in the slices.
// A unit's frozen parameters (a LoRA run's base) are a second flat layout of it, sharded and
// gathered alike but never reduced. Their gradients never come to say the unit's backward is over,
// and the input's gradient still needs them after the adapters' are in: such a unit is freed once
// backward reaches an earlier unit (or at its end).
#pragma once
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

#include "ltrain/config/modes.h"
#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/models/layer_hooks.h"

namespace ltrain::distributed {

class ProcessGroup;

// The unit of each top-level layer (-1: a layer without parameters), numbered in forward order:
// every layer its own (kBlock) or all one (kModel); layers that share a parameter (a tied
// embedding and head) are one unit either way. `layer_params`: each layer's parameters.
std::vector<int64_t> unitsOfLayers(const std::vector<std::vector<torch::Tensor>>& layer_params,
                                   config::FsdpUnit unit);

class ShardedParameters final : public models::LayerHooks {
 public:
  struct Piece {
    BucketLayout layout;  // its parameters, whole (as every rank holds them now), and offsets
    torch::Tensor shard;  // this rank's slice of the flattened piece
  };
  struct UnitInit {
    std::vector<Piece> pieces;  // the trainable parameters' (their bucket's), then any frozen ones
    bool frozen = false;        // some of its parameters are frozen
  };
  // `units` indexed as unitsOfLayers numbers them. Makes every parameter a view of its piece's
  // buffer (of `gathered_dtype`) and frees the buffers.
  ShardedParameters(ProcessGroup& pg, std::vector<UnitInit> units,
                    std::vector<int64_t> unit_of_layer, bool prefetch,
                    torch::ScalarType gathered_dtype = torch::kFloat);
  ~ShardedParameters() override;

  void beforeLayer(size_t layer) override;
  torch::Tensor afterLayer(size_t layer, torch::Tensor out) override;
  // Backward reached the output of unit `u`'s last layer.
  void beforeBackward(size_t u);
  // Unit `u`'s gradients are all in (the reducer's hook): freed unless it holds frozen parameters.
  void gradientsIn(size_t u);
  // Unit `u`'s forward is done.
  void release(size_t u);
  void releaseAll();

  // Collective. Gathers one unit at a time, the main rank copying its parameters to host memory;
  // `fn` then runs with the model's parameters holding those copies (the main rank only) and the
  // parameters become views of their units again: a checkpoint of the whole model without the
  // whole model on any device.
  void withWholeOnHost(bool main, const std::function<void()>& fn);
  // Collective. Gathers the units' pieces one at a time, those of unit order[0] first, in the
  // slices' dtype (fp32 under bf16 too); on the main rank `fn(k, params)` gets the k-th piece's
  // parameters (in its layout's order) copied to the host. Between steps only: one piece's worth
  // of memory at a time.
  void forEachUnitOnHost(bool main, const std::vector<size_t>& order,
                         const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn);

  int64_t shardBytes() const;     // this rank's slices
  int64_t gatheredBytes() const;  // full buffers alive now
  int64_t peakGatheredBytes() const { return peak_gathered_; }
  size_t unitCount() const { return units_.size(); }

 private:
  struct Part {
    BucketLayout layout;
    torch::Tensor shard;
    torch::Tensor full;  // flat, padded; its storage empty while not gathered
    torch::Tensor cast;  // the slice in the buffer's dtype, alive while its all-gather runs
    c10::intrusive_ptr<c10d::Work> gathering;
  };
  struct Unit {
    std::vector<Part> parts;
    bool frozen = false;
    bool gathered = false;
    size_t first_layer = 0, last_layer = 0;
  };
  void gather(size_t u, bool wait);
  static void viewParameters(Part& part);

  ProcessGroup& pg_;
  std::vector<Unit> units_;
  std::vector<int64_t> unit_of_layer_;
  std::vector<size_t> backward_order_;  // units by last layer, last first
  bool prefetch_;
  int64_t peak_gathered_ = 0;
};

}  // namespace ltrain::distributed
