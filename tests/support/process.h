// Test support: run a program with arguments and environment additions, capture its output and
// exit status; make scratch directories; read small files.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ltrain::test {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string out, err;
};

ProcessResult runProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env = {},
                         const std::string& cwd = "");
// `ltrain ARGS...` from the build tree.
ProcessResult runLtrain(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env = {});

// A process running in the background (its own process group) until wait() or destruction.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env = {});
  ~BackgroundProcess();
  int pid() const { return pid_; }
  void signal(int sig);
  ProcessResult wait();

 private:
  int pid_ = -1;
  std::string out_, err_, dir_;
  bool waited_ = false;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int freePort();
// Whether a TCP listener could bind 127.0.0.1:`port` now.
bool portFree(int port);
// Whether any process (zombies aside) is still in process group `pgid`.
bool groupAlive(int pgid);
// The process groups of the live children of `pid`.
std::vector<int> childGroups(int pid);

// A fresh directory under the system temp dir, removed when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string readText(const std::string& path);
void writeText(const std::string& path, const std::string& text);
int countLines(const std::string& text);

}  // namespace ltrain::test
