// ltrain predict on what a run trained: over the run's own test split its predictions give the
// accuracy the run reported; one image, a flat folder and a table without labels predict as
// the same inputs do in bulk; bad inputs are one-line errors that leave files alone.
#include <fmt/format.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <sstream>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::runProcess;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
const std::string kQuickstart = std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml";

struct Row {
  std::string input, label, prediction;
  std::vector<double> probabilities;
};

// The predictions CSV as Python's csv module reads it (quoted fields included).
std::vector<Row> readPredictions(const std::string& path) {
  auto r = runProcess({LTRAIN_PYTHON, "-c",
                       "import csv,sys\nfor row in list(csv.reader(open(sys.argv[1])))[1:]:\n"
                       "  print('\\t'.join(row))\n",
                       path});
  REQUIRE(r.exit_code == 0);
  std::vector<Row> rows;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::string cell;
    std::istringstream cells(line);
    while (std::getline(cells, cell, '\t')) f.push_back(cell);
    if (!line.empty() && line.back() == '\t') f.emplace_back();
    REQUIRE(f.size() >= 4);
    Row row{f[0], f[1], f[2], {}};
    for (size_t i = 3; i < f.size(); i += 2) row.probabilities.push_back(std::stod(f[i]));
    rows.push_back(row);
  }
  return rows;
}

double accuracy(const std::vector<Row>& rows) {
  int64_t correct = 0;
  for (const auto& r : rows) correct += r.label == r.prediction;
  return static_cast<double>(correct) / static_cast<double>(rows.size());
}
}  // namespace

TEST_CASE("predict over a run's test images gives its reported accuracy", "[predict][image]") {
  TempDir dir;
  auto made =
      runProcess({LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/image_tools.py",
                  "fashion-folder", dir / "ff", "2000", "400"});
  REQUIRE(made.exit_code == 0);
  const std::vector<std::string> data{"data.dataset=image_folder",
                                      "data.path=" + (dir / "ff"),
                                      "data.channels=1",
                                      "data.image_size=28",
                                      "data.resize_size=28",
                                      "data.mean=[0.5]",
                                      "data.std=[0.5]"};
  auto train = std::vector<std::string>{"train", kQuickstart};
  train.insert(train.end(), data.begin(), data.end());
  const std::string run = dir / "run";
  train.insert(train.end(), {"train.epochs=2", "--output-dir", run});
  auto t = runLtrain(train);
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  const double reported =
      ltrain::test::readJson(dir / "run/summary.json")["test_accuracy"].get<double>();

  auto predict = [&](const std::string& input, const std::string& out,
                     std::vector<std::string> extra = {}) {
    auto args = std::vector<std::string>{"predict", kQuickstart};
    args.insert(args.end(), data.begin(), data.end());
    for (const std::string& a : {std::string("--checkpoint"), dir / "run/model.safetensors",
                                 std::string("--input"), input, std::string("--output"), out})
      args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    return runLtrain(args);
  };
  auto p = predict(dir / "ff/val", dir / "val.csv", {"--top-k", "3"});
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const auto rows = readPredictions(dir / "val.csv");
  REQUIRE(rows.size() == 400);
  CHECK(accuracy(rows) == Approx(reported).margin(1e-9));
  CHECK_THAT(p.out, Contains(fmt::format("accuracy {:.4f} over the 400", reported)));
  for (const auto& r : rows) {
    REQUIRE(r.probabilities.size() == 3);
    CHECK(r.probabilities[0] >= r.probabilities[1]);
    CHECK(r.probabilities[1] >= r.probabilities[2]);
    CHECK(r.probabilities[0] + r.probabilities[1] + r.probabilities[2] <= 1.0 + 1e-5);
  }
  // Class names are the folders' ("Ankle boot" has a space; "T-shirt" a dash).
  std::map<std::string, int> names;
  for (const auto& r : rows) names[r.prediction]++;
  for (const auto& [name, count] : names)
    CHECK(std::filesystem::is_directory(dir / ("ff/train/" + name)));

  // One image, and a flat folder of images: the same prediction, no label.
  const auto& first = rows.front();
  REQUIRE(predict(first.input, dir / "one.csv").exit_code == 0);
  const auto one = readPredictions(dir / "one.csv");
  REQUIRE(one.size() == 1);
  CHECK(one[0].prediction == first.prediction);
  CHECK(one[0].label.empty());
  CHECK(one[0].probabilities[0] == Approx(first.probabilities[0]).epsilon(1e-5));
  std::filesystem::create_directory(dir / "flat");
  for (int i = 0; i < 5; ++i)
    std::filesystem::copy_file(rows[static_cast<size_t>(i) * 40].input,
                               dir / fmt::format("flat/{}.png", i));
  REQUIRE(predict(dir / "flat", dir / "flat.csv").exit_code == 0);
  const auto flat = readPredictions(dir / "flat.csv");
  REQUIRE(flat.size() == 5);
  for (int i = 0; i < 5; ++i)
    CHECK(flat[static_cast<size_t>(i)].prediction == rows[static_cast<size_t>(i) * 40].prediction);

  // Bad inputs: one line each, exit 2, the user's files untouched.
  writeText(dir / "notes.csv", "my notes\n");
  auto exists = predict(dir / "ff/val", dir / "notes.csv");
  CHECK(exists.exit_code == 2);
  CHECK_THAT(exists.err, Contains("--output '" + (dir / "notes.csv") + "' exists"));
  CHECK(readText(dir / "notes.csv") == "my notes\n");
  auto missing = predict(dir / "nowhere", dir / "m.csv");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("--input '" + (dir / "nowhere") + "' not found"));
  writeText(dir / "broken.jpg", "\xff\xd8\xff\xe0 not really");
  auto broken = predict(dir / "broken.jpg", dir / "b.csv");
  CHECK(broken.exit_code == 2);
  CHECK_THAT(broken.err, Contains("image '" + (dir / "broken.jpg") + "'"));
  CHECK_FALSE(std::filesystem::exists(dir / "b.csv"));
  auto no_weights = runLtrain({"predict", kQuickstart, "--checkpoint", dir / "none.pt", "--input",
                               dir / "flat", "--output", dir / "w.csv"});
  CHECK(no_weights.exit_code == 2);
}

