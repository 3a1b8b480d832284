// Two nodes on one machine: two network namespaces joined by a veth pair, one launcher agent in
// each (--nnodes 2), training together over Gloo/TCP on addresses of the test's own. Needs root
// (CAP_NET_ADMIN) and iproute2; where namespaces cannot be made the test says so and passes.
#include <signal.h>
#include <unistd.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <thread>

#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "support/run_files.h"

#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::TempDir;

namespace {

bool sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// Namespaces "ltA<pid>" (10.231.N.1) and "ltB<pid>" (10.231.N.2), removed on destruction.
struct TwoNodes {
  std::string a, b, addr_a, addr_b, va, vb;
  bool ok = false;
  TwoNodes() {
    const std::string id = std::to_string(getpid());
    const std::string net = "10.231." + std::to_string(getpid() % 250 + 1) + ".";
    a = "ltA" + id, b = "ltB" + id, addr_a = net + "1", addr_b = net + "2";
    va = "ltva" + id, vb = "ltvb" + id;
    ok = sh("ip netns add " + a) && sh("ip netns add " + b) &&
         sh("ip link add " + va + " type veth peer name " + vb) &&
         sh("ip link set " + va + " netns " + a) && sh("ip link set " + vb + " netns " + b) &&
         sh("ip -n " + a + " addr add " + addr_a + "/24 dev " + va) &&
         sh("ip -n " + b + " addr add " + addr_b + "/24 dev " + vb) &&
         sh("ip -n " + a + " link set " + va + " up") &&
         sh("ip -n " + b + " link set " + vb + " up") && sh("ip -n " + a + " link set lo up") &&
         sh("ip -n " + b + " link set lo up");
  }
  ~TwoNodes() {
    sh("ip netns del " + a);
    sh("ip netns del " + b);
  }
  // The link between them, cut at node A's end: node B's packets vanish without a word (no
  // reset, no unreachable), as when a switch or a cable between two hosts fails.
  void cut() const { REQUIRE(sh("ip -n " + a + " link set " + va + " down")); }
  void restore() const { REQUIRE(sh("ip -n " + a + " link set " + va + " up")); }
};

// The steps metrics.jsonl holds so far.
size_t stepsLogged(const std::string& run) {
  std::error_code ec;
  if (!std::filesystem::exists(run + "/metrics.jsonl", ec)) return 0;
  const std::string text = readText(run + "/metrics.jsonl");
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

void waitForSteps(const std::string& run, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (stepsLogged(run) < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(stepsLogged(run) >= n);
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> trainArgs(const std::string& cfg, const std::string& out) {
  return ltrain::test::syntheticRun(
      cfg, out,
      {"data.synthetic_train_samples=640", "data.batch_size=16", "model.hidden=[32]",
       "model.dropout=0.1", "train.epochs=2", "train.log_every=1", "dist.timeout_s=10"});
}

// `ltrain train ... --nnodes 2 --node-rank R` inside namespace `ns`.
std::vector<std::string> agent(const std::string& ns, int node_rank, const std::string& master,
                               int port, std::vector<std::string> train) {
  std::vector<std::string> argv{"ip", "netns", "exec", ns, LTRAIN_BINARY};
  train.insert(train.begin() + 2,
               {"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", std::to_string(node_rank),
                "--master-addr", master, "--master-port", std::to_string(port), "--max-restarts",
                "0", "--grace", "2"});
  argv.insert(argv.end(), train.begin(), train.end());
  return argv;
}

}  // namespace

TEST_CASE("two launcher agents in two network namespaces train as one node would", "[dist]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  auto one = ltrain::test::runLtrain([&] {
    auto a = trainArgs(dir / "c.yaml", dir / "one");
    a.insert(a.begin() + 2, {"--nproc-per-node", "2"});
    return a;
  }());
  REQUIRE(one.exit_code == 0);

  const int port = 29400 + getpid() % 500;
  ltrain::test::BackgroundProcess n0(
      agent(nodes.a, 0, nodes.addr_a, port, trainArgs(dir / "c.yaml", dir / "two")));
  ltrain::test::BackgroundProcess n1(
      agent(nodes.b, 1, nodes.addr_a, port, trainArgs(dir / "c.yaml", dir / "two")));
  auto r0 = n0.wait();
  auto r1 = n1.wait();
  INFO(r0.out << r0.err << r1.out << r1.err);
  REQUIRE(r0.exit_code == 0);
  REQUIRE(r1.exit_code == 0);
  CHECK(ltrain::test::readJson(dir / "two/summary.json")["world_size"] == 2);
  // Same world size and ranks: the same weights as on one node, up to the order in which Gloo's
  // TCP transport adds the float partial sums (measured: last-bit differences).
  auto w1 = ltrain::io::loadSafetensors(dir / "one/model.safetensors");
  auto w2 = ltrain::io::loadSafetensors(dir / "two/model.safetensors");
  REQUIRE(w1.size() == w2.size());
  for (const auto& [name, t] : w1) {
    INFO(name);
    CHECK(torch::allclose(t, w2.at(name), 1e-5, 1e-6));
  }
}

TEST_CASE("killing one node's agent ends the other node's job with a clear error", "[dist]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  auto args = trainArgs(dir / "c.yaml", dir / "run");
  args.insert(args.end() - 2, "data.synthetic_train_samples=640000");  // long enough to be cut
  const int port = 29400 + getpid() % 500 + 1;
  ltrain::test::BackgroundProcess n0(agent(nodes.a, 0, nodes.addr_a, port, args));
  ltrain::test::BackgroundProcess n1(agent(nodes.b, 1, nodes.addr_a, port, args));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(dir / "run/metrics.jsonl") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  n1.signal(SIGKILL);  // the agent alone: its worker follows it (PDEATHSIG)
  n1.wait();
  auto r0 = n0.wait();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r0.out << r0.err);
  CHECK(r0.exit_code == 1);
  CHECK_THAT(r0.err, Contains("because rank(s) 1 went away"));
  CHECK(secs < 20);  // dist.timeout_s is 10
}

