// Sum all-reduce, sum reduce-scatter and all-gather through one shared-memory segment, for CPU
// ranks that all live on one host. Gloo has only network transports: on loopback its all-reduce
// of the 2-process MLP's 0.94 MB bucket takes ~2 ms on 2 cores (memory copies through the
// kernel's TCP stack and its own threads), most of that step's communication. Here every rank
// copies its tensor into its slot of the segment, sums its 1/world part of every slot, and copies
// the others' summed parts back: three passes over memory, two barriers per chunk. (oneCCL and
// DeepSpeed do the same for CPU training; neither is a library this project can take from PyPI
// for its torch.)
// ZeRO-3 reduce-scatters and all-gathers every unit each step. Gloo does the first as a clone of
// the whole bucket and an all-reduce of it, the second through a flat buffer of the whole
// output: each a unit's worth of memory more, on top of the buffers themselves. Here a rank
// copies its input into its slot and reads straight into its output: nothing is allocated.
//
// Each element is summed by one rank, in rank order, so every rank gets the same bits.
// Collectives run on a thread of their own in the order they were issued, as Gloo's do, so a
// bucket's reduction overlaps the rest of backward. A peer that never arrives ends the wait
// after the timeout, and one that exited ends it at once (by its pid), with a message naming it.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ltrain::distributed {

class SharedMemoryCollectives {
 public:
  // Every rank calls it (a collective over the store): rank 0 creates the segment, the others map
  // it, and all of them use it only if every rank could. nullptr otherwise, `why_not` saying why
  // (no shared /dev/shm between the ranks, too little room there). `name`: the segment's name in
  // /dev/shm, "" for a fresh random one (tests give one to prove a taken name is left alone).
  static std::unique_ptr<SharedMemoryCollectives> join(c10d::Store& store, int64_t rank,
                                                       int64_t world,
                                                       std::chrono::milliseconds timeout,
                                                       std::string* why_not, std::string name = {});
  ~SharedMemoryCollectives();
  SharedMemoryCollectives(const SharedMemoryCollectives&) = delete;
  SharedMemoryCollectives& operator=(const SharedMemoryCollectives&) = delete;

  // What it reduces: contiguous CPU tensors of float, double, int32 or int64. Anything else goes
  // to the process group's backend.
  static bool supports(const std::vector<at::Tensor>& io);
  // What it gathers: contiguous CPU tensors of one dtype, any, `out` world times `in`'s size.
  bool canGather(const at::Tensor& out, const at::Tensor& in) const;
  // What it reduce-scatters: supports() both, `in` world times `out`'s size.
  bool canReduceScatter(const at::Tensor& out, const at::Tensor& in) const;

  // Each asynchronous; the Work's wait() rethrows a failure.
  // Sums `io` over ranks in place.
  c10::intrusive_ptr<c10d::Work> allreduce(const std::vector<at::Tensor>& io);
  // `out` gets every rank's `in`, in rank order.
  c10::intrusive_ptr<c10d::Work> allgather(const at::Tensor& out, const at::Tensor& in);
  // `out` gets the sum over ranks of this rank's 1/world part of `in`.
  c10::intrusive_ptr<c10d::Work> reduceScatter(const at::Tensor& out, const at::Tensor& in);

  struct State;  // the mapping, the worker thread and its queue (shm_collectives.cpp)

 private:
  explicit SharedMemoryCollectives(std::unique_ptr<State> s);
  c10::intrusive_ptr<c10d::Work> enqueue(int op, std::vector<at::Tensor> io);
  std::unique_ptr<State> s_;
};

}  // namespace ltrain::distributed
