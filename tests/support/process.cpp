#include "support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "test_paths.h"

namespace ltrain::test {

namespace {
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& cwd, const std::string& out, const std::string& err,
            bool own_group) {
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (own_group) setpgid(0, 0);
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1), dup2(e, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(127);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  if (own_group) setpgid(pid, pid);
  return pid;
}

ProcessResult collect(pid_t pid, const std::string& out, const std::string& err) {
  int status = 0;
  waitpid(pid, &status, 0);
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = readText(out);
  r.err = readText(err);
  return r;
}
}  // namespace

ProcessResult runProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env, const std::string& cwd) {
  TempDir io;
  const std::string out = io / "out", err = io / "err";
  return collect(spawn(argv, env, cwd, out, err, false), out, err);
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& env) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ltrain-bg-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  out_ = dir_ + "/out", err_ = dir_ + "/err";
  pid_ = spawn(argv, env, "", out_, err_, true);
}

BackgroundProcess::~BackgroundProcess() {
  if (!waited_) {
    ::kill(-pid_, SIGKILL);
    wait();
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void BackgroundProcess::signal(int sig) {
  ::kill(pid_, sig);
}

ProcessResult BackgroundProcess::wait() {
  waited_ = true;
  return collect(pid_, out_, err_);
}

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool portFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

namespace {
struct ProcStat {
  std::string state;
  int ppid = 0, pgrp = 0;
};
// Every process's state, parent and group from /proc/<pid>/stat (the name in parentheses may hold
// spaces, so the fields are read after its closing parenthesis).
std::vector<ProcStat> allProcesses() {
  std::vector<ProcStat> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = readText(e.path().string() + "/stat");
    const auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;  // gone meanwhile
    std::istringstream rest(stat.substr(close_paren + 2));
    ProcStat p;
    if (rest >> p.state >> p.ppid >> p.pgrp) out.push_back(p);
  }
  return out;
}
}  // namespace

// Zombies do not count: a container's PID 1 may never reap the orphans a killed worker leaves.
bool groupAlive(int pgid) {
  for (const auto& p : allProcesses())
    if (p.state != "Z" && p.pgrp == pgid) return true;
  return false;
}

std::vector<int> childGroups(int pid) {
  std::vector<int> out;
  for (const auto& p : allProcesses())
    if (p.ppid == pid && p.state != "Z") out.push_back(p.pgrp);
  return out;
}

ProcessResult runLtrain(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv{LTRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return runProcess(argv, env);
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ltrain-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

int countLines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

}  // namespace ltrain::test