TEST_CASE("a worker killed on node 1 restarts the job on both nodes, which then completes",
          "[dist]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  auto args = trainArgs(dir / "c.yaml", dir / "run");
  args.insert(args.end() - 2, "train.checkpoint_every=10");
  const int port = 29400 + getpid() % 500 + 2;
  auto with_restart = [&](int node) {
    auto a = agent(node == 0 ? nodes.a : nodes.b, node, nodes.addr_a, port, args);
    auto at = std::find(a.begin(), a.end(), "--max-restarts");
    *(at + 1) = "1";
    return a;
  };
  // Rank 1 is node 1's only worker: killed after step 15, the newest checkpoint is step 10.
  const std::map<std::string, std::string> kill{{"LTRAIN_FAULT_KILL_AT_STEP", "15:1"}};
  ltrain::test::BackgroundProcess n0(with_restart(0), kill);
  ltrain::test::BackgroundProcess n1(with_restart(1), kill);
  auto r0 = n0.wait();
  auto r1 = n1.wait();
  INFO(r0.out << r0.err << "\n----\n" << r1.out << r1.err);
  CHECK(r1.exit_code == 0);
  CHECK(r0.exit_code == 0);
  CHECK_THAT(r1.err, Contains("restarting all workers (restart 1 of 1)"));
  // Node 0 learned it from the store, not from a worker of its own.
  CHECK_THAT(r0.err, Contains("node 1's rank 1 failed (signal 9 (SIGKILL)); stopping this node's "
                              "workers"));
  CHECK_THAT(r0.err, Contains("restarting all workers (restart 1 of 1, with every node)"));
  CHECK_THAT(r0.out, Contains("resuming from"));
  const auto s = ltrain::test::readJson(dir / "run/summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["steps"] == 40);
}

// A run long enough to be cut mid-way (about 20 ms a step), with a checkpoint every 20 steps.
std::vector<std::string> longRun(const std::string& cfg, const std::string& out) {
  return ltrain::test::syntheticRun(
      cfg, out,
      {"data.synthetic_train_samples=6400", "data.batch_size=16", "model.hidden=[1024,1024]",
       "train.epochs=1", "train.log_every=1", "train.checkpoint_every=20", "dist.timeout_s=10"});
}

std::vector<std::string> withFlag(std::vector<std::string> argv, const std::string& flag,
                                  const std::string& value) {
  auto at = std::find(argv.begin(), argv.end(), flag);
  if (at != argv.end())
    *(at + 1) = value;
  else
    argv.insert(argv.begin() + 5, {flag, value});  // after "ip netns exec NS ltrain"
  return argv;
}

// Agent `node` of a two-node job that may restart twice.
std::vector<std::string> restartingAgent(const TwoNodes& nodes, int node, int port,
                                         const std::vector<std::string>& args) {
  return withFlag(agent(node == 0 ? nodes.a : nodes.b, node, nodes.addr_a, port, args),
                  "--max-restarts", "2");
}

TEST_CASE("a node cut off from the network is gone within the timeout, naming the host it lost",
          "[dist]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  const int port = 29400 + getpid() % 500 + 3;
  auto args = longRun(dir / "c.yaml", dir / "run");
  ltrain::test::BackgroundProcess n0(agent(nodes.a, 0, nodes.addr_a, port, args));
  ltrain::test::BackgroundProcess n1(agent(nodes.b, 1, nodes.addr_a, port, args));
  waitForSteps(dir / "run", 5);
  nodes.cut();
  const auto t0 = std::chrono::steady_clock::now();
  auto r1 = n1.wait();  // node B: its worker's watchdog and its agent both lose the store
  const double b_gone = secondsSince(t0);
  auto r0 = n0.wait();
  INFO(r0.err << "\n----\n" << r1.err);
  // dist.timeout_s 10 and --grace 2: the watchdog's verdict at 8 s, the agent's at once after.
  CHECK(b_gone < 10 + 2 + 3);
  CHECK(r1.exit_code == 1);
  const std::string store = nodes.addr_a + ":" + std::to_string(port);
  CHECK_THAT(r1.err, Contains("rank 1 lost the rendezvous store at " + store));
  CHECK_THAT(r1.err, Contains("the network to its host is down"));
  CHECK_THAT(r1.err, Contains("node 1's agent lost the rendezvous store at " + store));
  CHECK(r0.exit_code == 1);
  CHECK_THAT(r0.err, Contains("rank(s) 1"));
}

TEST_CASE("an agent waiting for a node cut off from the network obeys SIGTERM at once",
          "[dist][slow]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  const int port = 29400 + getpid() % 500 + 4;
  auto args = longRun(dir / "c.yaml", dir / "run");
  ltrain::test::BackgroundProcess n0(restartingAgent(nodes, 0, port, args));
  ltrain::test::BackgroundProcess n1(restartingAgent(nodes, 1, port, args));
  waitForSteps(dir / "run", 5);
  nodes.cut();
  // Both agents are past their workers' failure by then, each waiting for the other to rejoin.
  std::this_thread::sleep_for(std::chrono::seconds(16));
  auto t0 = std::chrono::steady_clock::now();
  n1.signal(SIGTERM);
  auto r1 = n1.wait();
  CHECK(secondsSince(t0) < 4);
  t0 = std::chrono::steady_clock::now();
  n0.signal(SIGTERM);
  auto r0 = n0.wait();
  CHECK(secondsSince(t0) < 4);
  INFO(r0.err << "\n----\n" << r1.err);
  CHECK(r1.exit_code == 143);
  CHECK(r0.exit_code == 143);
  // Neither spent its second restart while the other was gone.
  CHECK_THAT(r0.err, Contains("waiting up to 600 s (--join-timeout) for node(s) 1 to rejoin"));
  CHECK_THAT(r0.err, !Contains("restart 2 of 2"));
  CHECK_THAT(r1.err, !Contains("restart 2 of 2"));
}

TEST_CASE("a restart waits for a node cut off for longer than the timeout, and the job completes",
          "[dist][slow]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  const int port = 29400 + getpid() % 500 + 5;
  auto args = longRun(dir / "c.yaml", dir / "run");
  ltrain::test::BackgroundProcess n0(restartingAgent(nodes, 0, port, args));
  ltrain::test::BackgroundProcess n1(restartingAgent(nodes, 1, port, args));
  waitForSteps(dir / "run", 25);  // past the checkpoint of step 20
  nodes.cut();
  // Twice dist.timeout_s: both nodes' workers fail, and the restart must wait for node B.
  std::this_thread::sleep_for(std::chrono::seconds(25));
  nodes.restore();
  auto r0 = n0.wait();
  auto r1 = n1.wait();
  INFO(r0.out << r0.err << "\n----\n" << r1.out << r1.err);
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK_THAT(r0.err, Contains("for node(s) 1 to rejoin before restart 1"));
  CHECK_THAT(r1.err, Contains("node 1's agent reached the rendezvous store at " + nodes.addr_a));
  CHECK_THAT(r0.err, Contains("every node is back; restarting"));
  CHECK_THAT(r0.err, !Contains("restart 2 of 2"));
  CHECK_THAT(r0.out, Contains("resuming from"));
  const auto s = ltrain::test::readJson(dir / "run/summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["steps"] == 200);
  CHECK(s["restarts"] == 1);
  CHECK(s["job_wall_s"].get<double>() > 25);
  CHECK(s["job_wall_s"].get<double>() > s["wall_s"].get<double>() + 20);
}

// One job of two agents on this host (loopback), and the processes that must not join it.
TEST_CASE("a job refuses agents and ranks that are not its own, and goes on", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  const int port = ltrain::test::freePort();
  auto args = longRun(dir / "c.yaml", dir / "run");
  args.insert(args.end() - 2, "train.epochs=1000");  // it runs until the test stops it
  auto node = [&](int rank, const std::string& id) {
    auto a = args;
    a.insert(a.begin() + 2, {"--nproc-per-node", "1", "--nnodes", "2", "--node-rank",
                             std::to_string(rank), "--master-addr", "127.0.0.1", "--master-port",
                             std::to_string(port), "--rdzv-id", id, "--grace", "5"});
    return a;
  };
  auto bin = [](std::vector<std::string> a) {
    a.insert(a.begin(), LTRAIN_BINARY);
    return a;
  };
  ltrain::test::BackgroundProcess n0(bin(node(0, "job42")));
  ltrain::test::BackgroundProcess n1(bin(node(1, "job42")));
  waitForSteps(dir / "run", 5);
  const std::string where = "127.0.0.1:" + std::to_string(port);

  // A second agent given node rank 1.
  auto dup = ltrain::test::runLtrain(node(1, "job42"));
  CHECK(dup.exit_code == 2);
  CHECK_THAT(dup.err, Contains("--node-rank 1 is already taken in job job42 at " + where + " by "));
  // An agent of another job on the same port.
  auto other = ltrain::test::runLtrain(node(1, "job7"));
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err,
             Contains("--rdzv-id job7 is not the id of the job at " + where + " (job42)"));
  // A rank started by hand on the job's port.
  const std::map<std::string, std::string> stray_env{{"RANK", "4"},
                                                     {"WORLD_SIZE", "5"},
                                                     {"MASTER_ADDR", "127.0.0.1"},
                                                     {"MASTER_PORT", std::to_string(port)}};
  auto stray = ltrain::test::runLtrain(args, stray_env);
  CHECK(stray.exit_code == 2);
  CHECK_THAT(stray.err,
             Contains("this process (RANK=4 WORLD_SIZE=5) is not a member of the job at " + where +
                      " (ltrain launch's job job42, world size 2)"));
  // A copy of rank 1, with its launcher's environment.
  auto copy = ltrain::test::runLtrain(args, {{"RANK", "1"},
                                             {"WORLD_SIZE", "2"},
                                             {"LOCAL_RANK", "0"},
                                             {"MASTER_ADDR", "127.0.0.1"},
                                             {"MASTER_PORT", std::to_string(port)},
                                             {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                             {"TORCHELASTIC_RUN_ID", "job42"},
                                             {"TORCHELASTIC_RESTART_COUNT", "0"},
                                             {"LTRAIN_LAUNCHER", "1"}});
  CHECK(copy.exit_code == 2);
  CHECK_THAT(copy.err, Contains("rank 1 of the job at " + where + " is already running on "));
  CHECK(!std::filesystem::exists(dir / "run/logs/rank_4.log"));

  // The job noticed none of it: it still trains, and stops cleanly when asked.
  const size_t before = stepsLogged(dir / "run");
  waitForSteps(dir / "run", before + 5);
  n0.signal(SIGTERM);
  n1.signal(SIGTERM);
  auto r0 = n0.wait();
  auto r1 = n1.wait();
  INFO(r0.err << "\n----\n" << r1.err);
  CHECK(r0.exit_code == 143);
  CHECK(r1.exit_code == 143);
  CHECK_THAT(r0.err + r1.err, !Contains("failed"));
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["status"] == "interrupted");
}

TEST_CASE("when one rank of a two-node job dies, the others name it alone", "[dist]") {
  TwoNodes nodes;
  if (!nodes.ok) {
    WARN("network namespaces cannot be made here (needs root and iproute2): not tested");
    return;
  }
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  const int port = 29400 + getpid() % 500 + 6;
  auto args = trainArgs(dir / "c.yaml", dir / "run");
  args.insert(args.end() - 2, "data.synthetic_train_samples=64000");
  auto two = [&](int node) {
    return withFlag(agent(node == 0 ? nodes.a : nodes.b, node, nodes.addr_a, port, args),
                    "--nproc-per-node", "2");
  };
  // Rank 3, node 1's second worker, dies after step 10.
  const std::map<std::string, std::string> kill{{"LTRAIN_FAULT_KILL_AT_STEP", "10:3"}};
  ltrain::test::BackgroundProcess n0(two(0), kill);
  ltrain::test::BackgroundProcess n1(two(1), kill);
  auto r0 = n0.wait();
  auto r1 = n1.wait();
  const std::string all = r0.out + r0.err + r1.out + r1.err;
  INFO(all);
  CHECK(r0.exit_code == 1);
  CHECK(r1.exit_code == 1);
  CHECK_THAT(r1.err, Contains("worker rank 3 (local rank 1"));
  // Whatever a surviving rank says of the others names rank 3 alone: ranks stopped by their
  // agent said goodbye first.
  const std::regex named(R"(rank\(s\) ([0-9, ]+) (went away|stopped responding))");
  int seen = 0;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), named); it != std::sregex_iterator();
       ++it, ++seen)
    CHECK((*it)[1].str() == "3");
  CHECK(seen > 0);
}
