// Config loading: strictness, messages that name key, file and line, overrides, the reference page.
#include <catch2/catch.hpp>

#include "ltrain/common/errors.h"
#include "ltrain/config/emit.h"
#include "ltrain/config/load.h"
#include "ltrain/config/schema.h"
#include "ltrain/config/validate.h"
#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::UsageError;
using ltrain::config::loadConfigText;

namespace {
std::string errorOf(const std::string& yaml, std::vector<std::string> overrides = {}) {
  try {
    loadConfigText(yaml, "exp.yaml", overrides);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("defaults load from an empty file and match the schema's declared values") {
  auto lc = loadConfigText("", "exp.yaml", {});
  CHECK(lc.cfg.optimizer.name == ltrain::config::OptimizerName::kSgd);
  CHECK(lc.cfg.optimizer.lr == Approx(0.1));
  CHECK(lc.cfg.data.batch_size == 64);
  CHECK(lc.cfg.model.hidden == std::vector<int64_t>{256, 128, 100});
  CHECK(lc.cfg.dist.bucket_cap_mb == Approx(25.0));
  CHECK(lc.sources.at("optimizer.lr") == "default");
}

TEST_CASE("file values and overrides apply in order: defaults < file < overrides") {
  auto lc =
      loadConfigText("optimizer:\n  lr: 0.5\n  name: adamw\ntrain:\n  epochs: 4\n", "exp.yaml",
                     {"optimizer.lr=0.01", "model.hidden=[512,256]", "train.epochs=3"});
  CHECK(lc.cfg.optimizer.lr == Approx(0.01));
  CHECK(lc.cfg.optimizer.name == ltrain::config::OptimizerName::kAdamw);
  CHECK(lc.cfg.model.hidden == std::vector<int64_t>{512, 256});
  CHECK(lc.cfg.train.epochs == 3);
  CHECK(lc.sources.at("optimizer.name") == "exp.yaml:3");
  CHECK_THAT(lc.sources.at("optimizer.lr"), Contains("override optimizer.lr=0.01"));
}

TEST_CASE("an unknown key names the key, the file and line, and the closest known key") {
  auto msg = errorOf("name: x\noptimizer:\n  lrr: 0.1\n");
  CHECK_THAT(msg, Contains("exp.yaml:3"));
  CHECK_THAT(msg, Contains("unknown key 'optimizer.lrr'"));
  CHECK_THAT(msg, Contains("did you mean 'optimizer.lr'?"));
  // The right leaf under the wrong section.
  CHECK_THAT(errorOf("train:\n  lr: 0.1\n"), Contains("did you mean 'optimizer.lr'?"));
  CHECK_THAT(errorOf("optimiser:\n  lr: 0.1\n"), Contains("unknown key 'optimiser'"));
}

TEST_CASE("a wrong type names the key, the expected type and the value") {
  auto msg = errorOf("optimizer:\n  lr: fast\n");
  CHECK_THAT(msg, Contains("exp.yaml:2"));
  CHECK_THAT(msg, Contains("optimizer.lr"));
  CHECK_THAT(msg, Contains("expected a finite number"));
  CHECK_THAT(msg, Contains("'fast'"));
  CHECK_THAT(errorOf("data:\n  batch_size: 1.5\n"),
             Contains("data.batch_size: expected an integer, got '1.5'"));
  CHECK_THAT(errorOf("data:\n  shuffle: maybe\n"), Contains("expected a boolean"));
  CHECK_THAT(errorOf("model:\n  hidden: 256\n"), Contains("expected a list of int"));
  CHECK_THAT(errorOf("model:\n  hidden: [256, x]\n"),
             Contains("model.hidden: expected a list of int"));
  CHECK_THAT(errorOf("data: 3\n"), Contains("section 'data' must be a mapping"));
}

TEST_CASE("out-of-range values are errors naming the bound") {
  CHECK_THAT(errorOf("optimizer:\n  lr: 0\n"), Contains("optimizer.lr must be > 0, got 0"));
  CHECK_THAT(errorOf("optimizer:\n  lr: -1\n"), Contains("optimizer.lr must be > 0"));
  CHECK_THAT(errorOf("data:\n  batch_size: 0\n"), Contains("data.batch_size must be >= 1, got 0"));
  CHECK_THAT(errorOf("model:\n  dropout: 1.5\n"), Contains("model.dropout must be <= 0.99"));
  CHECK_THAT(errorOf("optimizer:\n  name: lbfgs\n"),
             Contains("optimizer.name must be one of sgd|adam|adamw, got 'lbfgs'"));
  CHECK_THAT(errorOf("optimizer:\n  betas: [0.9]\n"),
             Contains("optimizer.betas must have 2 values"));
  CHECK_THAT(errorOf("model:\n  name: cnn\n  kernel_size: 4\n"),
             Contains("model.kernel_size must be odd"));
  CHECK_THAT(errorOf("", {"train.epochs=0"}),
             Contains("override train.epochs=0: train.epochs must be >= 1"));
}

TEST_CASE("a field of another model family is refused") {
  CHECK_THAT(errorOf("model:\n  name: mlp\n  channels: [8]\n"),
             Contains("model.channels is a field of model 'cnn', but model.name is 'mlp'"));
  CHECK_NOTHROW(loadConfigText("model:\n  name: cnn\n  channels: [8]\n", "exp.yaml", {}));
}

TEST_CASE("override syntax errors name the override and what was expected") {
  CHECK_THAT(errorOf("", {"optimizer.lr"}),
             Contains("override 'optimizer.lr': expected KEY=VALUE"));
  CHECK_THAT(errorOf("", {"optimizer.lr="}), Contains("expected a value after '='"));
  CHECK_THAT(errorOf("", {"=3"}), Contains("expected KEY=VALUE"));
  CHECK_THAT(errorOf("", {"optimizer.lrr=0.1"}), Contains("did you mean 'optimizer.lr'?"));
  CHECK_THAT(errorOf("", {"model.hidden=[1,2"}), Contains("not valid YAML"));
  CHECK_THAT(errorOf("", {"optimizer=3"}), Contains("'optimizer' is a section"));
  auto [k, v] = ltrain::config::parseOverride("model.hidden=[512,256]");
  CHECK(k == "model.hidden");
  CHECK(v.IsSequence());
  CHECK(v.size() == 2);
}

TEST_CASE("broken YAML names the file and line") {
  auto msg = errorOf("name: x\ndata:\n  batch_size: [1, 2\n");
  CHECK_THAT(msg, Contains("exp.yaml:"));
  CHECK_THAT(msg, Contains("invalid YAML"));
  CHECK_THAT(errorOf("- a\n- b\n"), Contains("expected a mapping of config keys"));
}

TEST_CASE("the resolved YAML loads back to the same config") {
  auto lc = loadConfigText("model:\n  name: cnn\n  channels: [4, 8]\n", "exp.yaml",
                           {"optimizer.lr=0.02"});
  std::string yaml = ltrain::config::toYaml(lc.cfg);
  CHECK_THAT(yaml, Contains("channels: [4, 8]"));
  CHECK_THAT(yaml, !Contains("hidden:"));  // fields of the other model family are left out
  auto again = loadConfigText(yaml, "resolved.yaml", {});
  CHECK(ltrain::config::toYaml(again.cfg) == yaml);
}

TEST_CASE("docs/config.md is the schema's reference page") {
  // Regenerate with: build/ltrain config --reference > docs/config.md
  std::string doc = ltrain::test::readText(std::string(LTRAIN_SOURCE_DIR) + "/docs/config.md");
  CHECK(doc == ltrain::config::referenceMarkdown());
  for (const auto& o : ltrain::config::schema()) CHECK_THAT(doc, Contains("`" + o.path + "`"));
}

TEST_CASE(
    "data.channels 1 takes one-value gray defaults, and only a list the user wrote is refused") {
  const std::string gray = "data:\n  dataset: image_folder\n  path: /img\n  channels: 1\n";
  auto lc = loadConfigText(gray, "exp.yaml", {});
  CHECK(lc.cfg.data.mean == std::vector<double>{0.459});
  CHECK(lc.cfg.data.std == std::vector<double>{0.226});
  CHECK(lc.sources.at("data.mean") == "default (data.channels 1)");
  // As written, never replaced by the gray default.
  auto own = loadConfigText(gray, "exp.yaml", {"data.mean=[0.5]", "data.std=[0.5]"});
  CHECK(own.cfg.data.mean == std::vector<double>{0.5});
  CHECK(own.cfg.data.std == std::vector<double>{0.5});
  CHECK_THAT(errorOf(gray + "  mean: [0.5, 0.5, 0.5]\n"),
             Contains("data.mean has 3 values, expected one per channel (data.channels 1)"));
  CHECK(errorOf(gray + "  std: [1, 1, 1]\n").rfind("exp.yaml:5:", 0) == 0);
  CHECK(errorOf("data: {dataset: image_folder, path: /img}\n", {"data.mean=[0.5]"})
            .find("data.mean has 1 values, expected one per channel (data.channels 3)") !=
        std::string::npos);
  // The resolved config keeps the gray values and loads back unchanged.
  CHECK(ltrain::config::toYaml(loadConfigText(ltrain::config::toYaml(lc.cfg), "r.yaml", {}).cfg) ==
        ltrain::config::toYaml(lc.cfg));
}

TEST_CASE("every dataset with every model that reads it loads from its required keys alone") {
  // No default may be refused over another key the user set: each pairing is written as a new
  // user would, with only what it cannot do without (a path, the layers of a graph).
  const std::vector<std::pair<std::string, std::string>> datasets{
      {"fashion_mnist", ""},
      {"mnist", "path: /mnist"},
      {"cifar10", ""},
      {"cifar100", ""},
      {"csv", "path: /table"},
      {"text", "path: /corpus.txt"},
      {"tokens", "path: /shards"},
      {"image_folder", "path: /img"},
      {"image_folder", "path: /img, channels: 1"},
      {"image_list", "path: /img, channels: 1"},
      {"synthetic", ""}};
  const std::vector<std::string> models{"mlp", "cnn", "resnet", "gpt", "llama"};
  int loaded = 0;
  for (const auto& [dataset, extra] : datasets) {
    const auto kind = ltrain::config::dataKind(dataset);
    for (const auto& model : models) {
      const bool lm = model == "gpt" || model == "llama";
      if (lm != (kind == ltrain::config::DataKind::kTokens)) continue;
      if ((model == "cnn" || model == "resnet") && kind == ltrain::config::DataKind::kFeatures)
        continue;
      const std::string yaml = "data: {dataset: " + dataset + (extra.empty() ? "" : ", " + extra) +
                               "}\nmodel: {name: " + model + "}\n";
      INFO(yaml);
      CHECK(errorOf(yaml) == "");
      for (const std::string more : {"dist.zero=3", "train.activation_checkpointing=blocks"}) {
        if (more.rfind("train.activation", 0) == 0 && model == "mlp") continue;
        if (more.rfind("train.activation", 0) == 0 && model == "cnn") continue;
        INFO(more);
        CHECK(errorOf(yaml, {more}) == "");
      }
      ++loaded;
    }
  }
  CHECK(loaded == 29);
}
