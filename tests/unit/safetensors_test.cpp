// safetensors: round trip, and broken files named clearly.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/model.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using ltrain::io::loadSafetensors;
using ltrain::io::saveSafetensors;

namespace {
std::string errorOf(const std::string& path) {
  try {
    loadSafetensors(path);
  } catch (const ltrain::UsageError& e) {
    return e.what();
  }
  return "";
}
std::string withHeader(const std::string& json, size_t data_bytes) {
  std::string s;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) s += static_cast<char>((n >> (8 * i)) & 0xff);
  return s + json + std::string(data_bytes, '\1');
}
}  // namespace

TEST_CASE("safetensors round trip keeps names, dtypes, shapes and values") {
  ltrain::test::TempDir dir;
  auto a = torch::randn({3, 4});
  auto b = torch::arange(5, torch::kLong);
  auto c = torch::randn({2, 2}).to(torch::kBFloat16);
  saveSafetensors(dir / "x.safetensors", {{"a", a}, {"layers.0.weight", b}, {"c", c}},
                  {{"step", "3"}});
  auto back = loadSafetensors(dir / "x.safetensors");
  REQUIRE(back.size() == 3);
  CHECK(torch::equal(back["a"], a));
  CHECK(torch::equal(back["layers.0.weight"], b));
  CHECK(back["c"].scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(back["c"], c));
}

TEST_CASE("a model's state loads back, and mismatches are named") {
  ltrain::test::TempDir dir;
  auto cfg = ltrain::config::defaults();
  cfg.model.hidden = {8};
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  saveSafetensors(dir / "m.safetensors", ltrain::io::moduleState(*m));
  auto m2 = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  ltrain::io::loadModuleState(*m2, dir / "m.safetensors");
  CHECK(torch::equal(m->parameters()[0], m2->parameters()[0]));

  cfg.model.hidden = {9};
  auto wider = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  CHECK_THROWS_WITH(ltrain::io::loadModuleState(*wider, dir / "m.safetensors"),
                    Contains("tensor 'layers.1.weight' has shape 8x16, the model expects 9x16"));
  saveSafetensors(dir / "part.safetensors",
                  {{"layers.1.weight", m->parameters()[0]}, {"layers.1.bias", m->parameters()[1]}});
  CHECK_THROWS_WITH(ltrain::io::loadModuleState(*m2, dir / "part.safetensors"),
                    Contains("has no tensor 'layers.3.weight' that the model needs"));
  saveSafetensors(dir / "extra.safetensors", {{"layers.1.weight", m->parameters()[0]},
                                              {"layers.1.bias", m->parameters()[1]},
                                              {"layers.3.weight", m->parameters()[2]},
                                              {"layers.3.bias", m->parameters()[3]},
                                              {"bogus", torch::zeros({1})}});
  CHECK_THROWS_WITH(ltrain::io::loadModuleState(*m2, dir / "extra.safetensors"),
                    Contains("'bogus'"));
}

TEST_CASE("broken safetensors files are usage errors naming the problem") {
  ltrain::test::TempDir dir;
  CHECK_THAT(errorOf(dir / "none"), Contains("not found"));
  ltrain::test::writeText(dir / "short", "abc");
  CHECK_THAT(errorOf(dir / "short"), Contains("truncated"));
  ltrain::test::writeText(dir / "long", withHeader("{}", 0).replace(0, 1, "\x7f"));
  CHECK_THAT(errorOf(dir / "long"),
             Contains("is not a safetensors file or is truncated: its header length field says"));
  ltrain::test::writeText(dir / "json", withHeader("{not json", 0));
  CHECK_THAT(errorOf(dir / "json"), Contains("not valid JSON"));
  ltrain::test::writeText(
      dir / "dtype",
      withHeader(R"({"a": {"dtype": "F7", "shape": [1], "data_offsets": [0, 4]}})", 4));
  CHECK_THAT(errorOf(dir / "dtype"), Contains("unknown dtype 'F7'"));
  ltrain::test::writeText(
      dir / "size",
      withHeader(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4));
  CHECK_THAT(errorOf(dir / "size"), Contains("for 8 bytes of data"));
  ltrain::test::writeText(
      dir / "cut",
      withHeader(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8));
  CHECK_THAT(errorOf(dir / "cut"), Contains("runs past the end"));
  ltrain::test::writeText(
      dir / "overlap",
      withHeader(
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
          12));
  CHECK_THAT(errorOf(dir / "overlap"), Contains("overlap"));
  ltrain::test::writeText(dir / "fields", withHeader(R"({"a": {"dtype": "F32"}})", 0));
  CHECK_THAT(errorOf(dir / "fields"), Contains("needs dtype, shape and data_offsets"));
}
