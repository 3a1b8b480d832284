// Sweeps end to end on the synthetic dataset: a 6-trial CNN grid over learning rate x batch size,
// two at a time, sorted summary; a sweep stopped midway finishes only what is left when run again;
// a failing trial is recorded and the others go on; ltrain runs lists them all.
#include <signal.h>

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
using ltrain::test::writeText;

namespace {

void writeSweep(const TempDir& dir, int samples, int epochs) {
  writeText(dir / "base.yaml",
            "name: cnn\n"
            "model: {name: cnn, channels: [4, 8], fc: [16]}\n"
            "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_train_samples: " +
                std::to_string(samples) + ", synthetic_test_samples: 64}\n");
  writeText(dir / "grid.yaml",
            "base: base.yaml\n"
            "overrides: [train.epochs=" +
                std::to_string(epochs) +
                "]\n"
                "params:\n"
                "  optimizer.lr: [0.1, 0.03, 0.01]\n"
                "  data.batch_size: range(16, 33, 16)\n"
                "sweep: {parallel: 2, metric: test_accuracy, mode: max}\n");
}

std::vector<std::vector<std::string>> csvRows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> row;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"')
        quoted = !quoted;
      else if (c == ',' && !quoted)
        row.push_back(cell), cell.clear();
      else
        cell += c;
    }
    row.push_back(cell);
    rows.push_back(row);
  }
  return rows;
}

int completedTrials(const std::string& sweep_dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(sweep_dir, ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "summary.json") &&
        readText(e.path() / "summary.json").find("\"completed\"") != std::string::npos)
      ++n;
  return n;
}

}  // namespace

TEST_CASE("a 6-trial grid sweep runs two at a time and ranks the trials by the metric") {
  TempDir dir;
  writeSweep(dir, 256, 1);
  auto r = runLtrain({"sweep", dir / "grid.yaml", "--output-dir", dir / "out"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto rows = csvRows(readText(dir / "out/sweep_summary.csv"));
  REQUIRE(rows.size() == 7);
  CHECK(rows[0][2] == "optimizer.lr");
  CHECK(rows[0][3] == "data.batch_size");
  CHECK(rows[1][2] == "0.1");
  CHECK(rows[1][3] == "16");
  CHECK(rows[6][2] == "0.01");
  CHECK(rows[6][3] == "32");
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i][1] == "completed");
    // Each trial's directory holds its resolved config and the overrides that made it.
    const std::string run = rows[i][rows[0].size() - 2];
    CHECK_THAT(
        readText(run + "/overrides.txt"),
        Contains("train.epochs=1\noptimizer.lr=" + rows[i][2] + "\ndata.batch_size=" + rows[i][3]));
    CHECK_THAT(readText(run + "/config.yaml"), Contains("batch_size: " + rows[i][3]));
  }
  CHECK(std::filesystem::exists(dir / "out/sweep.yaml"));
  // The Markdown table, printed and written, is sorted best first.
  std::istringstream md(readText(dir / "out/sweep_summary.md"));
  std::string line;
  std::vector<double> metric;
  while (std::getline(md, line))
    if (line.rfind("| ", 0) == 0 && line.find("completed") != std::string::npos) {
      std::vector<std::string> parts;
      std::istringstream cellin(line);
      std::string cell;
      while (std::getline(cellin, cell, '|')) parts.push_back(cell);
      metric.push_back(std::stod(parts[parts.size() - 2]));
    }
  REQUIRE(metric.size() == 6);
  CHECK(std::is_sorted(metric.rbegin(), metric.rend()));
  CHECK_THAT(r.out, Contains("| rank | trial | optimizer.lr | data.batch_size | test_accuracy"));

  auto runs = runLtrain({"runs", dir / "out"});
  CHECK(runs.exit_code == 0);
  CHECK_THAT(runs.out, Contains("006-lr=0.01,batch_size=32"));
  CHECK(ltrain::test::countLines(runs.out) == 7);
}

