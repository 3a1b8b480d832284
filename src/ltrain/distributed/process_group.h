// The job's communicator: the TCPStore rendezvous (hosted by rank 0, or by the launcher's agent),
// a barrier that names the ranks that never arrived, and the collective backend (Gloo on CPU,
// NCCL on CUDA), every wait bounded by dist.timeout_s.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/distributed/runtime.h"
#include "ltrain/distributed/shm_collectives.h"
#include "ltrain/distributed/watchdog.h"

namespace ltrain::distributed {

class ProcessGroup {
 public:
  // Rendezvous and backend creation. Throws UsageError for a port in use or a backend that cannot
  // serve `device`, std::runtime_error naming the missing ranks when peers do not arrive in time.
  static std::shared_ptr<ProcessGroup> connect(const Runtime& rt, const config::DistConfig& cfg,
                                               c10::Device device);

  // Another communicator over the same ranks, for collectives on `device` (a pipeline stage's
  // GPU: NCCL wants one device per communicator). It shares this group's store and watchdog.
  std::shared_ptr<ProcessGroup> subgroup(const std::string& name, c10::Device device) const;
  // A communicator over some of the ranks (`members`, global ranks in order, this one among them):
  // a tensor-parallel or data-parallel group of a 2-D mesh. Its runtime() gives this rank's place
  // in it and its size; its store is its own (prefixed by `name`, unique per group), so that its
  // barriers do not meet another group's. Every member calls it, with the same name.
  std::shared_ptr<ProcessGroup> subgroupOf(const std::string& name,
                                           const std::vector<int64_t>& members) const;

  const Runtime& runtime() const { return rt_; }
  // The backend itself: for tests that compare a collective with the backend's own.
  c10::intrusive_ptr<c10d::Backend> backend() const { return backend_; }
  c10::intrusive_ptr<c10d::Store> store() const { return store_; }
  c10::Device device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::string backendName() const { return backend_name_; }
  // Hang detection (see watchdog.h); the training loop reports its step and phase to it.
  Watchdog& watchdog() { return *watchdog_; }
  // Runs on the watchdog's thread just before it ends the process for a hang (the main thread
  // is stuck in a collective): to record the failure. It must not wait for the device.
  void beforeHangExit(std::function<void(const std::string&)> f) {
    *before_hang_exit_ = std::move(f);
  }

  // Waits for a collective. Gloo (CPU): up to dist.timeout_s, seen by the watchdog as
  // communication. NCCL (CUDA): stream-ordered, so the host does not stall: the current stream
  // waits for the collective, and NCCL's own timeout and the heartbeats catch a hang.
  void wait(const c10::intrusive_ptr<c10d::Work>& work);
  // Sum all-reduce of `io` in place, started now: through shared memory where every rank is on
  // this host (dist.shm_allreduce) and the tensors allow, else through the backend.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& io);
  // The other collectives every strategy uses, started now on the backend; wait() them. Here so
  // that one object owns every collective of the job (and can time, trace or reroute them).
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& io);  // rank 0's to all
  c10::intrusive_ptr<c10d::Work> broadcastFrom(std::vector<at::Tensor>& io, int64_t root);
  // `out` (world x in's numel) gets every rank's `in`, in rank order. Through shared memory as
  // allreduce is, where the tensors allow (any dtype).
  c10::intrusive_ptr<c10d::Work> allgatherInto(at::Tensor& out, at::Tensor& in);
  // Rows of `in` (dimension 0) to every rank, in_rows[r] of them to rank r in rank order; `out`
  // gets out_rows[r] rows from rank r, in rank order.
  c10::intrusive_ptr<c10d::Work> allToAll(at::Tensor& out, at::Tensor& in,
                                          std::vector<int64_t> out_rows,
                                          std::vector<int64_t> in_rows);
  // `out` (in's numel / world) gets this rank's slice of the sum of every rank's `in`. Through
  // shared memory as allreduce is, where the tensors allow.
  c10::intrusive_ptr<c10d::Work> reduceScatterInto(at::Tensor& out, at::Tensor& in);
  // Rank 0's out[0] (world tensors shaped as `in`) gets every rank's in[0]; out empty elsewhere.
  c10::intrusive_ptr<c10d::Work> gatherToRankZero(std::vector<std::vector<at::Tensor>>& out,
                                                  std::vector<at::Tensor>& in);
  // Whether collectives go through shared memory (for the start-up line and the tests).
  bool sharedMemory() const { return shm_ != nullptr; }
  // Sum of `values` over all ranks (small reductions: losses, counts).
  std::vector<double> allreduceSum(const std::vector<double>& values);
  // Waits until every rank has called barrier(name); names the missing ranks on timeout. A
  // pending SIGINT or SIGTERM ends the wait (Interrupted) unless `stopping`: the barrier is the
  // stop's own, where a rank waits for the checkpoint the signal asked for.
  void barrier(const std::string& name, bool stopping = false);
  // Rank 0 publishes `value` under `key`; every rank returns it.
  std::string broadcastString(const std::string& key, const std::string& value);
  // A collective that failed because a peer went away says only "connection closed by peer
  // <address>": this names the ranks whose heartbeat stopped. "" when `e` is no collective's.
  std::string explainFailure(const std::exception& e, int64_t step);

 private:
  Runtime rt_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::Device device_{c10::kCPU};
  std::chrono::milliseconds timeout_{0};
  std::string backend_name_;
  std::shared_ptr<Watchdog> watchdog_;
  std::shared_ptr<std::function<void(const std::string&)>> before_hang_exit_;
  std::shared_ptr<SharedMemoryCollectives> shm_;  // null: every collective through backend_

  c10::intrusive_ptr<c10d::Backend> makeBackend(const std::string& prefix,
                                                c10::Device device) const;
};

// While it lives, the watchdog reports this rank as doing `p` (evaluating, checkpointing) rather
// than computing; nothing without a process group.
class PhaseScope {
 public:
  PhaseScope(ProcessGroup* pg, Phase p) : pg_(pg) {
    if (pg_) before_ = pg_->watchdog().phase(), pg_->watchdog().setPhase(p);
  }
  ~PhaseScope() {
    if (pg_) pg_->watchdog().setPhase(before_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  ProcessGroup* pg_;
  Phase before_ = Phase::kCompute;
};

// "gloo" or "nccl" for dist.backend (auto: nccl on CUDA, gloo otherwise); UsageError for a
// mismatch.
std::string chooseBackend(config::Backend configured, c10::Device device);

}  // namespace ltrain::distributed
