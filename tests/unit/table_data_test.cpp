// The CIFAR binary and CSV readers on small files written here, good and broken.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/data/cifar.h"
#include "ltrain/data/csv_table.h"
#include "ltrain/data/loader.h"
#include "support/process.h"
#include "support/run_files.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
// `n` CIFAR records: label bytes, then pixel value (r + c + i) % 256 at channel c, pixel i.
std::string cifarRecords(int n, std::vector<int> labels_prefix, int first_label) {
  std::string out;
  for (int r = 0; r < n; ++r) {
    for (int b : labels_prefix) out += static_cast<char>(b);
    out += static_cast<char>((first_label + r) % 10);
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 1024; ++i) out += static_cast<char>((r + c + i) % 256);
  }
  return out;
}
}  // namespace

TEST_CASE("CIFAR-10 binary files: every record, label and pixel in place") {
  TempDir dir;
  for (int b = 1; b <= 5; ++b)
    writeText(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifarRecords(2, {}, b));
  writeText(dir / "test_batch.bin", cifarRecords(3, {}, 7));
  auto s = ltrain::data::loadCifar(dir.path(), 10);
  REQUIRE(s.train.inputs.sizes() == torch::IntArrayRef({10, 3, 32, 32}));
  CHECK(s.test.size() == 3);
  CHECK(s.train.targets[0].item<int64_t>() == 1);  // batch 1, record 0
  CHECK(s.train.targets[9].item<int64_t>() == 6);  // batch 5, record 1
  CHECK(s.test.targets[2].item<int64_t>() == 9);
  // Channel 2 (blue), row 3, column 5 of record 1: value (1 + 2 + 3*32+5) % 256.
  CHECK(s.train.inputs[1][2][3][5].item<int>() == (1 + 2 + 3 * 32 + 5) % 256);
  // The loader normalises per channel with CIFAR-10's statistics.
  std::vector<int64_t> idx{1};
  auto b = ltrain::data::makeBatch(s.train, idx.data(), 1, false);
  CHECK(b.inputs[0][2][3][5].item<float>() ==
        Approx(((1 + 2 + 3 * 32 + 5) / 255.f - 0.4465f) / 0.2616f));

  writeText(dir / "test_batch.bin", cifarRecords(3, {}, 7).substr(0, 3073 * 2 + 100));
  CHECK_THROWS_WITH(ltrain::data::loadCifar(dir.path(), 10),
                    Contains("test_batch.bin' is truncated or not CIFAR-10: 6246 bytes"));
  std::string bad = cifarRecords(3, {}, 7);
  bad[3073] = 12;
  writeText(dir / "test_batch.bin", bad);
  CHECK_THROWS_WITH(ltrain::data::loadCifar(dir.path(), 10),
                    Contains("test_batch.bin': record 1 has label 12, expected 0..9"));
  std::filesystem::remove(dir / "data_batch_3.bin");
  CHECK_THROWS_AS(ltrain::data::loadCifar(dir.path(), 10), ltrain::UsageError);
  CHECK_THROWS_WITH(ltrain::data::loadCifar(dir.path(), 10),
                    Contains("data_batch_3.bin' not found"));
}

TEST_CASE("CIFAR-100 uses the fine label, the second of its two label bytes") {
  TempDir dir;
  std::string rec = cifarRecords(1, {3}, 0);
  rec[1] = 57;
  writeText(dir / "train.bin", rec + rec);
  writeText(dir / "test.bin", rec);
  auto s = ltrain::data::loadCifar(dir.path(), 100);
  CHECK(s.train.targets[1].item<int64_t>() == 57);
  CHECK(s.train.num_classes == 100);
}

