#include "ltrain/common/child_groups.h"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <thread>

#include "ltrain/common/stop_signal.h"

namespace ltrain {
namespace {

// A child just reaped: whatever it left behind in its group is killed now, while the group's id
// still names that group. Once the group's last member is gone the id is free for the system to
// give another process, and a SIGKILL sent later (when the job stops) could reach a stranger.
void reaped(Child* c) {
  c->exited = true;
  kill(-c->pid, SIGKILL);
}

}  // namespace

void signalGroups(const std::vector<Child*>& children, int sig) {
  for (auto* c : children)
    if (c->pid > 0 && !c->exited) {  // kill(-(-1)) would signal every process we may
      kill(-c->pid, sig);
      kill(-c->pid, SIGCONT);
    }
}

bool reapExited(const std::vector<Child*>& children) {
  bool any = false;
  for (auto* c : children)
    if (c->pid > 0 && !c->exited && waitpid(c->pid, &c->status, WNOHANG) == c->pid)
      reaped(c), any = true;
  return any;
}

void waitForExit(const std::vector<Child*>& children, double grace_s,
                 const std::function<void()>& poll) {
  using Clock = std::chrono::steady_clock;
  auto running = [&] {
    for (auto* c : children)
      if (c->pid > 0 && !c->exited) return true;
    return false;
  };
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(grace_s));
  const int signals_before = StopSignal::count();
  while (running() && Clock::now() < until && StopSignal::count() <= std::max(signals_before, 1)) {
    if (poll)
      poll();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    reapExited(children);
  }
}

void stopGroups(const std::vector<Child*>& children, int sig, const StopOptions& o) {
  for (auto* c : children)
    if (c->pid <= 0) c->exited = true;
  signalGroups(children, sig);
  waitForExit(children, o.grace_s, o.poll);
  for (size_t i = 0; i < children.size(); ++i)
    if (!children[i]->exited) {
      if (o.on_kill) o.on_kill(i);
      kill(-children[i]->pid, SIGKILL);
    }
  for (auto* c : children) {
    if (c->pid <= 0 || c->exited) continue;  // (an exited child's group was cleared at its reaping)
    while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR) {
    }
    reaped(c);
  }
}

}  // namespace ltrain
