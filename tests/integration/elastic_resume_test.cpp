// A checkpoint written by W ranks resumed by W' ranks keeps its place in the epoch in examples:
// the rest of the epoch is dealt out over the new world size, so that within the epoch no
// example is skipped or seen twice, and the run's length is recomputed for the new size.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "ltrain/data/distributed_sampler.h"
#include "support/process.h"
#include "support/run_files.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
// Positions 0..k*B*W of the epoch taken by W ranks, then the rest by W' ranks: every example.
void checkHandOver(int64_t n, int64_t b, int64_t w, int64_t steps, int64_t w2) {
  INFO(n << " examples, " << w << " ranks took " << steps << " batches of " << b << ", then " << w2
         << " ranks");
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < w; ++r) {
    ltrain::data::DistributedSampler s(n, w, r, true, 3);
    s.setEpoch(1);
    auto mine = s.indices();
    seen.insert(mine.begin(), mine.begin() + steps * b);
  }
  int64_t per_rank = -1;
  for (int64_t r = 0; r < w2; ++r) {
    ltrain::data::DistributedSampler s(n, w2, r, true, 3);
    s.setEpoch(1);
    auto rest = s.indices(steps * b * w);
    if (per_rank < 0) per_rank = static_cast<int64_t>(rest.size());
    CHECK(static_cast<int64_t>(rest.size()) == per_rank);  // equal shares: nobody waits
    seen.insert(rest.begin(), rest.end());
  }
  for (int64_t i = 0; i < n; ++i) CHECK(seen.count(i) >= 1);
  // Only the padding to a multiple of W' repeats examples, as DistributedSampler's does.
  CHECK(static_cast<int64_t>(seen.size()) - n < w2);
}

std::map<int64_t, std::multiset<int64_t>> traced(const std::string& dir) {
  std::map<int64_t, std::multiset<int64_t>> by_epoch;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::istringstream in(ltrain::test::readText(e.path().string()));
    for (std::string line; std::getline(in, line);) {
      std::istringstream l(line);
      int64_t epoch, i;
      l >> epoch;
      while (l >> i) by_epoch[epoch].insert(i);
    }
  }
  return by_epoch;
}
}  // namespace

TEST_CASE("the sampler deals the rest of an epoch over another world size") {
  checkHandOver(240, 8, 2, 6, 3);
  checkHandOver(240, 8, 3, 4, 2);
  checkHandOver(101, 4, 2, 5, 3);  // padding on both sides
  checkHandOver(101, 4, 3, 2, 4);
  // Nothing taken yet: the sampler's own order (DistributedSampler's, tested against torch).
  ltrain::data::DistributedSampler s(50, 3, 1, true, 0);
  CHECK(s.indices(0) == s.indices());
}

TEST_CASE("a run resumed on more or on fewer processes sees every example of its epoch once",
          "[dist]") {
  struct Case {
    int from, to, kill_at;
    int64_t steps;  // the whole run's, recomputed for the new world size
  };
  // 240 examples, batches of 8. 2 ranks: 15 steps an epoch; killed after step 6 (96 examples),
  // the other 144 over 3 ranks take 6 steps, then 10 an epoch: 22. 3 ranks: 10 steps an epoch;
  // killed after step 4 (96), 144 over 2 ranks take 9 steps, then 15: 28.
  for (const Case& c : {Case{2, 3, 6, 22}, Case{3, 2, 4, 28}}) {
    INFO(c.from << " -> " << c.to << " processes");
    TempDir dir;
    std::filesystem::create_directories(dir / "trace");
    ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
    auto args = [&](int procs) {
      return ltrain::test::syntheticRun(
          dir / "c.yaml", dir / "run",
          {"--nproc-per-node", std::to_string(procs), "data.synthetic_train_samples=240",
           "data.batch_size=8", "train.epochs=2",
           "train.checkpoint_every=" + std::to_string(c.kill_at), "scheduler.name=cosine"});
    };
    const std::map<std::string, std::string> trace{{"LTRAIN_TRACE_INDICES", dir / "trace"}};
    auto env = trace;
    env["LTRAIN_FAULT_KILL_AT_STEP"] = std::to_string(c.kill_at);
    auto killed = runLtrain(args(c.from), env);
    REQUIRE(killed.exit_code != 0);
    auto resumed = runLtrain(args(c.to), trace);
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.out, Contains(fmt::format("resuming on {} process(es) a checkpoint written "
                                                 "by {}: 96 examples of epoch 1 were done",
                                                 c.to, c.from)));
    CHECK(ltrain::test::readJson(dir / "run/summary.json")["steps"] == c.steps);
    auto seen = traced(dir / "trace");
    REQUIRE(seen.count(0));
    CHECK(seen[0].size() == 240);                                            // no example twice...
    CHECK(std::set<int64_t>(seen[0].begin(), seen[0].end()).size() == 240);  // ...none skipped
    CHECK(seen[1].size() == 240);
  }
}
