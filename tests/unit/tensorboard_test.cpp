// TensorBoard event files: what TensorBoard's own reader (installed in the venv) gets back from
// them, tag by tag and step by step, nan included.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ltrain/io/crc32c.h"
#include "ltrain/io/tensorboard.h"
#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;

namespace {

// Prints "version V" and then one "tag step value wall_time" line per scalar; repr() keeps every
// float exact and spells nan as nan, which strtod reads back.
constexpr const char* kReader = R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0})
ea.Reload()
print('version', ea.file_version)
for tag in sorted(ea.Tags()['scalars']):
    for e in ea.Scalars(tag):
        print(tag, e.step, repr(e.value), repr(e.wall_time))
)";

struct Point {
  double value, wall_time;
};

}  // namespace

TEST_CASE("crc32c matches the published CRC-32C check values") {
  const std::string zeros(32, '\0');
  CHECK(ltrain::io::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(ltrain::io::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
}

TEST_CASE("TensorBoard reads back every scalar, step and wall time written") {
  ltrain::test::TempDir dir;
  const std::string logdir = dir / "tb";
  constexpr int kSteps = 40;
  // tag -> step -> what was written; the single-value and the grouped calls both go through it.
  std::map<std::string, std::map<int64_t, Point>> written;
  {
    ltrain::io::TensorBoardWriter writer(logdir);
    for (int64_t step = 1; step <= kSteps; ++step) {
      const double t = 1.7e9 + 0.125 * static_cast<double>(step);
      const double loss = 2.0 / static_cast<double>(step) + 1e-3;
      writer.scalar("train/loss", step, loss, t);
      written["train/loss"][step] = {loss, t};
      const double t2 = t + 0.0625;
      std::vector<std::pair<std::string, double>> group = {
          {"train/lr", 1e-3 * std::pow(0.9, static_cast<double>(step))},
          {"eval/accuracy", 0.1 + 0.02 * static_cast<double>(step)},
          // A diverged gradient norm now and then: TensorBoard must see nan, not a missing point.
          {"train/grad_norm", step % 7 == 0 ? std::nan("") : 1e4 * static_cast<double>(step)},
      };
      writer.scalars(step, t2, group);
      for (const auto& [tag, value] : group) written[tag][step] = {value, t2};
    }
    writer.flush();
  }

  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(logdir))
    files.push_back(entry.path().filename().string());
  REQUIRE(files.size() == 1);
  CHECK(files[0].rfind("events.out.tfevents.", 0) == 0);

  ltrain::test::writeText(dir / "read.py", kReader);
  auto py = ltrain::test::runProcess({LTRAIN_PYTHON, dir / "read.py", logdir});
  INFO(py.err);
  REQUIRE(py.exit_code == 0);

  std::istringstream lines(py.out);
  std::string word, version;
  REQUIRE(lines >> word >> version);
  CHECK(word == "version");
  CHECK(version == "2.0");

  std::map<std::string, std::map<int64_t, Point>> read;
  std::string tag, value, wall_time;
  int64_t step = 0;
  while (lines >> tag >> step >> value >> wall_time)
    read[tag][step] = {std::strtod(value.c_str(), nullptr),
                       std::strtod(wall_time.c_str(), nullptr)};

  REQUIRE(read.size() == written.size());
  int compared = 0;
  for (const auto& [name, points] : written) {
    INFO(name);
    REQUIRE(read.count(name) == 1);
    CHECK(read[name].size() == points.size());
    for (const auto& [s, expected] : points) {
      INFO(fmt::format("step {}", s));
      REQUIRE(read[name].count(s) == 1);
      const Point& got = read[name][s];
      if (std::isnan(expected.value)) {
        CHECK(std::isnan(got.value));
      } else {
        // Stored as float32, as TensorBoard's simple_value is.
        CHECK(got.value == Approx(expected.value).epsilon(1e-6));
      }
      CHECK(got.wall_time == expected.wall_time);
      ++compared;
    }
  }
  CHECK(compared == 4 * kSteps);
}

TEST_CASE("a TensorBoard directory that cannot be created is named") {
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "file", "x");
  CHECK_THROWS_WITH(ltrain::io::TensorBoardWriter(dir / "file/tb"), Contains(dir / "file/tb"));
}
