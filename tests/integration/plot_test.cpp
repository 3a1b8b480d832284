// scripts/plot.py: PNG curves for a run directory (loss.png, accuracy.png; perplexity.png for a
// language model) and for a sweep directory (sweep_<param>.png per swept parameter,
// sweep_curves.png); a directory holding neither metrics.jsonl nor sweep_summary.csv is an error
// (exit 2, one line). And bench/gpt_bench.py, on a tiny model.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::countLines;
using ltrain::test::readText;
using ltrain::test::runProcess;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
const std::string kPlot = std::string(LTRAIN_SOURCE_DIR) + "/scripts/plot.py";

ltrain::test::ProcessResult plot(const std::vector<std::string>& args) {
  std::vector<std::string> argv{LTRAIN_PYTHON, kPlot};
  argv.insert(argv.end(), args.begin(), args.end());
  return runProcess(argv);
}

// A run directory with two epochs of metrics (one skipped train step, reported as null).
void writeRun(const std::string& dir, const std::string& name, double acc) {
  std::filesystem::create_directories(dir);
  std::ostringstream m;
  m << "{\"step\": 5, \"epoch\": 0, \"split\": \"train\", \"loss\": 1.2, \"lr\": 0.1, "
       "\"samples_per_s\": 5000, \"wall_time\": 1.0}\n"
    << "{\"step\": 10, \"epoch\": 0, \"split\": \"train\", \"loss\": null, \"lr\": 0.1, "
       "\"samples_per_s\": 5000, \"wall_time\": 2.0}\n"
    << "{\"step\": 10, \"epoch\": 1, \"split\": \"test\", \"loss\": 0.9, \"accuracy\": "
    << acc - 0.1 << ", \"wall_time\": 3.0}\n"
    << "{\"step\": 15, \"epoch\": 1, \"split\": \"train\", \"loss\": 0.7, \"lr\": 0.05, "
       "\"samples_per_s\": 5000, \"wall_time\": 4.0}\n"
    << "{\"step\": 20, \"epoch\": 2, \"split\": \"test\", \"loss\": 0.6, \"accuracy\": " << acc
    << ", \"wall_time\": 5.0}\n";
  writeText(dir + "/metrics.jsonl", m.str());
  writeText(dir + "/config.yaml", "name: " + name + "\nseed: 0\n");
  std::ostringstream s;
  s << "{\"status\": \"completed\", \"test_accuracy\": " << acc
    << ", \"test_loss\": 0.6, \"train_loss\": 0.7, \"steps\": 20, \"wall_s\": 1.5}\n";
  writeText(dir + "/summary.json", s.str());
}

void requirePng(const std::string& path) {
  INFO(path);
  REQUIRE(std::filesystem::is_regular_file(path));
  CHECK(readText(path).rfind("\x89PNG\r\n\x1a\n", 0) == 0);
}
}  // namespace

