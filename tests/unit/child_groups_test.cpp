// Children in process groups of their own (common/child_groups.h): what a child leaves behind in
// its group is killed the moment the child is reaped, while the group's id still names it; a
// SIGKILL to the group sent later, when the job stops, could reach whoever has the id by then.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "ltrain/common/child_groups.h"
#include "ltrain/common/spawn.h"
#include "support/process.h"

namespace {

// Whether `pid` is a live process (not gone, not a zombie waiting for its parent).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] != 'Z';
}

}  // namespace

TEST_CASE("a child's leftovers in its group are killed as soon as the child is reaped") {
  ltrain::test::TempDir dir;
  const std::string out = dir / "out.txt";
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  // The child starts a sleeper in its own group, says its pid, and exits at once.
  ltrain::Child child;
  child.pid = ltrain::spawnInGroup({"sh", "-c", "sleep 60 & echo $!; exit 0"}, {}, fd, SIGKILL);
  ::close(fd);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ltrain::reapExited({&child}) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(child.exited);
  pid_t sleeper = 0;
  std::ifstream(out) >> sleeper;
  REQUIRE(sleeper > 0);
  // Killed by the reaping itself: nothing else signals the group.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !alive(sleeper);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);
  if (!gone) ::kill(sleeper, SIGKILL);
}