TEST_CASE("a sweep stopped midway finishes only the unfinished trials when run again") {
  TempDir dir;
  writeSweep(dir, 4096, 2);  // a few seconds a trial
  ltrain::test::BackgroundProcess sweep(
      {LTRAIN_BINARY, "sweep", dir / "grid.yaml", "--output-dir", dir / "out"});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (completedTrials(dir / "out") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sweep.signal(SIGTERM);
  auto first = sweep.wait();
  INFO(first.out << first.err);
  CHECK(first.exit_code == 143);
  const int done = completedTrials(dir / "out");
  REQUIRE(done >= 2);
  REQUIRE(done < 6);
  std::map<std::string, std::string> finished;  // summary.json of the trials done before the stop
  for (const auto& e : std::filesystem::directory_iterator(dir / "out"))
    if (e.is_directory() && std::filesystem::exists(e.path() / "summary.json") &&
        readText(e.path() / "summary.json").find("\"completed\"") != std::string::npos)
      finished[e.path().string()] = readText(e.path() / "summary.json");

  auto again = runLtrain({"sweep", dir / "grid.yaml", "--output-dir", dir / "out"});
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(completedTrials(dir / "out") == 6);
  int skipped = 0;
  std::istringstream out(again.out);
  std::string line;
  while (std::getline(out, line))
    skipped += line.find("finished earlier: skipped") != std::string::npos;
  CHECK(skipped == done);
  for (const auto& [path, summary] : finished) CHECK(readText(path + "/summary.json") == summary);
}

TEST_CASE("trials can be multi-process and run side by side, each on its own port", "[dist]") {
  TempDir dir;
  writeSweep(dir, 256, 1);
  auto r = runLtrain({"train", dir / "base.yaml", "-m", "optimizer.lr=0.1,0.01", "--parallel", "2",
                      "--nproc-per-node", "2", "--output-dir", dir / "m"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(ltrain::test::readJson(dir / "m/001-lr=0.1/summary.json")["world_size"] == 2);
  CHECK(ltrain::test::readJson(dir / "m/002-lr=0.01/summary.json")["world_size"] == 2);
}

TEST_CASE("a trial that did not learn is flagged, not just ranked last") {
  TempDir dir;
  writeSweep(dir, 1024, 1);
  auto r = runLtrain({"train", dir / "base.yaml", "-m", "optimizer.lr=0.1,1e-9",
                      "data.batch_size=16", "train.log_every=4", "--output-dir", dir / "m"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // The trial at lr 1e-9 is flagged where it finishes and in the table; the one at 0.1 is not.
  std::istringstream lines(r.out);
  int flagged = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find("; it did not learn (training loss") != std::string::npos) {
      ++flagged;
      CHECK_THAT(line, Contains("trial 002-"));
    }
  CHECK(flagged == 1);
  const std::string md = readText(dir / "m/sweep_summary.md");
  CHECK_THAT(md, Contains("| completed (did not learn) |"));
  CHECK(md.find("did not learn") == md.rfind("did not learn"));
  CHECK_THAT(r.out, Contains("2 of 2 trials completed, 1 of them did not learn"));
}

TEST_CASE("a failing trial is recorded with its error and the sweep goes on") {
  TempDir dir;
  writeSweep(dir, 256, 1);
  // With drop_last, a batch of 512 leaves no batch of the 256 examples: that trial fails.
  auto r = runLtrain({"train", dir / "base.yaml", "-m", "data.batch_size=16,512",
                      "data.drop_last=true", "--output-dir", dir / "m"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  const auto rows = csvRows(readText(dir / "m/sweep_summary.csv"));
  REQUIRE(rows.size() == 3);
  CHECK(rows[1][1] == "completed");
  CHECK(rows[2][1] == "failed");
  CHECK_THAT(rows[2].back(), Contains("leaves no batch"));
  CHECK_THAT(r.out, Contains("trial 002-batch_size=512 failed"));
}
