// Sweep parameter syntax and trial expansion: grids in itertools.product order, Python's range,
// and reproducible random draws within their bounds.
#include <catch2/catch.hpp>

#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/config/yaml_scalar.h"
#include "ltrain/models/layers/layer_graph.h"
#include "ltrain/sweep/params.h"
#include "ltrain/sweep/sweep.h"
#include "support/process.h"

using ltrain::sweep::expandTrials;
using ltrain::sweep::parseParam;

TEST_CASE("sweep values: lists, choice and range") {
  CHECK(parseParam("a", "0.1,0.01").values == std::vector<std::string>{"0.1", "0.01"});
  CHECK(parseParam("m", "[512,256],[128]").values ==
        std::vector<std::string>{"[512,256]", "[128]"});
  CHECK(parseParam("c", "choice(sgd, adam)").values == std::vector<std::string>{"sgd", "adam"});
  CHECK(parseParam("b", "range(16,65,16)").values ==
        std::vector<std::string>{"16", "32", "48", "64"});
  CHECK(parseParam("x", "range(0,1,0.25)").values ==
        std::vector<std::string>{"0", "0.25", "0.5", "0.75"});
  CHECK(parseParam("d", "range(5,0,-2)").values == std::vector<std::string>{"5", "3", "1"});
  CHECK(ltrain::sweep::isSweepValue("1,2"));
  CHECK(ltrain::sweep::isSweepValue("range(1,3)"));
  CHECK_FALSE(ltrain::sweep::isSweepValue("[512,256]"));
  CHECK_FALSE(ltrain::sweep::isSweepValue("0.1"));
  CHECK_THROWS_AS(parseParam("b", "range(1,1)"), ltrain::UsageError);
  CHECK_THROWS_AS(parseParam("b", "range(0,10,0)"), ltrain::UsageError);
  CHECK_THROWS_WITH(parseParam("lr", "normal(0,1)"), Catch::Contains("unknown function 'normal'"));
  CHECK_THROWS_WITH(parseParam("lr", "loguniform(0,1)"), Catch::Contains("low > 0"));
}

TEST_CASE("a grid is the cartesian product, the last parameter varying fastest") {
  auto trials = expandTrials(
      {parseParam("optimizer.lr", "0.1,0.01,0.001"), parseParam("data.batch_size", "32,64")}, 0, 0);
  REQUIRE(trials.size() == 6);
  CHECK(trials[0].overrides() ==
        std::vector<std::string>{"optimizer.lr=0.1", "data.batch_size=32"});
  CHECK(trials[1].overrides() ==
        std::vector<std::string>{"optimizer.lr=0.1", "data.batch_size=64"});
  CHECK(trials[5].overrides() ==
        std::vector<std::string>{"optimizer.lr=0.001", "data.batch_size=64"});
  CHECK(trials[2].shortName() == "003-lr=0.01,batch_size=32");
  auto hidden = expandTrials({parseParam("model.hidden", "[512,256],[64]")}, 0, 0);
  CHECK(hidden[0].shortName() == "001-hidden=_512,256_");
}

TEST_CASE("random search draws sweep.samples trials within bounds, the same for the same seed") {
  std::vector<ltrain::sweep::Param> ps{parseParam("optimizer.lr", "loguniform(1e-4,1e-1)"),
                                       parseParam("model.dropout", "uniform(0,0.5)"),
                                       parseParam("train.epochs", "int(1,3)"),
                                       parseParam("optimizer.name", "sgd,adam")};
  auto a = expandTrials(ps, 50, 7), b = expandTrials(ps, 50, 7), c = expandTrials(ps, 50, 8);
  REQUIRE(a.size() == 50);
  bool differs = false;
  std::set<std::string> epochs, names;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].values == b[i].values);
    differs = differs || a[i].values != c[i].values;
    const double lr = std::stod(a[i].values[0].second), p = std::stod(a[i].values[1].second);
    CHECK((lr >= 1e-4 && lr <= 1e-1));
    CHECK((p >= 0 && p <= 0.5));
    epochs.insert(a[i].values[2].second);
    names.insert(a[i].values[3].second);
  }
  CHECK(differs);
  CHECK(epochs == std::set<std::string>{"1", "2", "3"});  // both ends included
  CHECK(names == std::set<std::string>{"adam", "sgd"});
  CHECK_THROWS_WITH(expandTrials(ps, 0, 1), Catch::Contains("sweep.samples"));
}

// Config values, layer arguments and sweep files read YAML scalars one way
// (config/yaml_scalar.h): yaml-cpp's integers (0x, octal), no overflow to the largest integer,
// no NaN.
TEST_CASE("config values, layer arguments and sweep files read numbers alike") {
  using ltrain::config::yamlInt;
  using ltrain::config::yamlNumber;
  using ltrain::config::yamlOf;
  CHECK(yamlInt(yamlOf("0x10")) == 16);
  CHECK(yamlInt(yamlOf("010")) == 8);
  CHECK_FALSE(yamlInt(yamlOf("99999999999999999999")));
  CHECK_FALSE(yamlInt(yamlOf("1.5")));
  CHECK_FALSE(yamlNumber(yamlOf(".nan")));
  CHECK_FALSE(yamlNumber(yamlOf("[1")));  // no YAML at all
  CHECK(yamlNumber(yamlOf("1e-4")) == 1e-4);

  // A sweep file's seed that overflows is refused, not read as the largest integer.
  ltrain::test::TempDir dir;
  const std::string file = dir / "s.yaml";
  ltrain::test::writeText(file,
                          "base: c.yaml\nparams: {optimizer.lr: '0.1,0.01'}\n"
                          "sweep: {seed: 99999999999999999999}\n");
  CHECK_THROWS_WITH(ltrain::sweep::loadSweepFile(file, ""),
                    Catch::Contains("s.yaml:3: sweep.seed: expected an integer >= 0, got "
                                    "'99999999999999999999'"));
  ltrain::test::writeText(
      file, "base: c.yaml\nparams: {optimizer.lr: '0.1,0.01'}\nsweep: {seed: 0x10}\n");
  CHECK(ltrain::sweep::loadSweepFile(file, "").seed == 16);

  // A layer argument that is NaN is out of every range.
  ltrain::config::LayerSpec drop{"dropout", {{"p", ".nan"}}, {}, 4};
  CHECK_THROWS_WITH(ltrain::models::buildLayerGraph({drop}, {8}, 0, false),
                    Catch::Contains("model.layers[0] (dropout): p: expected a number in [0, 0.99], "
                                    "got '.nan'"));
}
