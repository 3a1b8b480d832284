// Gradient buckets reduced while backward runs, as PyTorch's DDP reducer: parameters grouped
// into buckets (reverse registration order, first 1 MiB then bucket_cap_mb, by dtype and
// device); a post-accumulate hook per parameter copies its gradient / world into its bucket and
// makes .grad a view of that slice (PyTorch's gradient_as_bucket_view); a complete bucket's
// collective starts at once, in bucket order on every rank, while backward goes on.
// finishBackward() waits for them; the averaged gradients are then in .grad (copied back only
// where a view cannot be: compression, channels-last weights).
// It knows nothing of what it serves: the collective that reduces a full bucket (all-reduce,
// compressed or not, or reduce-scatter for sharded optimizers) is the caller's BucketCollective
// (bucket_collective.h), as c10d's comm hooks are; extra scalars summed with the last bucket are
// the caller's too.
#pragma once
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ltrain/distributed/bucket_collective.h"
#include "ltrain/distributed/extra_scalars.h"

namespace ltrain::distributed {

class ProcessGroup;

struct ReducerOptions {
  double first_bucket_mb = 1.0;
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;
  // What reduces a full bucket; null: allReduceBuckets in the parameters' dtype. Scattering, rank
  // r receives the averaged gradients of its 1/world slice of each bucket only
  // (BucketLayout::shard); the parameters' .grad are then left as backward wrote them.
  std::shared_ptr<BucketCollective> collective;
  // ZeRO-2 (reduce-scatter only): a parameter's .grad is dropped once copied into its bucket, and
  // a bucket's buffer once its reduce-scatter is done (the next bucket's buffer is made only after
  // that, so one is alive at a time during backward): only the reduced slices stay. A reduced
  // slice whose memory its owner freed between steps (storage emptied) gets memory again when
  // its bucket launches.
  bool release_after_reduce = false;
  // Scalars summed over ranks by the last bucket's all-reduce (no collective of their own; a
  // separate one cost 12% of the 2-process MLP's throughput here). All-reduce only.
  ExtraScalars extras;
  // Buckets the caller chose (dist.zero 3's units): per entry of ReducedTensors::params, its
  // group; one group's parameters form one bucket whatever its size. Empty: by size, as above.
  std::vector<int64_t> groups;
  // Runs (under the reducer's lock) once every parameter of bucket b got its gradient in a
  // backward, armed or not (no_sync): dist.zero 3 frees the unit's gathered parameters there.
  std::function<void(size_t)> on_bucket_grads;
  // After the first synchronised backward, lay the buckets out again in the order the gradients
  // became ready (rank 0's), as PyTorch's reducer does. Size-chosen all-reduce buckets only: the
  // sharded optimizers keep state by bucket layout.
  bool rebuild_buckets = false;
  // Rank 0's parameters broadcast at the start, as DDP's; off for parameters that have no memory
  // yet (a deferred build, made alike on every rank from the seed). Buffers are broadcast always.
  bool broadcast_parameters = true;
};

struct ReducerStats {
  int64_t collectives = 0;
  std::vector<double> bucket_wait_s;  // time finishBackward waited on each bucket
  double first_launch_s = -1;  // seconds after prepareBackward when the first collective started
  double backward_end_s = -1;  // seconds after prepareBackward when finishBackward was entered
};

// One bucket as the reducer lays it out: its parameters (in bucket order) with their offsets in
// the flattened bucket, whose length is rounded up to a multiple of the world size for
// reduce-scatter, and this rank's reduced slice (reduce-scatter; valid after finishBackward).
struct BucketLayout {
  std::vector<torch::Tensor> params;
  std::vector<int64_t> offsets;
  int64_t padded = 0;
  torch::Tensor shard;
};

// What a reducer keeps in step: parameters with their names (for messages), and buffers.
struct ReducedTensors {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::vector<torch::Tensor> buffers;
  static ReducedTensors of(const torch::nn::Module& module);
};

class BucketReducer {
 public:
  // Broadcasts parameters and buffers from rank 0 and installs the gradient hooks. All of them
  // on one device: a process driving several (a pipeline's stages) has one reducer per device,
  // each over a communicator of its own.
  BucketReducer(ReducedTensors tensors, ProcessGroup& pg, ReducerOptions opts);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  void broadcastBuffers();  // before each forward, as broadcast_buffers=True
  // Arms the hooks for the coming backward; sync=false accumulates locally (no_sync).
  void prepareBackward(bool sync);
  // Reduces what the hooks did not launch, waits, writes the averaged gradients. Throws
  // std::runtime_error naming parameters that got no gradient when find_unused_parameters is off.
  void finishBackward();

  // Their sums over ranks, after finishBackward: a tensor on the buckets' device (reading it on
  // the host is the caller's choice of when to synchronise).
  const torch::Tensor& extraScalars() const { return extras_; }

  size_t bucketCount() const { return buckets_.size(); }
  BucketLayout layout(size_t bucket) const;
  std::vector<std::vector<std::string>> bucketParameterNames() const;
  const ReducerStats& lastStep() const { return stats_; }
  // The buckets' buffers and reduced slices alive now (for memory accounting).
  std::vector<torch::Tensor> bufferTensors() const;

 private:
  struct Slot {
    torch::Tensor param;
    std::string name;
    size_t bucket;
    int64_t offset, numel;
  };
  struct Bucket {
    std::vector<size_t> slots;
    torch::Tensor buffer;  // undefined between steps under release_after_reduce
    int64_t length = 0;
    torch::TensorOptions wire;
    size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor shard;  // reduce-scatter: this rank's slice of the reduced buffer
  };
  friend struct GradReadyHook;
  void markReady(size_t slot);
  bool viewsGrad(const Slot& slot) const;
  void launchReady();                                    // under mu_
  void releaseLaunched();                                // under mu_
  void layOutBuckets(const std::vector<size_t>& order);  // slots in bucket order
  void rebuildFromReadyOrder();
  void broadcastCoalesced(const std::vector<torch::Tensor>& tensors);
  bool scatters() const { return opts_.collective->scatters(); }
  double now() const;

  std::vector<torch::Tensor> buffers_;
  ProcessGroup& pg_;
  int64_t world_;
  ReducerOptions opts_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> group_of_;  // per slot, the caller's group (opts_.groups), else -1
  std::vector<char> ready_;
  std::vector<size_t> ready_order_;  // slots as their gradients became ready, first step
  bool rebuilt_ = false;
  std::vector<char> seen_;  // on_bucket_grads: gradients seen in this backward
  std::vector<size_t> seen_per_bucket_;
  int64_t extras_offset_ = -1;  // where the extra scalars sit in the last bucket, or -1
  torch::Tensor extras_;
  torch::Tensor used_dev_;  // find_unused_parameters: per slot, whether a rank used it
  size_t id_;  // this reducer's number in the process (the same on every rank): its store keys
  size_t next_launch_ = 0;
  bool armed_ = false;
  std::mutex mu_;
  ReducerStats stats_;
  std::chrono::steady_clock::time_point step_start_;
};

}  // namespace ltrain::distributed
