// The launcher as torchrun users rely on it: environment, prefixed output and logs, failure
// detection and teardown, restarts that resume, signal forwarding, clear rendezvous errors, and the
// same binary under the real torchrun.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<std::string> syntheticTrain(const std::string& cfg, const std::string& out) {
  return ltrain::test::syntheticRun(
      cfg, out,
      {"data.synthetic_train_samples=640", "data.batch_size=16", "model.hidden=[32]",
       "train.epochs=2", "train.log_every=1", "train.checkpoint_every=4"});
}
std::vector<int> trainSteps(const std::string& metrics_path) {
  std::vector<int> steps;
  for (const auto& j : ltrain::test::metricRecords(metrics_path, "train"))
    steps.push_back(j["step"].get<int>());
  return steps;
}
}  // namespace

TEST_CASE("launch gives each worker torchrun's environment and prefixes its output", "[dist]") {
  TempDir dir;
  auto r = runLtrain(
      {"launch", "--nproc-per-node", "2", "--master-port", "0", "--log-dir", dir / "logs", "--",
       "sh", "-c",
       "echo env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $TORCHELASTIC_USE_AGENT_STORE "
       "$OMP_NUM_THREADS $MASTER_ADDR"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("[rank 0] env 0 0 2 2 True 1 127.0.0.1"));
  CHECK_THAT(r.out, Contains("[rank 1] env 1 1 2 2 True 1 127.0.0.1"));
  CHECK_THAT(readText(dir / "logs/rank_1.log"), Contains("env 1 1 2 2"));
}

TEST_CASE("a worker killed mid-training stops the job, and the report names the rank and signal",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: k\n");
  auto args = syntheticTrain(dir / "c.yaml", dir / "run");
  args.insert(args.begin() + 2, {"--nproc-per-node", "2", "--max-restarts", "0"});
  const auto t0 = Clock::now();
  auto r = runLtrain(args, {{"LTRAIN_FAULT_KILL_AT_STEP", "6:1"}});
  const double secs = since(t0);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("worker rank 1"));
  CHECK_THAT(r.err, Contains("signal 9 (SIGKILL)"));
  CHECK_THAT(r.err, Contains("no restarts left"));
  CHECK(secs < 30);  // start-up, 6 steps and the teardown: nothing waits for a timeout
}

TEST_CASE("with a restart left, the job resumes from its checkpoint and every step is done once",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: k\n");
  auto args = syntheticTrain(dir / "c.yaml", dir / "run");
  args.insert(args.begin() + 2, {"--nproc-per-node", "2", "--max-restarts", "1"});
  auto r = runLtrain(args, {{"LTRAIN_FAULT_KILL_AT_STEP", "6:1"}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("restarting all workers (restart 1 of 1)"));
  CHECK_THAT(r.out, Contains("resuming from"));
  const auto steps = trainSteps(dir / "run/metrics.jsonl");
  std::vector<int> expected(40);
  std::iota(expected.begin(), expected.end(),
            1);  // 640 / 2 ranks / 16 = 20 steps per epoch, 2 epochs
  CHECK(steps == expected);
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["status"] == "completed");
}

