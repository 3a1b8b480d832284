// LTRAIN_MEMORY_LOG's categories: what a library keeps resident for the whole run
// (addLibraryBytes, the shared-memory collectives' segment) counts with libraries, not as slack.
#include "ltrain/common/memory_phase.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "ltrain/common/tensor_memory.h"
#include "ltrain/io/json.h"
#include "support/process.h"

TEST_CASE("memory a library holds from now on is counted with libraries in the next phases") {
  ltrain::test::TempDir dir;
  const std::string log = dir / "memory.jsonl";
  setenv("LTRAIN_MEMORY_LOG", log.c_str(), 1);
  REQUIRE(ltrain::trackTensorMemory());
  { ltrain::MemoryPhase before("before"); }
  constexpr int64_t kSegment = int64_t{64} << 20;
  ltrain::addLibraryBytes(kSegment);
  { ltrain::MemoryPhase with("with the segment"); }
  ltrain::addLibraryBytes(-kSegment);
  { ltrain::MemoryPhase after("after it went"); }
  unsetenv("LTRAIN_MEMORY_LOG");
  std::vector<double> libraries;
  std::istringstream lines(ltrain::test::readText(log));
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    const auto j = ltrain::io::Json::parse(line);
    double sum = 0;
    for (const auto& [name, mb] : j["categories_mb"].items()) sum += mb.get<double>();
    CHECK(sum == Approx(j["peak_rss_mb"].get<double>()).margin(0.5));
    libraries.push_back(j["categories_mb"]["libraries"].get<double>());
  }
  REQUIRE(libraries.size() == 3);
  // Back to back, the phases page in no code of note: the difference is the segment's.
  CHECK(libraries[1] - libraries[0] == Approx(64).margin(1));
  CHECK(libraries[2] == Approx(libraries[0]).margin(1));
}
