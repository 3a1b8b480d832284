// DistributedSampler parity: our indices equal torch.utils.data.DistributedSampler's, from the
// installed Python torch, for 250 random (size, world, rank, seed, epoch, shuffle, drop_last).
#include <catch2/catch.hpp>

#include <random>
#include <sstream>

#include "ltrain/data/distributed_sampler.h"
#include "support/process.h"
#include "test_paths.h"

TEST_CASE("DistributedSampler yields exactly PyTorch's indices", "[parity]") {
  std::mt19937_64 rng(20261130);
  struct Setting {
    int64_t n, world, rank, shuffle, seed, epoch, drop_last;
  };
  std::vector<Setting> settings;
  for (int i = 0; i < 250; ++i) {
    Setting s;
    // Mostly small sets, some with N < world (heavy padding), a few large.
    s.n = i % 25 == 0 ? 60000 : static_cast<int64_t>(rng() % (i % 5 == 0 ? 8 : 3000)) + 1;
    s.world = static_cast<int64_t>(rng() % 8) + 1;
    s.rank = static_cast<int64_t>(rng() % s.world);
    s.shuffle = rng() % 4 != 0;
    s.seed = i % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 100000);
    s.epoch = static_cast<int64_t>(rng() % 50);
    s.drop_last = rng() % 2;
    settings.push_back(s);
  }
  ltrain::test::TempDir dir;
  std::string lines;
  for (const auto& s : settings)
    lines += fmt::format("{} {} {} {} {} {} {}\n", s.n, s.world, s.rank, s.shuffle, s.seed, s.epoch,
                         s.drop_last);
  ltrain::test::writeText(dir / "settings", lines);
  auto py = ltrain::test::runProcess(
      {LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/sampler_reference.py",
       dir / "settings"});
  REQUIRE(py.exit_code == 0);

  std::istringstream expected(py.out);
  std::string line;
  int compared = 0;
  for (const auto& s : settings) {
    REQUIRE(std::getline(expected, line));
    ltrain::data::DistributedSampler sampler(s.n, s.world, s.rank, s.shuffle, s.seed, s.drop_last);
    sampler.setEpoch(s.epoch);
    std::string ours;
    for (auto i : sampler.indices()) ours += (ours.empty() ? "" : " ") + std::to_string(i);
    if (ours.empty()) ours = "-";
    INFO(fmt::format("N={} world={} rank={} shuffle={} seed={} epoch={} drop_last={}", s.n, s.world,
                     s.rank, s.shuffle, s.seed, s.epoch, s.drop_last));
    CHECK(ours == line);
    CHECK(sampler.numSamples() == static_cast<int64_t>(sampler.indices().size()));
    ++compared;
  }
  CHECK(compared == 250);
}
