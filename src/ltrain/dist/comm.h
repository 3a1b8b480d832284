// The job's communicator: the TCPStore rendezvous (hosted by rank 0, or by the launcher's agent),
// a barrier that names the ranks that never arrived, and the collective backend (Gloo on CPU,
// NCCL on CUDA), every wait bounded by dist.timeout_s.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/dist/runtime.h"
#include "ltrain/dist/watchdog.h"

namespace ltrain::dist {

class Comm {
 public:
  // Rendezvous and backend creation. Throws UsageError for a port in use or a backend that cannot
  // serve `device`, std::runtime_error naming the missing ranks when peers do not arrive in time.
  static std::shared_ptr<Comm> connect(const Runtime& rt, const config::DistConfig& cfg,
                                       c10::Device device);

  const Runtime& runtime() const { return rt_; }
  c10::intrusive_ptr<c10d::Backend> backend() const { return backend_; }
  c10::intrusive_ptr<c10d::Store> store() const { return store_; }
  c10::Device device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::string backendName() const { return backend_name_; }
  // Hang detection (see watchdog.h); the training loop reports its step and phase to it.
  Watchdog& watchdog() { return *watchdog_; }

  // Sum of `values` over all ranks (small reductions: losses, counts).
  std::vector<double> allreduceSum(const std::vector<double>& values);
  // Waits until every rank has called barrier(name); names the missing ranks on timeout.
  void barrier(const std::string& name);
  // Rank 0 publishes `value` under `key`; every rank returns it.
  std::string broadcastString(const std::string& key, const std::string& value);

 private:
  Runtime rt_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  c10::Device device_{c10::kCPU};
  std::chrono::milliseconds timeout_{0};
  std::string backend_name_;
  std::unique_ptr<Watchdog> watchdog_;
};

// "gloo" or "nccl" for dist.backend (auto: nccl on CUDA, gloo otherwise); UsageError for a
// mismatch.
std::string chooseBackend(const std::string& configured, c10::Device device);

}  // namespace ltrain::dist
