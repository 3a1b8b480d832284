// Checkpoint round trip: weights, optimizer state, and each stateful component (loop position,
// loss scaler, loss tally, RNG state) come back.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/rng_streams.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "ltrain/optim/optimizer.h"
#include "ltrain/train/grad_scaler.h"
#include "ltrain/train/loss_tally.h"
#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::checkpoint::LoopState;

namespace {

// A training checkpoint's components besides the model and the optimizer: the loop position
// and the random generators (the trainer adds the loss scaler and the loss tally).
void save(const std::string& path, torch::nn::Module& m, torch::optim::Optimizer& opt,
          LoopState st) {
  ltrain::RngStreams rng(torch::kCPU);
  ltrain::checkpoint::saveCheckpoint(path, m, opt, {&st, &rng});
}

LoopState load(const std::string& path, torch::nn::Module& m, torch::optim::Optimizer& opt) {
  LoopState st;
  ltrain::RngStreams rng(torch::kCPU);
  ltrain::checkpoint::loadCheckpoint(path, m, opt, {&st, &rng});
  return st;
}

}  // namespace

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
  LoopState st{7, 2, 5, 1234};
  const auto path = ltrain::checkpoint::checkpointPath(dir.path(), st.step);
  save(path, *m, *opt, st);
  auto next_random = torch::rand({4});  // what the RNG gives right after the save

  torch::manual_seed(99);
  auto m2 = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt2 = ltrain::optim::makeOptimizer(cfg.optimizer, m2->parameters());
  auto back = load(path, *m2, *opt2);
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
  auto load_it = [&] { load(path, *m, *opt); };
  ltrain::test::writeText(path, "not a checkpoint, but long enough");
  CHECK_THROWS_WITH(load_it(), Contains("step-00000001.pt' is unusable: not an ltrain checkpoint"));
  CHECK_THROWS_AS(load_it(), ltrain::UsageError);

  save(path, *m, *opt, {1, 0, 0, 0});
  const std::string good = ltrain::test::readText(path);
  ltrain::test::writeText(path, good.substr(0, good.size() - 100));
  CHECK_THROWS_WITH(load_it(), Contains("is unusable: truncated"));
  for (size_t at : {size_t{30}, good.size() / 2, good.size() - 1}) {  // one bit anywhere
    std::string flipped = good;
    flipped[at] ^= 0x01;
    ltrain::test::writeText(path, flipped);
    CHECK_THROWS_WITH(load_it(), Contains("is unusable: checksum mismatch"));
  }
  ltrain::test::writeText(path, good);
  CHECK_NOTHROW(load_it());
}

// A small tmpfs is a disk that fills up; mounting one needs root, so elsewhere this is skipped.
TEST_CASE("a full disk fails the save clearly and leaves the previous checkpoint loadable") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  save(dir / "probe.pt", *m, *opt, {});
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
  save(first, *m, *opt, {1, 0, 0, 0});
  CHECK_THROWS_WITH(save(disk + "/step-00000002.pt", *m, *opt, {2}),
                    Contains("cannot write checkpoint '" + disk + "/step-00000002.pt'") &&
                        Contains("No space left on device"));
  CHECK_FALSE(std::filesystem::exists(disk + "/step-00000002.pt"));
  CHECK(ltrain::checkpoint::checkpointsNewestFirst(disk) == std::vector<std::string>{first});
  CHECK(load(first, *m, *opt).step == 1);
}

