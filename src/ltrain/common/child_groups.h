// Children that run in process groups of their own (spawnInGroup), stopped and reaped one way
// for the launcher (its workers) and the sweep runner (its trials) alike.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace ltrain {

struct Child {
  pid_t pid = -1;  // -1: never started
  bool exited = false;
  int status = 0;  // waitpid's, once exited
};

// `sig` to the whole group of each child still running, and SIGCONT: a stopped child must run
// to act on it (or to die).
void signalGroups(const std::vector<Child*>& children, int sig);
// Marks each child that has exited, without waiting, and kills what it left behind in its group;
// true when one did since the last look.
bool reapExited(const std::vector<Child*>& children);

struct StopOptions {
  double grace_s = 30;                  // how long the children get to exit before SIGKILL
  std::function<void()> poll;           // between looks while waiting (drain their output, say)
  std::function<void(size_t)> on_kill;  // child i did not stop within the grace period
};
// Up to `grace_s` for every started child to exit (`poll` runs between looks), cut short by a
// second stop signal to this process (Ctrl-C twice).
void waitForExit(const std::vector<Child*>& children, double grace_s,
                 const std::function<void()>& poll);
// Stops them: `sig`, up to grace_s for them to exit (cut short by a second stop signal to this
// process: Ctrl-C twice), SIGKILL to those left, every child reaped, and whatever a child left
// behind in its group killed as it is reaped (never later: the group's id may be another's by
// then). A child never started is marked exited.
void stopGroups(const std::vector<Child*>& children, int sig, const StopOptions& o);

}  // namespace ltrain
