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
  std::string a, b, addr_a, addr_b;
  bool ok = false;
  TwoNodes() {
    const std::string id = std::to_string(getpid());
    const std::string net = "10.231." + std::to_string(getpid() % 250 + 1) + ".";
    a = "ltA" + id, b = "ltB" + id, addr_a = net + "1", addr_b = net + "2";
    const std::string va = "ltva" + id, vb = "ltvb" + id;
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
};

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
