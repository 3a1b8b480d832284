// SIGTERM and SIGINT (and SIGHUP, a closed terminal, taken as SIGTERM) as a request to stop: the
// training loop stops after the current step (train.on_signal), and start-up stops at its next
// phase with Interrupted, so that a job preempted while it starts ends "interrupted" at once.
#pragma once
#include <stdexcept>
#include <string>

namespace ltrain {

class StopSignal {
 public:
  // Replaces the handlers until destruction. A repeated SIGTERM is the same request (cluster
  // managers and the launcher both deliver one); a second SIGINT (Ctrl-C twice) kills.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first signal received (SIGTERM or SIGINT), or 0.
  static int pending();
  // Throws Interrupted when a signal is pending; `during` names what was going on.
  static void checkpoint(const std::string& during);
};

// A stop request that arrived before training started: exit 128 + signal, nothing to resume.
struct Interrupted : std::runtime_error {
  Interrupted(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

}  // namespace ltrain
