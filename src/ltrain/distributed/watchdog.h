// Hang detection for a multi-process job. Each rank publishes a heartbeat in the rendezvous store
// from a thread of its own: a counter, its step and what it is doing. A rank that has waited in
// communication for most of dist.timeout_s reads the others' heartbeats and ends its process with
// an error that names the rank(s) holding the job up: silent ones (no heartbeat: stopped, hung in
// the kernel or dead) or busy ones (alive but not communicating: an endless loop, a slow
// checkpoint). The launcher then tears the job down. It fires before the collectives' own timeout,
// whose message could not say which peer is missing.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ltrain::distributed {

enum class Phase : int { kStartup, kCompute, kCommunicate, kEvaluate, kCheckpoint };
const char* phaseName(Phase p);

class Watchdog {
 public:
  // `connect()` opens a connection of the watchdog's own (a blocking wait on a shared one would
  // stall the heartbeat), whose reads and writes have a deadline (store_sockets.h); it is called
  // again after a read failed, since a client that timed out is out of step. `store_where`
  // (host:port) names the store in the error. `on_hang(message)` must not return (it ends the
  // process).
  using Connect = std::function<c10::intrusive_ptr<c10d::Store>()>;
  Watchdog(Connect connect, std::string store_where, int64_t rank, int64_t world_size,
           std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_hang);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void setStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  void setPhase(Phase p) { phase_.store(static_cast<int>(p), std::memory_order_relaxed); }
  Phase phase() const { return static_cast<Phase>(phase_.load(std::memory_order_relaxed)); }

  // Marks the caller as waiting in communication until it goes (then the previous phase is back).
  class Waiting {
   public:
    explicit Waiting(Watchdog* w);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    Watchdog* w_;
    Phase before_ = Phase::kStartup;
  };

  std::chrono::milliseconds period() const { return period_; }
  // Ten looks per timeout, within [100 ms, 2 s].
  static std::chrono::milliseconds periodFor(std::chrono::milliseconds timeout) {
    return std::clamp<std::chrono::milliseconds>(timeout / 10, std::chrono::milliseconds(100),
                                                 std::chrono::milliseconds(2000));
  }

  // After a collective failed: the ranks whose heartbeat does not move for three periods (dead,
  // or their node went away), to name them in the error. A rank that said it was leaving (a
  // stop signal, or its own failure) is not one of them.
  std::vector<int64_t> silentRanks();
  // When the store has not answered for over two periods: the error that names it (the lost
  // host, not the peers behind it); "" while it answers.
  std::string lostStore();

 private:
  struct Peer {
    std::string beat;  // the last heartbeat read
    std::chrono::steady_clock::time_point changed{};
    bool leaving = false;  // its last beat said it is stopping or failed
  };
  void run();
  // "counter step phase leaving"; leaving: 1 once a stop signal came, or as the watchdog ends.
  void beat(bool leaving = false);
  std::string diagnose(double waited_s);

  Connect connect_;
  std::string store_where_;
  c10::intrusive_ptr<c10d::Store> store_;  // null after a failed read, until connected again
  int64_t rank_, world_size_;
  std::chrono::milliseconds timeout_, period_, limit_;
  std::function<void(const std::string&)> on_hang_;
  std::atomic<int64_t> step_{0};
  std::atomic<int> phase_{static_cast<int>(Phase::kStartup)};
  std::atomic<int64_t> wait_since_ns_{0};  // steady clock; 0: not waiting
  std::atomic<int64_t> store_ok_ns_{0};    // steady clock: the store's last answer
  std::string storeLostMessage(double quiet_s) const;
  std::vector<Peer> peers_;  // guarded by peers_mutex_
  std::mutex peers_mutex_;
  int64_t counter_ = 0;
  bool all_published_ = false;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ltrain::distributed