TEST_CASE("predict on a table: its test rows give the run's accuracy, with or without labels",
          "[predict]") {
  TempDir dir;
  // Two classes by the sign of x - y; "east, far" has a comma, quoted as CSV quotes it.
  auto gen = at::detail::createCPUGenerator(5);
  auto v = torch::randn({500, 3}, gen);
  std::string train = "x,y,noise,label\n", test = train, unlabelled = "x,y,noise\n";
  for (int i = 0; i < 500; ++i) {
    const float x = v[i][0].item<float>(), y = v[i][1].item<float>(), z = v[i][2].item<float>();
    const std::string features = fmt::format("{},{},{}", x, y, z);
    const std::string row = features + (x - y > 0 ? ",\"east, far\"\n" : ",west\n");
    (i < 400 ? train : test) += row;
    if (i >= 400) unlabelled += features + "\n";
  }
  std::filesystem::create_directory(dir / "table");
  writeText(dir / "table/train.csv", train);
  writeText(dir / "table/test.csv", test);
  writeText(dir / "unlabelled.csv", unlabelled);
  writeText(dir / "c.yaml", "data: {dataset: csv, batch_size: 32}\nmodel: {hidden: [16]}\n");
  auto t = runLtrain({"train", dir / "c.yaml", "data.path=" + (dir / "table"), "train.epochs=3",
                      "--output-dir", dir / "run"});
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  const double reported =
      ltrain::test::readJson(dir / "run/summary.json")["test_accuracy"].get<double>();
  const auto ckpt = (dir / "run/model.safetensors");
  auto p =
      runLtrain({"predict", dir / "c.yaml", "data.path=" + (dir / "table"), "--checkpoint", ckpt,
                 "--input", dir / "table/test.csv", "--output", dir / "p.csv", "--top-k", "5"});
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const auto labelled = readPredictions(dir / "p.csv");
  REQUIRE(labelled.size() == 100);
  CHECK(accuracy(labelled) == Approx(reported).margin(1e-9));
  CHECK(labelled[0].probabilities.size() == 2);  // --top-k 5 of 2 classes: both
  CHECK(labelled[0].input == "1");
  auto u = runLtrain({"predict", dir / "c.yaml", "data.path=" + (dir / "table"), "--checkpoint",
                      ckpt, "--input", dir / "unlabelled.csv", "--output", dir / "u.csv"});
  INFO(u.err);
  REQUIRE(u.exit_code == 0);
  const auto plain = readPredictions(dir / "u.csv");
  REQUIRE(plain.size() == 100);
  for (size_t i = 0; i < plain.size(); ++i) {
    CHECK(plain[i].label.empty());
    CHECK(plain[i].prediction == labelled[i].prediction);
  }
  // Columns that are not train.csv's.
  writeText(dir / "other.csv", "a,b\n1,2\n");
  auto other = runLtrain({"predict", dir / "c.yaml", "data.path=" + (dir / "table"), "--checkpoint",
                          ckpt, "--input", dir / "other.csv", "--output", dir / "o.csv"});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("input '" + (dir / "other.csv") + "': its columns differ"));
  // A dataset predict does not read.
  auto idx = runLtrain({"predict", kQuickstart, "--checkpoint", ckpt, "--input", dir / "other.csv",
                        "--output", dir / "i.csv"});
  CHECK(idx.exit_code == 2);
  CHECK_THAT(idx.err, Contains("data.dataset fashion_mnist is not one of them"));
}
