#include "ltrain/common/spawn.h"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

extern "C" char** environ;

namespace ltrain {

pid_t spawnInGroup(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& overrides, int out_fd,
                   int death_signal) {
  // Everything the child needs is built before the fork: after it, only async-signal-safe calls
  // (the parent may hold threads and locks, e.g. the rendezvous store's server).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!overrides.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  std::vector<char*> cenv, cargv;
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const std::string exec_failed = fmt::format("cannot start '{}'\n", argv.at(0));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, death_signal);
    if (getppid() != parent) _exit(1);  // the parent died before the line above took effect
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);  // ltrain ignores it (see main); the program gets the default
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    execvpe(cargv[0], cargv.data(), cenv.data());
    ssize_t ignored = write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so that the group exists before the parent signals it
  return pid;
}

}  // namespace ltrain
