// Starting a child the way the launcher and the sweep runner both need: in a process group of its
// own (a stop reaches everything it starts), with this process's environment plus `overrides`,
// stdout and stderr on `out_fd`, and `death_signal` delivered to it should this process die.
#pragma once
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ltrain {

// argv[0] is looked up on PATH. Throws std::runtime_error when fork fails; when exec fails the
// child writes "cannot start 'PROGRAM'" to `out_fd` and exits 127.
pid_t spawnInGroup(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& overrides, int out_fd,
                   int death_signal);

}  // namespace ltrain