TEST_CASE("a worker's bad input is reported with exit code 2 and not restarted", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: k\n");
  // A directory without the dataset's files: found by the workers as they load the data (a
  // data.path that does not exist is refused before any worker starts).
  std::filesystem::create_directories(dir / "empty");
  auto r = runLtrain({"train", dir / "c.yaml", "data.path=" + (dir / "empty"), "--nproc-per-node",
                      "2", "--max-restarts", "3", "--output-dir", dir / "run"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("not restarting"));
  CHECK_THAT(r.err, Contains("train-images-idx3-ubyte.gz' not found"));
  CHECK(ltrain::test::countLines(r.err) == 1);  // one line, as from a single process
}

TEST_CASE("SIGTERM to the launcher reaches every worker and nothing is left behind", "[dist]") {
  ltrain::test::BackgroundProcess launcher({LTRAIN_BINARY, "launch", "--nproc-per-node", "2",
                                            "--master-port", "0", "--grace", "2", "--", "sh", "-c",
                                            "echo ready; sleep 600 & wait"});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // The workers run in process groups of their own; remember them to check they are gone.
  const std::vector<int> groups = ltrain::test::childGroups(launcher.pid());
  REQUIRE(groups.size() == 2);
  const auto t0 = Clock::now();
  launcher.signal(SIGTERM);
  auto r = launcher.wait();
  CHECK(r.exit_code == 143);
  CHECK(since(t0) < 10);
  for (int g : groups) CHECK(!ltrain::test::groupAlive(g));
}

TEST_CASE("rendezvous errors name the address, the port and the missing ranks", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: k\n");
  // A port someone else holds.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto busy = runLtrain({"launch", "--nproc-per-node", "2", "--master-port", port, "--", "true"});
  CHECK(busy.exit_code == 2);
  CHECK_THAT(busy.err, Contains("127.0.0.1:" + port + " is already in use"));
  auto worker = runLtrain(
      syntheticTrain(dir / "c.yaml", dir / "run"),
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  CHECK(worker.exit_code == 2);
  CHECK_THAT(worker.err, Contains("127.0.0.1:" + port + " is already in use"));
  close(fd);

  // Rank 1 never starts: rank 0 names it within dist.timeout_s.
  auto args = syntheticTrain(dir / "c.yaml", dir / "run2");
  args.push_back("dist.timeout_s=3");
  const auto t0 = Clock::now();
  auto alone = runLtrain(args, {{"RANK", "0"},
                                {"WORLD_SIZE", "3"},
                                {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", std::to_string(ltrain::test::freePort())}});
  CHECK(alone.exit_code == 1);
  CHECK_THAT(alone.err, Contains("rank(s) 1, 2 never arrived"));
  CHECK(since(t0) < 15);
}

TEST_CASE("the same binary trains under the real torchrun, standalone and static", "[dist][slow]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: k\n");
  for (std::string mode : {"standalone", "static"}) {
    std::vector<std::string> argv{LTRAIN_TORCHRUN, "--nproc-per-node", "2"};
    if (mode == "standalone")
      argv.push_back("--standalone");
    else
      argv.insert(argv.end(), {"--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1",
                               "--master-port", std::to_string(ltrain::test::freePort())});
    argv.insert(argv.end(), {"--no-python", LTRAIN_BINARY});
    auto train = syntheticTrain(dir / "c.yaml", dir / ("run-" + mode));
    argv.insert(argv.end(), train.begin(), train.end());
    auto r = ltrain::test::runProcess(argv);
    INFO(mode << "\n" << r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(ltrain::test::readJson(dir / ("run-" + mode) + "/summary.json")["world_size"] == 2);
  }
}

TEST_CASE("when rank 0 refuses the run directory, the other ranks stop at once with its reason",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: k\n");
  auto first = runLtrain(syntheticTrain(dir / "c.yaml", dir / "run"));
  REQUIRE(first.exit_code == 0);  // a finished run: rank 0 will refuse to overwrite it
  const std::string port = std::to_string(ltrain::test::freePort());
  auto args = syntheticTrain(dir / "c.yaml", dir / "run");
  args.push_back("dist.timeout_s=120");
  std::vector<std::string> argv{LTRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto t0 = Clock::now();
  ltrain::test::BackgroundProcess r0(argv, {{"RANK", "0"},
                                            {"WORLD_SIZE", "2"},
                                            {"MASTER_PORT", port},
                                            {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  ltrain::test::BackgroundProcess r1(argv, {{"RANK", "1"},
                                            {"WORLD_SIZE", "2"},
                                            {"MASTER_PORT", port},
                                            {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  auto a = r0.wait();
  auto b = r1.wait();
  CHECK(a.exit_code == 2);
  CHECK_THAT(a.err, Contains("holds a finished run"));
  CHECK(b.exit_code == 2);
  CHECK_THAT(b.err, Contains("rank 0 could not prepare the run directory"));
  CHECK(since(t0) < 30);  // not dist.timeout_s
}

namespace {
// Local addresses (hex, as /proc/net/tcp writes them) of the sockets listening on `port`.
std::vector<std::string> listeners(int port) {
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(readText(table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state;
      f >> slot >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (state == "0A" && std::stoi(local.substr(colon + 1), nullptr, 16) == port)
        out.push_back(local.substr(0, colon));
    }
  }
  return out;
}
}  // namespace

TEST_CASE("a single-node job's store listens on loopback only", "[dist]") {
  const int port = ltrain::test::freePort();
  ltrain::test::BackgroundProcess launcher({LTRAIN_BINARY, "launch", "--nproc-per-node", "1",
                                            "--master-port", std::to_string(port), "--grace", "1",
                                            "--", "sleep", "30"});
  std::vector<std::string> bound;
  for (int i = 0; i < 200 && bound.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bound = listeners(port);
  }
  launcher.signal(SIGTERM);
  launcher.wait();
  CHECK(bound == std::vector<std::string>{"0100007F"});  // 127.0.0.1, not 0.0.0.0 or ::
}
