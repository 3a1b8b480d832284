// What a user watches: the live progress bar on a terminal (and plain lines in a pipe), and the
// TensorBoard event files of a run, read back with the tensorboard package's own reader.
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <sstream>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
std::vector<std::string> train(const std::string& out) {
  return ltrain::test::syntheticRun(
      "/dev/null", out,
      {"data.synthetic_train_samples=4000", "data.batch_size=16", "model.hidden=[32]",
       "optimizer.lr=0.01", "train.epochs=2", "train.log_every=25", "train.eval_every=100"});
}
}  // namespace

TEST_CASE("the progress bar shows on a terminal and never in a pipe") {
  TempDir dir;
  // script(1) gives the command a pseudo-terminal, as an interactive shell would.
  std::string cmd = LTRAIN_BINARY;
  for (const auto& a : train(dir / "tty")) cmd += " '" + a + "'";
  auto tty = ltrain::test::runProcess({"script", "-qfec", cmd, "/dev/null"});
  INFO(tty.out << tty.err);
  REQUIRE(tty.exit_code == 0);
  CHECK_THAT(tty.out, Contains("\r\x1b[2Kep 1/2 ["));
  CHECK_THAT(tty.out, Contains("] 500/500 | loss "));
  CHECK_THAT(tty.out, Contains("samples/s | ETA "));
  CHECK_THAT(tty.out, !Contains("ep 1/2 step 25/500"));  // the bar replaces the log lines

  auto pipe = runLtrain(train(dir / "pipe"));
  REQUIRE(pipe.exit_code == 0);
  CHECK(pipe.out.find('\r') == std::string::npos);
  CHECK(pipe.out.find('\x1b') == std::string::npos);
  CHECK_THAT(pipe.out, Contains("ep 1/2 step 25/500 | loss "));
}

TEST_CASE("TensorBoard event files hold every logged scalar at its step") {
  TempDir dir;
  REQUIRE(runLtrain(train(dir / "run")).exit_code == 0);
  ltrain::test::writeText(dir / "read.py",
                          "import sys\n"
                          "from tensorboard.backend.event_processing.event_accumulator import "
                          "EventAccumulator\n"
                          "ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0})\n"
                          "ea.Reload()\n"
                          "for tag in sorted(ea.Tags()['scalars']):\n"
                          "    for e in ea.Scalars(tag):\n"
                          "        print(tag, e.step, repr(e.value))\n");
  auto r = ltrain::test::runProcess({LTRAIN_PYTHON, dir / "read.py", dir / "run/tensorboard"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, std::map<int64_t, double>> tb;
  std::istringstream in(r.out);
  std::string tag;
  int64_t step;
  double value;
  while (in >> tag >> step >> value) tb[tag][step] = value;

  // Every train and test record of metrics.jsonl is in TensorBoard with the same step and value.
  std::istringstream metrics(readText(dir / "run/metrics.jsonl"));
  std::string line;
  int train_records = 0, test_records = 0;
  auto same = [](double a, double b) {
    return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b));
  };
  while (std::getline(metrics, line)) {
    auto j = ltrain::io::Json::parse(line);
    const int64_t s = j["step"].get<int64_t>();
    if (j["split"] == "train") {
      ++train_records;
      CHECK(same(tb["train/loss"].at(s), j["loss"].get<double>()));
      CHECK(same(tb["train/lr"].at(s), j["lr"].get<double>()));
      CHECK(same(tb["train/grad_norm"].at(s), j["grad_norm"].get<double>()));
      CHECK(tb["train/samples_per_s"].count(s) == 1);
      CHECK(tb["train/data_wait_share"].count(s) == 1);
    } else {
      ++test_records;
      CHECK(same(tb["eval/accuracy"].at(s), j["accuracy"].get<double>()));
      CHECK(same(tb["eval/loss"].at(s), j["loss"].get<double>()));
    }
  }
  CHECK(train_records == 20);  // 500 steps, one record every 25
  CHECK(test_records == 5);    // every 100 steps
  CHECK(tb["train/loss"].size() == 20);
  CHECK(tb["eval/accuracy"].size() == 5);
}

TEST_CASE("after a resume TensorBoard shows each step once, as metrics.jsonl does") {
  TempDir dir;
  auto a = train(dir / "run");
  a.insert(a.end() - 2, "train.checkpoint_every=100");
  REQUIRE(runLtrain(a, {{"LTRAIN_FAULT_KILL_AT_STEP", "130"}}).exit_code == 128 + 9);
  REQUIRE(runLtrain(a).exit_code == 0);  // resumes from step 100
  ltrain::test::writeText(dir / "steps.py",
                          "import sys\n"
                          "from tensorboard.backend.event_processing.event_accumulator import "
                          "EventAccumulator\n"
                          "ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0})\n"
                          "ea.Reload()\n"
                          "print(' '.join(str(e.step) for e in ea.Scalars('train/loss')))\n");
  auto r = ltrain::test::runProcess({LTRAIN_PYTHON, dir / "steps.py", dir / "run/tensorboard"});
  REQUIRE(r.exit_code == 0);
  std::string expected;
  for (int s = 25; s <= 500; s += 25) expected += (expected.empty() ? "" : " ") + std::to_string(s);
  CHECK(r.out == expected + "\n");  // 125, logged before the kill, appears once
}