TEST_CASE("CSV tables: labels by name, standardised features, clear errors") {
  TempDir dir;
  writeText(dir / "train.csv", "x,species,y\n1,cat,10\n3,dog,30\n\"5\",cat,50\n");
  writeText(dir / "test.csv", "x,species,y\n2,dog,20\n");
  auto s = ltrain::data::loadCsv(dir.path(), "species");
  REQUIRE(s.train.inputs.sizes() == torch::IntArrayRef({3, 2}));
  CHECK(s.train.num_classes == 2);
  CHECK(s.train.targets.equal(torch::tensor({0, 1, 0}, torch::kLong)));  // cat 0, dog 1
  CHECK(s.test.targets[0].item<int64_t>() == 1);
  CHECK(s.train.inputs.mean(0).abs().max().item<float>() < 1e-6);
  // Test rows use the training statistics: x=2 is (2 - 3) / std(1, 3, 5).
  CHECK(s.test.inputs[0][0].item<float>() == Approx(-1.0 / std::sqrt(8.0 / 3.0)));

  auto error = [&](const std::string& train, const std::string& test, const std::string& label) {
    writeText(dir / "train.csv", train);
    writeText(dir / "test.csv", test);
    try {
      ltrain::data::loadCsv(dir.path(), label);
    } catch (const ltrain::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ok = "x,label\n1,a\n2,c\n";
  CHECK_THAT(error("x,label\n1,a\nz,b\n", ok, "label"),
             Contains("train.csv:3: column 'x' holds 'z', expected a number"));
  CHECK_THAT(error("x,label\n1,a,7\n", ok, "label"),
             Contains("train.csv:2: 3 fields, expected 2 as in the header"));
  CHECK_THAT(error(ok, ok, "class"), Contains("no column 'class' (data.label_column)"));
  CHECK_THAT(error(ok, "x,label\n1,b\n", "label"),
             Contains("label 'b', which train.csv never has"));
  CHECK_THAT(error(ok, "y,label\n1,a\n", "label"), Contains("its columns differ from train.csv's"));
  CHECK_THAT(error("", ok, "label"), Contains("is empty: expected a header row"));
  CHECK_THAT(error("x,label\n1,a\n2,a\n", ok, "label"),
             Contains("holds one class, expected at least 2"));
  // A byte-order mark and spaces around fields are not part of the data.
  CHECK(error("\xEF\xBB\xBFlabel, x\na , 1\nc, 2 \n", "label,x\na,3\n", "label") == "no error");
  // A column constant in train.csv is centred, not blown up by a vanishing deviation.
  writeText(dir / "train.csv", "k,x,label\n5,1,a\n5,2,c\n");
  writeText(dir / "test.csv", "k,x,label\n6,1,a\n");
  CHECK(ltrain::data::loadCsv(dir.path(), "label").test.inputs[0][0].item<float>() == Approx(1.0));
}

TEST_CASE("ltrain trains an MLP on a CSV table") {
  TempDir dir;
  // Two classes separated by the sign of x + y, with a noise column.
  std::string rows = "x,y,noise,label\n";
  auto gen = at::detail::createCPUGenerator(3);
  auto v = torch::randn({600, 3}, gen);
  for (int i = 0; i < 600; ++i) {
    const float x = v[i][0].item<float>(), y = v[i][1].item<float>(), z = v[i][2].item<float>();
    rows += fmt::format("{},{},{},{}\n", x, y, z, x + y > 0 ? "up" : "down");
  }
  std::filesystem::create_directory(dir / "table");
  writeText(dir / "table/train.csv", rows.substr(0, rows.find('\n', rows.size() * 5 / 6)) + "\n");
  writeText(dir / "table/test.csv",
            "x,y,noise,label\n" + rows.substr(rows.find('\n', rows.size() * 5 / 6) + 1));
  writeText(dir / "c.yaml", "data: {dataset: csv, batch_size: 32}\nmodel: {hidden: [16]}\n");
  auto r = ltrain::test::runLtrain({"train", dir / "c.yaml", "data.path=" + (dir / "table"),
                                    "train.epochs=5", "--output-dir", dir / "run"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["test_accuracy"].get<double>() > 0.9);
}

TEST_CASE("ltrain trains a CNN on CIFAR-10 binary files") {
  TempDir dir;
  for (int b = 1; b <= 5; ++b)
    writeText(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifarRecords(4, {}, b));
  writeText(dir / "test_batch.bin", cifarRecords(4, {}, 0));
  writeText(dir / "c.yaml",
            "data: {dataset: cifar10, batch_size: 4}\n"
            "model: {name: cnn, channels: [4, 8], fc: [16]}\n");
  auto r = ltrain::test::runLtrain({"train", dir / "c.yaml", "data.path=" + dir.path(),
                                    "train.epochs=1", "--output-dir", dir / "run"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("20 training / 4 test examples"));
}