TEST_CASE("plot.py draws a run's loss and accuracy curves", "[plot]") {
  TempDir dir;
  writeRun(dir / "run", "fake_run", 0.8);
  auto r = plot({dir / "run"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  requirePng(dir / "run/loss.png");
  requirePng(dir / "run/accuracy.png");
  CHECK_THAT(r.out, Contains("loss.png") && Contains("accuracy.png"));
  CHECK(countLines(r.out) == 2);

  auto elsewhere = plot({dir / "run", "--out", dir / "pngs"});
  REQUIRE(elsewhere.exit_code == 0);
  requirePng(dir / "pngs/loss.png");
  requirePng(dir / "pngs/accuracy.png");

  // As README runs it: the script itself, through its #! line's python3 (the system's, which
  // may lack matplotlib: it goes on in ltrain's environment).
  auto as_written = runProcess({kPlot, dir / "run", "--out", dir / "readme"});
  INFO(as_written.err);
  CHECK(as_written.exit_code == 0);
  requirePng(dir / "readme/loss.png");
}

TEST_CASE("plot.py draws a sweep: the metric against each parameter, and every trial's curve",
          "[plot]") {
  TempDir dir;
  const std::string sweep = dir / "sweep";
  std::filesystem::create_directories(sweep);
  writeText(sweep + "/sweep.yaml",
            "sweep:\n  metric: test_accuracy\n  mode: max\n"
            "params:\n  optimizer.lr: [0.01, 0.1]\n  data.batch_size: [32, 64]\n");
  std::ostringstream csv;
  csv << "trial,status,optimizer.lr,data.batch_size,test_accuracy,test_loss,train_loss,steps,"
         "wall_s,samples_per_s,run_dir,error\n";
  const std::vector<std::pair<std::string, std::string>> trials{
      {"0.01", "32"}, {"0.01", "64"}, {"0.1", "32"}, {"0.1", "64"}};
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& [lr, bs] = trials[i];
    const std::string name = "00" + std::to_string(i) + "-lr=" + lr + ",bs=" + bs;
    const double acc = 0.5 + 0.1 * static_cast<double>(i);
    writeRun(sweep + "/" + name, "sweep-" + std::to_string(i), acc);
    if (i == 3) {  // a failed trial: left out of the plots
      csv << i << ",failed," << lr << "," << bs << ",,,,,,,\"" << sweep << "/" << name
          << "\",exit 1\n";
    } else {
      csv << i << ",completed," << lr << "," << bs << "," << acc << ",0.6,0.7,20,1.5,5000,\""
          << sweep << "/" << name << "\",\n";
    }
  }
  writeText(sweep + "/sweep_summary.csv", csv.str());

  auto r = plot({sweep});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* f :
       {"sweep_optimizer.lr.png", "sweep_data.batch_size.png", "sweep_curves.png"}) {
    requirePng(sweep + "/" + f);
    CHECK_THAT(r.out, Contains(f));
  }
  CHECK(countLines(r.out) == 3);
  CHECK_FALSE(std::filesystem::exists(sweep + "/loss.png"));
}

TEST_CASE("plot.py on a directory with neither metrics.jsonl nor sweep_summary.csv exits 2",
          "[plot]") {
  TempDir dir;
  writeText(dir / "notes.txt", "nothing to plot\n");
  auto r = plot({dir.path()});
  CHECK(r.exit_code == 2);
  CHECK(countLines(r.err) == 1);
  CHECK_THAT(r.err, Contains("plot.py: error:") &&
                        Contains("holds neither metrics.jsonl nor sweep_summary.csv"));
  CHECK(r.out.empty());
}

TEST_CASE("plot.py draws a language model's validation loss and perplexity") {
  TempDir dir;
  std::filesystem::create_directories(dir / "lm");
  writeText(dir / "lm/metrics.jsonl",
            "{\"step\": 5, \"epoch\": 0, \"split\": \"train\", \"loss\": 3.1, \"lr\": 0.001}\n"
            "{\"step\": 5, \"epoch\": 0, \"split\": \"val\", \"loss\": 2.9, \"accuracy\": 0.2, "
            "\"perplexity\": 18.2}\n"
            "{\"step\": 10, \"epoch\": 0, \"split\": \"val\", \"loss\": 2.5, \"accuracy\": 0.3, "
            "\"perplexity\": 12.2}\n");
  auto r = plot({dir / "lm"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* png : {"loss.png", "accuracy.png", "perplexity.png"})
    CHECK(readText(dir / ("lm/" + std::string(png))).rfind("\x89PNG", 0) == 0);
}

TEST_CASE("bench/gpt_bench.py runs end to end on a tiny model", "[slow]") {
  TempDir dir;
  auto r = runProcess({LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/bench/gpt_bench.py",
                       "--ltrain", LTRAIN_BINARY, "--out", dir.path(), "--tiny", "--steps", "10",
                       "--log-every", "5"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("| gpt 2x32, 0.0M | Python torch eager | "));
  CHECK_THAT(r.out, Contains("| gpt 2x32, 0.0M | ltrain | "));
  CHECK_THAT(r.out, Contains("| llama 2x32, 0.0M | Python torch eager | "));
  CHECK_THAT(r.out, Contains("| llama 2x32, 0.0M | ltrain | "));
  // The ltrain side does the Python side's work, not gpt2_124m.yaml's recipe: one micro-batch a
  // step, a constant rate, clipping at 1.0 (as Python's loop).
  for (const std::string model : {"gpt", "llama"}) {
    const std::string resolved = readText(dir / ("ltrain-" + model + "/config.yaml"));
    INFO(resolved);
    CHECK_THAT(resolved, Contains("grad_accum: 1"));
    CHECK_THAT(resolved, Contains("clip_grad_norm: 1"));
    CHECK_THAT(resolved, Contains("name: constant"));
  }
}
