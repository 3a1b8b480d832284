// Checkpoint round trip: weights, optimizer state, loop position and RNG state come back.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "ltrain/optim/optimizer.h"
#include "support/process.h"

using Catch::Matchers::Contains;

TEST_CASE("a checkpoint restores weights, optimizer state, position and the RNG stream") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  cfg.optimizer.name = ltrain::config::OptimizerName::kAdam;
  torch::manual_seed(1);
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  torch::nn::functional::cross_entropy(m->forward(torch::randn({8, 1, 4, 4})),
                                       torch::randint(3, {8}))
      .backward();
  opt->step();
  ltrain::checkpoint::LoopState st{7, 2, 5, 1234};
  const auto path = ltrain::checkpoint::checkpointPath(dir.path(), st.step);
  ltrain::checkpoint::saveCheckpoint(path, *m, *opt, st);
  auto next_random = torch::rand({4});  // what the RNG gives right after the save

  torch::manual_seed(99);
  auto m2 = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt2 = ltrain::optim::makeOptimizer(cfg.optimizer, m2->parameters());
  auto back = ltrain::checkpoint::loadCheckpoint(path, *m2, *opt2);
  CHECK(back.step == 7);
  CHECK(back.epoch == 2);
  CHECK(back.batch_in_epoch == 5);
  CHECK(back.samples == 1234);
  for (size_t i = 0; i < m->parameters().size(); ++i)
    CHECK(torch::equal(m->parameters()[i], m2->parameters()[i]));
  CHECK(torch::equal(torch::rand({4}), next_random));
  // Adam's moments came back: one more identical step gives identical weights.
  opt->zero_grad();
  opt2->zero_grad();
  for (auto* pair : {&m, &m2}) {
    auto& mm = *pair;
    torch::manual_seed(5);
    torch::nn::functional::cross_entropy(mm->forward(torch::randn({8, 1, 4, 4})),
                                         torch::randint(3, {8}))
        .backward();
  }
  opt->step();
  opt2->step();
  CHECK(torch::allclose(m->parameters()[0], m2->parameters()[0], 0, 0));
  CHECK(ltrain::checkpoint::newestCheckpoint(dir.path()) == path);
}

TEST_CASE("a corrupt checkpoint is a usage error naming the file and the damage") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  const std::string path = dir / "step-00000001.pt";
  auto load = [&] { ltrain::checkpoint::loadCheckpoint(path, *m, *opt); };
  ltrain::test::writeText(path, "not a checkpoint, but long enough");
  CHECK_THROWS_WITH(load(), Contains("step-00000001.pt' is unusable: not an ltrain checkpoint"));
  CHECK_THROWS_AS(load(), ltrain::UsageError);

  ltrain::checkpoint::saveCheckpoint(path, *m, *opt, {1, 0, 0, 0});
  const std::string good = ltrain::test::readText(path);
  ltrain::test::writeText(path, good.substr(0, good.size() - 100));
  CHECK_THROWS_WITH(load(), Contains("is unusable: truncated"));
  for (size_t at : {size_t{30}, good.size() / 2, good.size() - 1}) {  // one bit anywhere
    std::string flipped = good;
    flipped[at] ^= 0x01;
    ltrain::test::writeText(path, flipped);
    CHECK_THROWS_WITH(load(), Contains("is unusable: checksum mismatch"));
  }
  ltrain::test::writeText(path, good);
  CHECK_NOTHROW(load());
}

