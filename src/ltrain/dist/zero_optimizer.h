// ZeRO stage 1 (dist.zero: 1): the optimizer state is sharded across ranks. With the
// DistributedDataParallel in shard_gradients mode, each rank receives the averaged gradients of
// its 1/world slice of every bucket (reduce-scatter), updates that slice of the flattened
// parameters with its own optimizer, and an all-gather gives every rank all updated parameters.
// Per element this is the same arithmetic as plain DDP, so the weights agree to rounding; the
// optimizer state per rank is about 1/world of it.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "ltrain/dist/ddp.h"

namespace ltrain::dist {

// The sum of the squares of `g`'s elements, accumulated in double without a double copy of `g`:
// gradient clipping sums these over whole gradients or ZeRO-1 slices, and in double both give the
// same clip factor.
torch::Tensor sumOfSquares(const torch::Tensor& g);

// Bytes of per-parameter state `opt` holds (SGD's momentum, Adam's moments).
int64_t optimizerStateBytes(const torch::optim::Optimizer& opt);

class ZeroOptimizer {
 public:
  using MakeOptimizer =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;
  // `ddp` must shard gradients (DdpOptions::shard_gradients) and outlive this. `pending_signal`
  // is the training loop's stop vote, carried by the last bucket's all-gather.
  ZeroOptimizer(DistributedDataParallel& ddp, c10::intrusive_ptr<c10d::Backend> pg, int64_t rank,
                int64_t world, const MakeOptimizer& make, std::chrono::milliseconds timeout,
                std::function<int()> pending_signal);

  torch::optim::Optimizer& shardOptimizer() { return *opt_; }
  // The steps below are collectives: every rank calls them in the same order.
  // After finishBackward: whether every rank's gradient slice is finite.
  bool gradientsFinite();
  // The global L2 norm of the averaged gradients.
  double gradNorm();
  // torch::nn::utils::clip_grad_norm_ over all slices together.
  void clipGradNorm(double max_norm);
  // Updates this rank's slice, then gathers every rank's into the model's parameters.
  void step();
  // A skipped step's gradients (inf/nan) set to zero, so that logs report them as the unsharded
  // path does (no communication).
  void clearGradients();
  // After step(): SIGTERM if any rank had it pending, else SIGINT if any did, else 0.
  int stopVote() const { return stop_vote_; }
  // Bytes of optimizer state this rank holds.
  int64_t stateBytes() const;

  // Checkpoints keep the optimizer state in the unsharded optimizer's form (per parameter), so a
  // run can resume with or without ZeRO and on any number of ranks. Collective: gathers the
  // slices into `full`'s state (an optimizer over the model's parameters) on rank 0, which writes
  // checkpoints; the other ranks' `full` stays empty.
  void gatherStateInto(torch::optim::Optimizer& full);
  // Takes this rank's slice of `full`'s state (no communication).
  void loadStateFrom(const torch::optim::Optimizer& full);

 private:
  struct Shard {
    DistributedDataParallel::BucketView bucket;
    torch::Tensor param;  // this rank's slice of the flattened bucket, updated by opt_
  };
  void attachGradients();
  torch::Tensor flatSlice(const Shard& s, const std::vector<torch::Tensor>& per_param) const;

  c10::intrusive_ptr<c10d::Backend> pg_;
  int64_t rank_, world_;
  std::chrono::milliseconds timeout_;
  std::function<int()> pending_signal_;
  std::vector<Shard> shards_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  int stop_vote_ = 0;
};

}  // namespace ltrain::dist
