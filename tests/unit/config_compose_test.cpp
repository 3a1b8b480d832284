// Config composition: `base: other.yaml` chains (relative to the file naming them), Hydra's
// +KEY=VALUE and ~KEY overrides, and where each value came from.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/config/emit.h"
#include "ltrain/config/load.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using ltrain::config::loadConfig;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
std::string errorOf(const std::string& file, const std::vector<std::string>& overrides = {}) {
  try {
    loadConfig(file, overrides);
  } catch (const ltrain::UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a config overrides the keys of its base chain, and each value names its file") {
  TempDir dir;
  std::filesystem::create_directories(dir / "shared");
  writeText(dir / "shared/root.yaml", "optimizer:\n  lr: 0.5\n  name: adam\ntrain:\n  epochs: 7\n");
  writeText(dir / "shared/mid.yaml", "base: root.yaml\noptimizer:\n  lr: 0.2\n");  // beside it
  writeText(dir / "exp.yaml", "base: shared/mid.yaml\ntrain:\n  epochs: 2\n");
  auto lc = loadConfig(dir / "exp.yaml", {});
  CHECK(lc.cfg.optimizer.lr == Approx(0.2));                             // mid over root
  CHECK(lc.cfg.optimizer.name == ltrain::config::OptimizerName::kAdam);  // from root
  CHECK(lc.cfg.train.epochs == 2);                                       // exp over root
  CHECK(lc.cfg.data.batch_size == 64);                                   // the default
  CHECK_THAT(lc.sources.at("optimizer.name"), Contains("shared/root.yaml:3"));
  CHECK_THAT(lc.sources.at("optimizer.lr"), Contains("shared/mid.yaml:3"));
  CHECK_THAT(lc.sources.at("train.epochs"), Contains("exp.yaml:3"));
  const std::string explained = ltrain::config::toYamlExplained(lc);
  CHECK_THAT(explained, Contains("root.yaml:3"));
  CHECK_THAT(explained, Contains("mid.yaml:3"));
  // The resolved config is flat: no base key in it.
  const std::string yaml = ltrain::config::toYaml(lc.cfg);
  CHECK(yaml.rfind("base:", 0) == std::string::npos);
  CHECK_THAT(yaml, !Contains("\nbase:"));
}

TEST_CASE("a cycle of base files and a missing base are errors naming the files") {
  TempDir dir;
  writeText(dir / "a.yaml", "base: b.yaml\n");
  writeText(dir / "b.yaml", "base: a.yaml\n");
  const auto cycle = errorOf(dir / "a.yaml");
  CHECK_THAT(cycle, Contains("cycle"));
  CHECK_THAT(cycle, Contains("a.yaml -> "));
  CHECK_THAT(cycle, Contains("b.yaml"));
  writeText(dir / "self.yaml", "base: self.yaml\n");
  CHECK_THAT(errorOf(dir / "self.yaml"), Contains("cycle"));
  writeText(dir / "c.yaml", "name: x\nbase: nowhere.yaml\n");
  const auto missing = errorOf(dir / "c.yaml");
  CHECK_THAT(missing, Contains("c.yaml:2: base:"));
  CHECK_THAT(missing, Contains("nowhere.yaml' not found"));
  writeText(dir / "d.yaml", "base: [a.yaml]\n");
  CHECK_THAT(errorOf(dir / "d.yaml"), Contains("base: expected the path of another config file"));
  // A base with an error is reported at its own file and line.
  writeText(dir / "bad.yaml", "optimizer:\n  lrr: 1\n");
  writeText(dir / "e.yaml", "base: bad.yaml\n");
  CHECK_THAT(errorOf(dir / "e.yaml"), Contains("bad.yaml:2: unknown key 'optimizer.lrr'"));
}

TEST_CASE("+KEY=VALUE adds a key the files leave out, ~KEY takes one back to its default") {
  TempDir dir;
  writeText(dir / "base.yaml", "model:\n  dropout: 0.3\n");
  writeText(dir / "exp.yaml", "base: base.yaml\noptimizer:\n  lr: 0.05\n");
  auto lc = loadConfig(dir / "exp.yaml", {"+train.epochs=5", "~model.dropout", "~optimizer.lr"});
  CHECK(lc.cfg.train.epochs == 5);
  CHECK(lc.cfg.model.dropout == 0.0);  // the default again, although the base set it
  CHECK(lc.cfg.optimizer.lr == Approx(0.1));
  CHECK_THAT(lc.sources.at("model.dropout"), Contains("default (override ~model.dropout)"));
  CHECK_THAT(lc.sources.at("train.epochs"), Contains("override +train.epochs=5"));
  // + on a key the files set, ~ on one they do not: errors that say what to write instead.
  const auto add = errorOf(dir / "exp.yaml", {"+optimizer.lr=0.2"});
  CHECK_THAT(add, Contains("optimizer.lr is already set (" + (dir / "exp.yaml") + ":3)"));
  CHECK_THAT(add, Contains("use optimizer.lr=... to change it"));
  CHECK_THAT(errorOf(dir / "exp.yaml", {"~train.epochs"}),
             Contains("train.epochs is not set by the config file"));
  CHECK_THAT(errorOf(dir / "exp.yaml", {"~optimizer.lrr"}),
             Contains("did you mean 'optimizer.lr'"));
  CHECK_THAT(errorOf(dir / "exp.yaml", {"+optimizer.lr"}), Contains("expected KEY=VALUE"));
  // Plain KEY=VALUE still sets any key, in the file or not.
  CHECK(loadConfig(dir / "exp.yaml", {"optimizer.lr=0.2", "train.epochs=4"}).cfg.train.epochs == 4);
}
