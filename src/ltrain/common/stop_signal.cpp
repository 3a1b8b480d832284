#include "ltrain/common/stop_signal.h"

#include <fmt/format.h>

#include <csignal>

namespace ltrain {
namespace {

volatile sig_atomic_t g_pending = 0;
struct sigaction g_old_term, g_old_int, g_old_hup;

void onStopSignal(int sig) {
  if (sig == SIGINT && g_pending == SIGINT) {
    // Ctrl-C twice: the user wants out now.
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  if (g_pending == 0) g_pending = sig == SIGHUP ? SIGTERM : sig;
}

}  // namespace

StopSignal::StopSignal() {
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocked read or wait goes on; the loop looks at the flag
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGHUP, &sa, &g_old_hup);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGHUP, &g_old_hup, nullptr);
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
