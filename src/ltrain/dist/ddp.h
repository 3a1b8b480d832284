// DistributedDataParallel for LibTorch modules: parameters grouped into buckets (reverse
// registration order, first 1 MiB then bucket_cap_mb, by dtype and device); a post-accumulate hook
// per parameter copies its gradient / world into its bucket; a complete bucket's allreduce starts
// at once, in bucket order on every rank, while backward goes on. finishBackward() waits for them
// and copies the averaged gradients back before the optimizer step.
#pragma once
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ltrain::dist {

struct DdpOptions {
  double first_bucket_mb = 1.0;
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;
  std::string compression = "none";  // none | bf16 | fp16
  std::chrono::milliseconds timeout{1800 * 1000};
  // The training loop's stop vote (train.on_signal), carried by the last bucket's allreduce: two
  // extra elements count the ranks that had SIGTERM or SIGINT pending when it was launched. No
  // collective of its own (a separate one cost 12% of the 2-process MLP's throughput here).
  std::function<int()> pending_signal;
  // ZeRO-1 (dist.zero: 1): each bucket is reduce-scattered instead of allreduced, so that rank r
  // receives the averaged gradients of its 1/world slice of the bucket only (shardGradient); the
  // parameters' .grad are then left as they are (see ZeroOptimizer).
  bool shard_gradients = false;
};

struct DdpStepStats {
  int64_t allreduce_calls = 0;
  std::vector<double> bucket_wait_s;  // time finishBackward waited on each bucket
  double first_launch_s = -1;  // seconds after prepareBackward when the first allreduce started
  double backward_end_s = -1;  // seconds after prepareBackward when finishBackward was entered
};

class DistributedDataParallel {
 public:
  // Broadcasts parameters and buffers from rank 0 and installs the gradient hooks.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          c10::intrusive_ptr<c10d::Backend> pg, int64_t world_size,
                          DdpOptions opts);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void broadcastBuffers();  // before each forward, as broadcast_buffers=True
  // Arms the hooks for the coming backward; sync=false accumulates locally (no_sync).
  void prepareBackward(bool sync);
  // Reduces what the hooks did not launch, waits, writes the averaged gradients. Throws
  // std::runtime_error naming parameters that got no gradient when find_unused_parameters is off.
  void finishBackward();

  size_t bucketCount() const { return buckets_.size(); }
  std::vector<std::vector<std::string>> bucketParameterNames() const;
  const DdpStepStats& lastStep() const { return stats_; }
  // With shard_gradients: bucket b's parameters (in bucket order) with their offsets in the
  // flattened bucket, its length rounded up to a multiple of the world size, and this rank's
  // averaged slice of its gradient (length padded/world; valid after finishBackward).
  struct BucketView {
    std::vector<torch::Tensor> params;
    std::vector<int64_t> offsets;
    int64_t padded = 0;
    torch::Tensor shard_grad;
  };
  BucketView bucket(size_t b) const;
  // After finishBackward: SIGTERM if any rank voted so, else SIGINT if any did, else 0; the same
  // on every rank.
  int stopVote() const { return stop_vote_; }

 private:
  struct Slot {
    torch::Tensor param;
    std::string name;
    size_t bucket;
    int64_t offset, numel;
  };
  struct Bucket {
    std::vector<size_t> slots;
    torch::Tensor buffer;
    size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor shard;  // shard_gradients: this rank's slice of the reduced buffer
  };
  friend struct GradReadyHook;
  void markReady(size_t slot);
  void launchReady();  // under mu_
  void broadcastCoalesced(const std::vector<torch::Tensor>& tensors);
  double now() const;

  std::shared_ptr<torch::nn::Module> module_;
  int stop_vote_ = 0;
  int64_t vote_offset_ = -1;  // the two vote elements in the last bucket, or -1
  c10::intrusive_ptr<c10d::Backend> pg_;
  int64_t world_;
  DdpOptions opts_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<char> ready_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  std::mutex mu_;
  DdpStepStats stats_;
  std::chrono::steady_clock::time_point step_start_;
};

}  // namespace ltrain::dist