TEST_CASE("saving into an unwritable place fails clearly and leaves the previous file intact") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  CHECK_THROWS_WITH(save(dir / "no/such/dir/x.pt", *m, *opt, {}),
                    Contains("cannot write checkpoint"));
  const auto path = dir / "step-00000003.pt";
  save(path, *m, *opt, {3, 0, 0, 0});
  const auto size = std::filesystem::file_size(path);
  std::filesystem::permissions(
      dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  if (access(dir.path().c_str(), W_OK) == 0) {
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
    SUCCEED("running as a user who can write anywhere; the read-only half is not testable here");
    return;
  }
  CHECK_THROWS(save(path, *m, *opt, {4, 0, 0, 0}));
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

namespace {

// A component whose state is whatever the test gives it.
struct Fixed final : ltrain::Stateful {
  ltrain::StateDict dict;
  ltrain::StateDict state() const override { return dict; }
  void load(const ltrain::StateDict& s) override { dict = s; }
};

}  // namespace

TEST_CASE("each component saves and loads its own state, and the checkpoint does not know them") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  LoopState loop{9, 1, 3, 576};
  loop.epoch_examples = 96, loop.world_size = 4;
  ltrain::train::GradScaler scaler(true);
  scaler.update(torch::ones({1}));  // an inf step: the scale halves, the tracker restarts
  scaler.update(torch::zeros({1}));
  ltrain::train::LossTally tally(torch::kCPU);
  tally.add(torch::tensor(2.0), torch::Tensor(), false, 1);
  tally.add(torch::tensor(4.0), torch::Tensor(), false, 2);
  tally.add(torch::tensor(0.0), torch::Tensor(), true, 3);
  Fixed other;  // a component the checkpoint module has never heard of
  other.dict = {{"my_counter", ltrain::stateScalar(int64_t{41})},
                {"my_table", torch::arange(6, torch::kFloat).reshape({2, 3})}};
  const auto path = dir / "step-00000009.pt";
  ltrain::checkpoint::saveCheckpoint(path, *m, *opt, {&loop, &scaler, &tally, &other});

  LoopState loop2;
  ltrain::train::GradScaler scaler2(true);
  ltrain::train::LossTally tally2(torch::kCPU);
  Fixed other2;
  other2.dict = {{"my_counter", ltrain::stateScalar(int64_t{0})},
                 {"my_table", torch::zeros({2, 3})},
                 {"my_new_entry", ltrain::stateScalar(1.0)}};  // not in the older checkpoint
  ltrain::checkpoint::loadCheckpoint(path, *m, *opt, {&loop2, &scaler2, &tally2, &other2});
  CHECK(loop2.step == 9);
  CHECK(loop2.samples == 576);
  CHECK(loop2.epoch_examples == 96);
  CHECK(loop2.world_size == 4);
  CHECK(scaler2.scale() == 32768.0);
  CHECK(scaler2.growthTracker() == 1);
  CHECK(tally2.read().epoch_sum == 6.0);
  CHECK(tally2.read().epoch_count == 2);
  CHECK(tally2.read().skipped == 1);
  REQUIRE(other2.dict.size() == 2);  // what the checkpoint held of its names, no more
  CHECK(other2.dict[0].second.item<int64_t>() == 41);
  CHECK(torch::equal(other2.dict[1].second, torch::arange(6, torch::kFloat).reshape({2, 3})));
}

TEST_CASE(
    "a checkpoint whose generator state is the wrong size is refused, naming it, and changes "
    "nothing") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  Fixed forged;
  forged.dict = {{"rng_cpu", torch::zeros({3}, torch::kByte)}};
  const auto path = dir / "step-00000001.pt";
  ltrain::checkpoint::saveCheckpoint(path, *m, *opt, {&forged});
  torch::manual_seed(7);  // another model, which the refused load must leave as it is
  auto other = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto other_opt = ltrain::optim::makeOptimizer(cfg.optimizer, other->parameters());
  std::vector<torch::Tensor> before;
  for (const auto& p : other->parameters()) before.push_back(p.clone());
  LoopState loop{5};
  ltrain::RngStreams rng(torch::kCPU);
  torch::manual_seed(3);
  const auto expected = torch::rand({4});
  torch::manual_seed(3);
  CHECK_THROWS_WITH(ltrain::checkpoint::loadCheckpoint(path, *other, *other_opt, {&loop, &rng}),
                    Contains("step-00000001.pt' is unusable"));
  forged.dict.emplace_back("step", ltrain::stateScalar(int64_t{1}));  // the loop's are all there
  for (const char* k : {"epoch", "batch_in_epoch", "samples"})
    forged.dict.emplace_back(k, ltrain::stateScalar(int64_t{0}));
  ltrain::checkpoint::saveCheckpoint(path, *m, *opt, {&forged});
  CHECK_THROWS_WITH(ltrain::checkpoint::loadCheckpoint(path, *other, *other_opt, {&loop, &rng}),
                    Contains("step-00000001.pt' is unusable") &&
                        Contains("'rng_cpu' is not a generator state of"));
  CHECK(torch::equal(torch::rand({4}), expected));  // the generator was left as it was
  CHECK(loop.step == 5);                            // and so was every other component
  const auto after = other->parameters();
  for (size_t i = 0; i < after.size(); ++i) CHECK(torch::equal(after[i], before[i]));  // the model
}

// A checkpoint whose frame and checksum are whole but whose TorchScript code does not compile
// (kept in the fuzz corpus): torch's reader throws its compiler's ErrorReport, not a c10::Error,
// and that too is a one-line usage error naming the file.
TEST_CASE("a checkpoint whose archive torch cannot read is a usage error naming the file") {
  auto cfg = ltrain::config::defaults();
  cfg.model.hidden = {8};
  auto m = ltrain::models::build(cfg.model, {1, 6, 6}, 10);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  const std::string path =
      std::string(LTRAIN_SOURCE_DIR) + "/tests/fuzz/corpus/checkpoint/bad_torchscript_code.pt";
  ltrain::checkpoint::LoopState loop;
  CHECK_THROWS_AS(ltrain::checkpoint::loadCheckpoint(path, *m, *opt, {&loop}), ltrain::UsageError);
  try {
    ltrain::checkpoint::loadCheckpoint(path, *m, *opt, {&loop});
  } catch (const ltrain::UsageError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("checkpoint '" + path + "' is unusable: expected ident"));
    CHECK(what.find('\n') == std::string::npos);  // one line, without the quoted code
  }
  CHECK_THROWS_AS(ltrain::checkpoint::loadCheckpointModel(path, *m), ltrain::UsageError);
}
