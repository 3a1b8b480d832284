// SIGTERM and SIGINT as a request to stop at the end of the current step (train.on_signal), so
// that a preempted job loses nothing beyond its last step. Installed for the training loop only.
#pragma once

namespace ltrain::train {

class StopSignal {
 public:
  // Replaces the SIGTERM/SIGINT handlers until destruction. A repeated SIGTERM is the same request
  // (cluster managers and the launcher both deliver one); a second SIGINT (Ctrl-C twice) kills.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first signal received (SIGTERM or SIGINT), or 0.
  static int pending();
};

}  // namespace ltrain::train