// A small tmpfs is a disk that fills up; mounting one needs root, so elsewhere this is skipped.
TEST_CASE("a full disk fails the save clearly and leaves the previous checkpoint loadable") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  ltrain::checkpoint::saveCheckpoint(dir / "probe.pt", *m, *opt, {});
  const auto pages = (std::filesystem::file_size(dir / "probe.pt") + 4095) / 4096;
  const std::string disk = dir / "disk";
  std::filesystem::create_directory(disk);
  // Room for one checkpoint and most of a second.
  const std::string mount = "mount -t tmpfs -o size=" + std::to_string((2 * pages - 1) * 4096) +
                            " ltrain-test " + disk + " 2>/dev/null";
  if (std::system(mount.c_str()) != 0) {
    SUCCEED("cannot mount a tmpfs here (not root); the full-disk case is not testable");
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() {
      if (std::system(("umount " + at).c_str()) != 0) WARN("cannot unmount " << at);
    }
  } unmount{disk};
  const std::string first = disk + "/step-00000001.pt";
  ltrain::checkpoint::saveCheckpoint(first, *m, *opt, {1, 0, 0, 0});
  CHECK_THROWS_WITH(ltrain::checkpoint::saveCheckpoint(disk + "/step-00000002.pt", *m, *opt, {2}),
                    Contains("cannot write checkpoint '" + disk + "/step-00000002.pt'") &&
                        Contains("No space left on device"));
  CHECK_FALSE(std::filesystem::exists(disk + "/step-00000002.pt"));
  CHECK(ltrain::checkpoint::checkpointsNewestFirst(disk) == std::vector<std::string>{first});
  CHECK(ltrain::checkpoint::loadCheckpoint(first, *m, *opt).step == 1);
}

TEST_CASE("saving into an unwritable place fails clearly and leaves the previous file intact") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  CHECK_THROWS_WITH(ltrain::checkpoint::saveCheckpoint(dir / "no/such/dir/x.pt", *m, *opt, {}),
                    Contains("cannot write checkpoint"));
  const auto path = dir / "step-00000003.pt";
  ltrain::checkpoint::saveCheckpoint(path, *m, *opt, {3, 0, 0, 0});
  const auto size = std::filesystem::file_size(path);
  std::filesystem::permissions(
      dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  if (access(dir.path().c_str(), W_OK) == 0) {
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
    SUCCEED("running as a user who can write anywhere; the read-only half is not testable here");
    return;
  }
  CHECK_THROWS(ltrain::checkpoint::saveCheckpoint(path, *m, *opt, {4, 0, 0, 0}));
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
  CHECK(std::filesystem::file_size(path) == size);
}

TEST_CASE("pruning sharded checkpoints deletes ltrain's files only, never the user's") {
  ltrain::test::TempDir dir;
  namespace fs = std::filesystem;
  for (const char* step :
       {"step-00000001.shards", "step-00000002.shards", "step-00000003.shards"}) {
    fs::create_directories(dir / step);
    for (const char* f :
         {"index.json", "rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"})
      ltrain::test::writeText(dir / step + "/" + f, "x");
  }
  // The user's notes beside the oldest checkpoint's parts, and a file of theirs next to them.
  ltrain::test::writeText(dir / "step-00000001.shards/notes.txt", "mine");
  ltrain::test::writeText(dir / "step-00000001.shards/data.tmp.123", "mine");
  ltrain::test::writeText(dir / "step-00000001.shards/index.json.tmp.77",
                          "x");  // a cut-short write
  ltrain::test::writeText(dir / "keep-me.txt", "mine");
  ltrain::checkpoint::pruneCheckpoints(dir.path(), 1);
  CHECK(fs::exists(dir / "step-00000003.shards/index.json"));
  CHECK_FALSE(fs::exists(dir / "step-00000002.shards"));  // all ltrain's: gone with its directory
  CHECK_FALSE(fs::exists(dir / "step-00000001.shards/index.json"));
  CHECK_FALSE(fs::exists(dir / "step-00000001.shards/rank-00000-of-00002.safetensors"));
  CHECK(ltrain::test::readText(dir / "step-00000001.shards/notes.txt") == "mine");
  CHECK(ltrain::test::readText(dir / "step-00000001.shards/data.tmp.123") == "mine");
  CHECK_FALSE(fs::exists(dir / "step-00000001.shards/index.json.tmp.77"));
  CHECK(ltrain::test::readText(dir / "keep-me.txt") == "mine");
}
