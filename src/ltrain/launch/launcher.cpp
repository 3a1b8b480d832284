#include "ltrain/launch/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "ltrain/common/child_groups.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/spawn.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/distributed/job_record.h"
#include "ltrain/distributed/sockets.h"
#include "ltrain/distributed/store_sockets.h"

#include "ltrain/io/files.h"
#include "ltrain/io/json.h"

namespace ltrain::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kTailLines = 20;
// Every read and write of an agent's store connection: its calls are small and answered at once,
// so one that waits this long means a lost network, and the agent goes on (signals included).
constexpr std::chrono::milliseconds kStoreDeadline{2000};

struct Worker : Child {
  int local_rank = 0, rank = 0;
  int fd = -1;  // read end of the worker's stdout+stderr pipe
  std::string partial;
  std::deque<std::string> tail;
  std::ofstream log;
  std::string error_file;
};

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    return fmt::format("signal {} (SIG{})", WTERMSIG(status), abbrev ? abbrev : "?");
  }
  return "unknown status";
}

bool failed(int status) {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::string clock() {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

void say(const std::string& line) {
  fmt::print(stderr, "ltrain launch: {}\n", line);
}

int validatedNproc(const LaunchOptions& o) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  const int nproc =
      resolveNproc(o.nproc_per_node, gpus, static_cast<int>(std::thread::hardware_concurrency()),
                   o.gpus_per_worker);
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw UsageError(fmt::format("--node-rank {} is outside --nnodes {}", o.node_rank, o.nnodes));
  if (o.program.empty()) throw UsageError("launch: expected a PROGRAM to run after --");
  if (o.nnodes > 1 && o.master_port == 0)
    throw UsageError(
        "--master-port 0 picks a port on this node only; a multi-node job needs a fixed port");
  return nproc;
}

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& o) : o_(o), nproc_(validatedNproc(o)) {
    o_.job_start_unix =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  int run() {
    try {
      return runAttempts();
    } catch (...) {
      stopAll(SIGTERM);  // never leave workers behind, whatever went wrong here
      throw;
    }
  }

 private:
  int runAttempts() {
    hostStore();
    if (store_) joinJob();
    signals_.emplace(StopSignal::SecondInterrupt::kCount);
    if (!o_.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o_.log_dir, ec);
      if (ec)
        throw UsageError(
            fmt::format("--log-dir '{}' cannot be created: {}", o_.log_dir, ec.message()));
    }
    for (int attempt = 0;; ++attempt) {
      if (attempt > 0 && coordinated()) {
        const Join j = joinRound(attempt);
        if (j == Join::kStopped) {
          say(fmt::format("got signal {} while waiting for the other nodes; stopping",
                          StopSignal::received()));
          return 128 + StopSignal::received();
        }
        if (j == Join::kTimedOut) return 1;
      }
      spawnAll(attempt);
      int failed_rank = monitor(attempt);
      // A local worker that fails just after another node's (its collective lost the peer) is
      // the consequence, not the cause: the job reports and follows the first failure.
      if (failed_rank >= 0 && !StopSignal::pending() && secondaryFailure(attempt))
        failed_rank = kPeerFailed;
      if (failed_rank == kPeerFailed) {
        // Another node's worker failed: this node stops and, with restarts left, starts the same
        // new round as every other node (restarts are counted once per job).
        const std::string why = peerFailure(attempt);
        say(fmt::format("{}; stopping this node's workers", why.substr(why.find('|') + 1)));
        stopAll(SIGTERM);
        if (why.rfind("stop|", 0) == 0) return 143;
        if (why.rfind("usage|", 0) == 0) return 2;
        if (attempt >= o_.max_restarts) {
          say(fmt::format("no restarts left (--max-restarts {}); the job failed", o_.max_restarts));
          return 1;
        }
        say(fmt::format("restarting all workers (restart {} of {}, with every node)", attempt + 1,
                        o_.max_restarts));
        continue;
      }
      if (StopSignal::pending()) {
        const int sig = StopSignal::received();
        say(fmt::format("got signal {}; stopping the workers", sig));
        // SIGHUP (a closed terminal, a dropped ssh session) as SIGTERM: the workers checkpoint.
        stopAll(StopSignal::pending());
        // A signal during the last eval or checkpoint: the workers finished all the same.
        bool all_done = true;
        for (const auto& w : workers_) all_done = all_done && w.pid > 0 && !failed(w.status);
        return all_done ? 0 : 128 + sig;
      }
      if (failed_rank < 0) {
        finishTogether(attempt);
        return 0;
      }
      const Worker& w = workers_[failed_rank];
      if (WIFEXITED(w.status) &&
          (WEXITSTATUS(w.status) == 128 + SIGTERM || WEXITSTATUS(w.status) == 128 + SIGINT)) {
        // A worker stopped on a signal of its own (a cluster manager signalled the whole job):
        // its peers stop after the same step and rank 0 checkpoints; wait for them, then stop.
        const int code = WEXITSTATUS(w.status);
        say(fmt::format("rank {} stopped on a signal (exit code {}); not restarting", w.rank,
                        code));
        publishFailure(attempt, fmt::format("stop|node {}'s rank {} stopped on a signal",
                                            o_.node_rank, w.rank));
        waitForExit(children(), o_.grace_s, [this] { pump(50); });
        stopAll(SIGTERM);
        return code;
      }
      const bool usage = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2;
      publishFailure(attempt,
                     fmt::format("{}|node {}'s rank {} failed ({})", usage ? "usage" : "failed",
                                 o_.node_rank, w.rank, describeStatus(w.status)));
      stopAll(SIGTERM);
      if (usage) {
        // Bad usage or input: one line, as from a single process; a restart cannot fix it.
        const std::string why = errorMessage(w);
        if (why.empty()) {
          report(w, attempt);
          say("the failure is bad usage or input (exit code 2); not restarting");
        } else {
          fmt::print(stderr, "ltrain: error: {} (rank {}; bad usage or input, not restarting)\n",
                     why, w.rank);
        }
        return 2;
      }
      report(w, attempt);
      if (attempt >= o_.max_restarts) {
        say(fmt::format("no restarts left (--max-restarts {}); the job failed", o_.max_restarts));
        return 1;
      }
      say(fmt::format("restarting all workers (restart {} of {})", attempt + 1, o_.max_restarts));
    }
  }

  // Restarts across nodes go through node 0's store: the agent whose worker failed publishes it
  // under the round's key, the other agents see it within a poll and start the same new round.
  static std::string failureKey(int attempt) { return fmt::format("/agents/failed/{}", attempt); }
  void publishFailure(int attempt, const std::string& what) {
    if (!coordinated() || store_lost_) return;  // the other nodes' workers fail on their own
    try {
      store_->set(failureKey(attempt), std::vector<uint8_t>(what.begin(), what.end()));
    } catch (const std::exception& e) {
      storeLost(e);
    }
  }
  bool peerFailed(int attempt) {
    if (!coordinated() || store_lost_) return false;
    const auto now = Clock::now();
    if (now < next_peer_check_) return false;
    next_peer_check_ = now + std::chrono::milliseconds(200);
    try {
      return store_->check({failureKey(attempt)});
    } catch (const std::exception& e) {
      // Node 0's agent is gone or out of reach: this node's workers finish or fail on their own
      // (their watchdogs name the lost store), and a restart waits to reach it again.
      storeLost(e);
      return false;
    }
  }
  void storeLost(const std::exception& e) {
    if (store_lost_) return;
    store_lost_ = true;
    const std::string msg = e.what();
    say(fmt::format(
        "node {}'s agent lost the rendezvous store at {}:{} (node 0's agent hosts it): node 0 "
        "stopped, or the network between this host and {} is down: {}",
        o_.node_rank, o_.master_addr, port_, o_.master_addr, msg.substr(0, msg.find('\n'))));
  }
  // Waits up to a second for another node's failure of this round to be published.
  bool secondaryFailure(int attempt) {
    if (!coordinated() || store_lost_) return false;
    const auto until = Clock::now() + std::chrono::seconds(1);
    while (true) {
      try {
        if (store_->check({failureKey(attempt)})) return true;
      } catch (const std::exception& e) {
        storeLost(e);
        return false;
      }
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::string peerFailure(int attempt) {
    try {
      const auto v = store_->get(failureKey(attempt));
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      storeLost(e);
      return "failed|another node's worker failed";
    }
  }

  // A node whose workers all finished says so; node 0's agent, which hosts the store, waits for
  // every node's word (or a failure, up to --join-timeout) before it closes the store, so that
  // no other node's agent or worker sees it vanish while it is still finishing.
  static std::string doneKey(int attempt, int node) {
    return fmt::format("/agents/done/{}/{}", attempt, node);
  }
  void finishTogether(int attempt) {
    if (!coordinated() || store_lost_) return;
    const auto key = [attempt](int node) { return doneKey(attempt, node); };
    try {
      store_->set(key(o_.node_rank), std::vector<uint8_t>{1});
      if (o_.node_rank != 0) return;
      const auto deadline = Clock::now() + std::chrono::seconds(o_.join_timeout_s);
      for (int n = 1; n < o_.nnodes; ++n)
        while (!store_->check({key(n)}) && !store_->check({failureKey(attempt)}) &&
               !StopSignal::pending() && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } catch (const std::exception& e) {
      storeLost(e);
    }
  }

  // Before restart `round`, every node's agent says it is there and waits for all the others (up
  // to --join-timeout): a node cut off from the network then does not make the rest spend their
  // restarts while it is gone; the restart starts when it is back.
  enum class Join { kJoined, kStopped, kTimedOut };
  static std::string roundKey(int round, int node) {
    return fmt::format("/agents/round/{}/{}", round, node);
  }
  Join joinRound(int round) {
    const auto deadline = Clock::now() + std::chrono::seconds(o_.join_timeout_s);
    bool said = false;
    std::string missing;
    while (true) {
      if (StopSignal::pending()) return Join::kStopped;
      try {
        if (store_lost_) reconnectStore();
        // Said every time: a set sent just before the connection broke may never have arrived.
        store_->set(roundKey(round, o_.node_rank), std::vector<uint8_t>{1});
        missing.clear();
        for (int n = 0; n < o_.nnodes; ++n)
          if (!store_->check({roundKey(round, n)}))
            missing += (missing.empty() ? "" : ", ") + std::to_string(n);
        if (missing.empty()) {
          if (said) say("every node is back; restarting");
          return Join::kJoined;
        }
      } catch (const std::exception& e) {
        storeLost(e);
      }
      const std::string where = fmt::format("the rendezvous store at {}:{}", o_.master_addr, port_);
      if (!said) {
        say(store_lost_
                ? fmt::format("cannot reach {} to rejoin for restart {}; trying for up to {} s "
                              "(--join-timeout): is the network to {} down?",
                              where, round, o_.join_timeout_s, o_.master_addr)
                : fmt::format("waiting up to {} s (--join-timeout) for node(s) {} to rejoin "
                              "before restart {}; a node that lost the network rejoins when it "
                              "is back",
                              o_.join_timeout_s, missing, round));
        said = true;
      }
      if (Clock::now() >= deadline) {
        say(store_lost_ ? fmt::format("{} was out of reach for {} s (--join-timeout); the job "
                                      "failed",
                                      where, o_.join_timeout_s)
                        : fmt::format("node(s) {} did not rejoin within {} s (--join-timeout); "
                                      "the job failed",
                                      missing, o_.join_timeout_s));
        return Join::kTimedOut;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  // A new connection for an agent that lost node 0's store (never node 0's own: it hosts it).
  void reconnectStore() {
    if (o_.node_rank == 0) throw std::runtime_error("node 0's own store connection failed");
    store_.reset();
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o_.master_port);
    so.isServer = false;
    so.timeout = std::chrono::seconds(1);  // short tries: a stop signal is seen between them
    store_ = distributed::connectWithDeadline(o_.master_addr, so, kStoreDeadline);
    store_lost_ = false;
    say(fmt::format("node {}'s agent reached the rendezvous store at {}:{} again", o_.node_rank,
                    o_.master_addr, port_));
  }
  bool coordinated() const { return o_.nnodes > 1 && store_; }

  // The job's identity, in node 0's store: its --rdzv-id (generated there when not given), its
  // node count and its world size, and which agent holds each node rank. An agent that does not
  // match (another job's, a second --node-rank 1) is refused by name before it starts anything,
  // and the running job does not notice it.
  void joinJob() {
    if (o_.node_rank == 0) {
      if (o_.run_id.empty() || o_.run_id == "none") o_.run_id = randomId();
      distributed::writeJobRecord(*store_, {o_.run_id, o_.nnodes, int64_t{o_.nnodes} * nproc_});
    } else {
      const auto job = *distributed::readJobRecord(*store_, /*wait=*/true);
      const std::string where = fmt::format("{}:{}", o_.master_addr, port_);
      if (!o_.run_id.empty() && o_.run_id != "none" && o_.run_id != job.id)
        throw UsageError(fmt::format(
            "--rdzv-id {} is not the id of the job at {} ({}): another job's rendezvous? Give "
            "every node the same --rdzv-id, or a port of its own",
            o_.run_id, where, job.id));
      if (job.nodes != o_.nnodes)
        throw UsageError(
            fmt::format("--nnodes {} does not match the job at {} (--nnodes {}, id {})", o_.nnodes,
                        where, job.nodes, job.id));
      o_.run_id = job.id;
    }
    const std::string holder =
        distributed::claim(*store_, fmt::format("/agents/node/{}", o_.node_rank));
    if (!holder.empty())
      throw UsageError(fmt::format(
          "--node-rank {} is already taken in job {} at {}:{} by {}; each node's agent needs a "
          "--node-rank of its own, 0..{}",
          o_.node_rank, o_.run_id, o_.master_addr, port_, holder, o_.nnodes - 1));
  }
  static std::string randomId() {
    std::random_device rd;
    return fmt::format("{:08x}{:08x}", rd(), rd());
  }

  void hostStore() {
    port_ = o_.master_port;
    if (o_.node_rank != 0) {
      // Node 0's agent hosts the store; this agent joins it to take part in restarts.
      if (o_.nnodes > 1) connectStore();
      return;
    }
    c10d::TCPStoreOptions so;
    so.isServer = true;
    so.waitWorkers = false;
    // Bound to the master address alone: loopback for a single node (the default), the address
    // the other nodes dial for a multi-node job.
    so.masterListenFd = distributed::listenOn(o_.master_addr, o_.master_port, o_.nnodes > 1);
    so.port = static_cast<uint16_t>(distributed::boundPort(*so.masterListenFd));
    try {
      store_ = distributed::connectWithDeadline(o_.master_addr, so, kStoreDeadline);
    } catch (const c10::Error& e) {
      throw UsageError(
          fmt::format("{}:{} is already in use or cannot be bound: the launcher's rendezvous store "
                      "cannot listen there (choose another --master-port, or 0 for a free one)",
                      o_.master_addr, o_.master_port));
    }
    port_ = store_->getPort();
  }

  void spawnAll(int attempt) {
    workers_.clear();
    workers_.resize(nproc_);
    const bool omp_set = std::getenv("OMP_NUM_THREADS") != nullptr;
    for (int i = 0; i < nproc_; ++i) {
      Worker& w = workers_[i];
      w.local_rank = i;
      w.rank = o_.node_rank * nproc_ + i;
      const std::string dir =
          o_.log_dir.empty() ? std::filesystem::temp_directory_path().string() : o_.log_dir;
      w.error_file =
          fmt::format("{}/error-{}-attempt{}-rank{}.json", dir, ::getpid(), attempt, w.rank);
      std::filesystem::remove(w.error_file);
      if (!o_.log_dir.empty()) {
        w.log.open(fmt::format("{}/rank_{}.log", o_.log_dir, w.rank), std::ios::app);
        w.log << fmt::format("=== attempt {} started {} ===\n", attempt, clock());
      }
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("launch: pipe() failed");
      // SIGKILL on the launcher's death: a launcher killed outright takes the workers with it.
      const pid_t pid =
          spawnInGroup(o_.program, workerEnv(o_, nproc_, i, port_, attempt, w.error_file, omp_set),
                       fds[1], SIGKILL);
      close(fds[1]);
      w.pid = pid;
      w.fd = fds[0];
    }
  }

  void emit(Worker& w, const std::string& line) {
    fmt::print("[rank {}] {}\n", w.rank, line);
    std::fflush(stdout);
    if (w.log.is_open()) w.log << line << '\n', w.log.flush();
    w.tail.push_back(line);
    if (w.tail.size() > kTailLines) w.tail.pop_front();
  }

  // Reads what the workers printed; returns false when no pipe is left open.
  bool pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (auto& w : workers_)
      if (w.fd >= 0) fds.push_back({w.fd, POLLIN, 0}), owners.push_back(&w);
    if (fds.empty()) {
      if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return false;
    }
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return true;
    char buf[65536];
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = *owners[i];
      ssize_t n = read(w.fd, buf, sizeof buf);
      if (n <= 0) {
        if (!w.partial.empty()) emit(w, w.partial), w.partial.clear();
        close(w.fd);
        w.fd = -1;
        continue;
      }
      w.partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = w.partial.find('\n')) != std::string::npos) {
        emit(w, w.partial.substr(0, nl));
        w.partial.erase(0, nl + 1);
      }
    }
    return true;
  }

  void reap() { reapExited(children()); }

  std::vector<Child*> children() {
    std::vector<Child*> out;
    for (auto& w : workers_) out.push_back(&w);
    return out;
  }

  void connectStore() {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o_.master_port);
    so.isServer = false;
    so.timeout = std::chrono::seconds(120);
    try {
      store_ = distributed::connectWithDeadline(o_.master_addr, so, kStoreDeadline);
    } catch (const c10::Error& e) {
      const std::string msg = e.what_without_backtrace();
      throw std::runtime_error(fmt::format(
          "node {}'s agent cannot reach the rendezvous store at {}:{} (node 0's agent hosts it: "
          "is it running there, and is the port open?): {}",
          o_.node_rank, o_.master_addr, o_.master_port, msg.substr(0, msg.find('\n'))));
    }
  }

  // Until every worker is done (-1) or one failed (its index), or another node's worker failed
  // (kPeerFailed); returns early on a signal.
  static constexpr int kPeerFailed = -2;
  int monitor(int attempt) {
    while (true) {
      pump(100);
      reap();
      closeSilent();
      if (StopSignal::pending()) return -1;
      bool done = true;
      for (auto& w : workers_) done = done && w.exited && !failed(w.status);
      if (!done && peerFailed(attempt)) return kPeerFailed;
      for (size_t i = 0; i < workers_.size(); ++i)
        if (workers_[i].exited && failed(workers_[i].status)) {
          // Let its last words arrive before reporting.
          auto until = Clock::now() + std::chrono::milliseconds(500);
          while (workers_[i].fd >= 0 && Clock::now() < until) pump(50);
          return static_cast<int>(i);
        }
      bool all = true;
      for (auto& w : workers_) all = all && w.exited && w.fd < 0;
      if (all) return -1;
    }
  }

  // Node 0's agent hosts the store: connections that never said a word are closed after a while
  // (store_sockets.h), so that strays cannot pile up descriptors in it.
  void closeSilent() {
    if (o_.node_rank != 0 || !store_ || Clock::now() < next_silent_check_) return;
    next_silent_check_ = Clock::now() + std::chrono::seconds(2);
    const int n = distributed::closeSilentConnections(port_, std::chrono::seconds(10));
    if (n > 0)
      say(
          fmt::format("closed {} connection(s) to the rendezvous store at {}:{} that said nothing "
                      "for 10 s (not ltrain or c10d clients)",
                      n, o_.master_addr, port_));
  }

  void stopAll(int sig) {
    StopOptions o;
    o.grace_s = o_.grace_s;
    o.poll = [this] { pump(50); };
    o.on_kill = [this](size_t i) {
      say(fmt::format("rank {} did not stop within {} s; sending SIGKILL", workers_[i].rank,
                      o_.grace_s));
    };
    stopGroups(children(), sig, o);
    // Drain what is left, but not forever: a process outside the group may hold a pipe open.
    const auto drain_until = Clock::now() + std::chrono::seconds(2);
    while (pump(0) && Clock::now() < drain_until) {
    }
    for (auto& w : workers_)
      if (w.fd >= 0) close(w.fd), w.fd = -1;
  }

  // The message of the worker's torchrun error file, or "" when it left none.
  static std::string errorMessage(const Worker& w) {
    std::error_code ec;
    if (!std::filesystem::exists(w.error_file, ec)) return "";
    try {
      // torchrun's layout, {"message": {"message": TEXT, ...}}, or a bare {"message": TEXT}.
      const io::Json j = io::parseJsonOrDiscard(io::readFile(w.error_file));
      if (!j.is_object() || !j.contains("message")) return "";
      const auto& m = j["message"];
      if (m.is_string()) return m.get<std::string>();
      if (m.is_object() && m.contains("message") && m["message"].is_string())
        return m["message"].get<std::string>();
    } catch (const std::exception&) {
      // The exit status and the last output still say what happened.
    }
    return "";
  }

  void report(const Worker& w, int attempt) {
    say(fmt::format("worker rank {} (local rank {}, pid {}) failed at {} on attempt {}: {}", w.rank,
                    w.local_rank, w.pid, clock(), attempt, describeStatus(w.status)));
    const std::string why = errorMessage(w);
    if (!why.empty()) say(fmt::format("rank {} error: {}", w.rank, why));
    if (!w.tail.empty()) {
      say(fmt::format("last output of rank {}:", w.rank));
      for (const auto& line : w.tail) fmt::print(stderr, "    {}\n", line);
    }
  }

  LaunchOptions o_;
  int nproc_ = 1, port_ = 0;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  Clock::time_point next_peer_check_{}, next_silent_check_{};
  bool store_lost_ = false;
  std::vector<Worker> workers_;
  // From the first worker's start on (a signal before it ends the agent at once), SIGHUP too: a
  // closed terminal must not orphan the workers. A second Ctrl-C cuts the grace period short.
  std::optional<StopSignal> signals_;
};

}  // namespace

void checkLaunchable(const LaunchOptions& opts, config::Backend backend) {
  LaunchOptions o = opts;
  if (o.program.empty()) o.program = {"ltrain"};
  validatedNproc(o);
  if (backend == config::Backend::kNccl && torch::cuda::device_count() == 0)
    throw UsageError(
        "dist.backend=nccl needs CUDA devices and none is available here; use gloo or auto");
}

int runLauncher(const LaunchOptions& opts) {
  Launcher l(opts);
  return l.run();
}

}  // namespace ltrain::launch
