// The one place that catches the stop signals: SIGTERM and SIGINT (and SIGHUP, a closed terminal
// or a dropped ssh session, taken as SIGTERM) as a request to stop. The trainer stops after the
// current step (train.on_signal), and start-up at its next phase with Interrupted, so that a job
// preempted while it starts ends "interrupted" at once; the launcher and the sweep runner pass
// the request on to their children (common/child_groups.h).
#pragma once
#include <csignal>

#include <stdexcept>
#include <string>

namespace ltrain {

class StopSignal {
 public:
  // What a second SIGINT (Ctrl-C twice) does: kill this process now (a trainer), or only count
  // (a launcher or a sweep, which then cut their children's grace period short).
  enum class SecondInterrupt { kKill, kCount };
  // Replaces the handlers until destruction and forgets earlier signals. A repeated SIGTERM is
  // the same request (cluster managers and the launcher both deliver one).
  explicit StopSignal(SecondInterrupt second = SecondInterrupt::kKill);
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first signal received (SIGTERM or SIGINT), or 0.
  static int pending();
  // The first signal as it came (SIGHUP too), or 0: a launcher exits 128 + it, as a shell does.
  static int received();
  // How many arrived.
  static int count();
  // Throws Interrupted when a signal is pending; `during` names what was going on.
  static void checkpoint(const std::string& during);

 private:
  struct sigaction old_term_ {
  }, old_int_{}, old_hup_{};
  // An outer instance's state, given back on destruction.
  int old_pending_ = 0, old_received_ = 0, old_count_ = 0, old_kill_on_second_ = 1;
};

// A stop request that arrived before training started: exit 128 + signal, nothing to resume.
struct Interrupted : std::runtime_error {
  Interrupted(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

}  // namespace ltrain
