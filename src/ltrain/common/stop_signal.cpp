#include "ltrain/common/stop_signal.h"

#include <fmt/format.h>

#include <csignal>

namespace ltrain {
namespace {

volatile sig_atomic_t g_pending = 0, g_received = 0, g_count = 0, g_kill_on_second = 1;

void onStopSignal(int sig) {
  g_count = g_count + 1;
  if (g_kill_on_second && sig == SIGINT && g_pending == SIGINT) {
    // Ctrl-C twice: the user wants out now.
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  if (g_pending == 0) g_pending = sig == SIGHUP ? SIGTERM : sig, g_received = sig;
}

}  // namespace

StopSignal::StopSignal(SecondInterrupt second)
    : old_pending_(g_pending),
      old_received_(g_received),
      old_count_(g_count),
      old_kill_on_second_(g_kill_on_second) {
  g_pending = 0, g_received = 0, g_count = 0;
  g_kill_on_second = second == SecondInterrupt::kKill ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocked read or wait goes on; the loop looks at the flag
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGHUP, &sa, &old_hup_);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
  // An outer instance (a trainer inside a test) sees its own again.
  g_pending = old_pending_, g_received = old_received_, g_count = old_count_;
  g_kill_on_second = old_kill_on_second_;
}

int StopSignal::received() {
  return g_received;
}

int StopSignal::count() {
  return g_count;
}

int StopSignal::pending() {
  return g_pending;
}

void StopSignal::checkpoint(const std::string& during) {
  const int sig = g_pending;
  if (sig == 0) return;
  throw Interrupted(sig, fmt::format("stopped by {} {}, before the first step: nothing to resume",
                                     sig == SIGINT ? "SIGINT" : "SIGTERM", during));
}

}  // namespace ltrain
