// data.dataset image_folder and image_list on files Pillow writes (tests/parity/image_tools.py):
// the order of torchvision's ImageFolder, the evaluation transform against torchvision's Resize
// and CenterCrop, Fashion-MNIST as PNG files training as the same arrays in IDX do (2
// processes), a file that does not decode stopping the run with its name (worker threads or
// not) or skipped and counted, and DCT-scaled JPEG decoding against Pillow's draft mode.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include "ltrain/data/image_decode.h"
#include "ltrain/data/image_files.h"
#include "ltrain/data/image_transforms.h"
#include "ltrain/io/files.h"
#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {
const std::string kTools = std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/image_tools.py";
const std::string kQuickstart = std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml";

void tool(const std::vector<std::string>& args) {
  std::vector<std::string> argv{LTRAIN_PYTHON, kTools};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = runProcess(argv);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

double testAccuracy(const std::string& run) {
  return ltrain::test::readJson(run + "/summary.json")["test_accuracy"].get<double>();
}
}  // namespace

TEST_CASE("image_folder's classes and files follow torchvision's ImageFolder", "[data][image]") {
  TempDir dir;
  tool({"fashion-folder", dir / "ff", "300", "50"});
  std::vector<std::string> paths, classes;
  std::vector<int64_t> labels;
  ltrain::data::listImageFolder(dir / "ff/train", paths, labels, classes);
  // torchvision.datasets.ImageFolder itself (torchvision pinned beside torch).
  auto r = runProcess({LTRAIN_PYTHON, kTools, "image-folder-samples", dir / "ff/train"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ostringstream ours;
  for (size_t i = 0; i < paths.size(); ++i) ours << paths[i] << " " << labels[i] << "\n";
  CHECK(ours.str() == r.out);
  CHECK(classes.front() == "Ankle boot");
  CHECK(classes.size() == 10);
}

TEST_CASE("the evaluation transform is torchvision's Resize and CenterCrop, within 1 level",
          "[data][image]") {
  TempDir dir;
  tool({"make-decode-set", dir / "set"});
  tool({"eval-transform", dir / "set", "24", "20"});
  const auto theirs = ltrain::io::loadSafetensors(dir / "set/eval.safetensors");
  REQUIRE(theirs.size() >= 10);
  double worst = 0, mean_sum = 0;
  for (const auto& [name, pil] : theirs) {
    INFO(name);
    auto im = ltrain::data::decodeImageFile(dir / ("set/" + name), 3);
    auto ours = ltrain::data::evalTransform(im, 24, 20).permute({1, 2, 0}).to(torch::kFloat);
    REQUIRE(ours.sizes() == pil.sizes());
    auto diff = (ours - pil.to(torch::kFloat)).abs();
    worst = std::max(worst, diff.max().item<double>());
    mean_sum += diff.mean().item<double>();
  }
  // torchvision's PIL path resizes with Pillow in fixed point, ltrain with ATen's uint8 kernel:
  // measured here max 1 level of 255, mean 0.002 (every PNG colour type, JPEG gray, RGB,
  // progressive and a 400x300 photo; 0.13 with the float kernel before).
  INFO("max " << worst << " mean " << mean_sum / static_cast<double>(theirs.size()));
  CHECK(worst <= 1.0);
  CHECK(mean_sum / static_cast<double>(theirs.size()) <= 0.02);
}

TEST_CASE("training draws depend on (seed, epoch, example) only", "[data][image]") {
  TempDir dir;
  tool({"make-decode-set", dir / "set"});
  auto im = ltrain::data::decodeImageFile(dir / "set/rgb.png", 3);
  auto draw = [&](uint64_t seed, int64_t epoch, int64_t example) {
    ltrain::data::ExampleRng rng(seed, epoch, example);
    return ltrain::data::trainTransform(im, 16, rng);
  };
  CHECK(draw(1, 2, 3).equal(draw(1, 2, 3)));
  CHECK_FALSE(draw(1, 2, 3).equal(draw(1, 3, 3)));
  CHECK_FALSE(draw(1, 2, 3).equal(draw(1, 2, 4)));
  // torchvision's ranges: area 8%..100% of the image, aspect 3/4..4/3.
  for (int64_t e = 0; e < 200; ++e) {
    ltrain::data::ExampleRng rng(7, e, 0);
    auto box = ltrain::data::randomResizedCrop(300, 400, rng);
    const double area = static_cast<double>(box.height * box.width) / (300.0 * 400.0);
    CHECK(area >= 0.079);
    CHECK(area <= 1.0);
    CHECK(box.top + box.height <= 300);
    CHECK(box.left + box.width <= 400);
  }
}

TEST_CASE("Fashion-MNIST as PNG files trains as the same arrays in IDX do, 2 processes",
          "[data][image][dist]") {
  TempDir dir;
  tool({"fashion-folder", dir / "ff", "3000", "2000"});
  const std::vector<std::string> common{"train.epochs=3", "data.num_workers=2", "--nproc-per-node",
                                        "2"};
  auto idx = std::vector<std::string>{
      "train",        kQuickstart, "data.dataset=mnist", "data.path=" + (dir / "ff/idx"),
      "--output-dir", dir / "idx"};
  auto png = std::vector<std::string>{"train",
                                      kQuickstart,
                                      "data.dataset=image_list",
                                      "data.path=" + (dir / "ff"),
                                      "data.channels=1",
                                      "data.image_size=28",
                                      "data.resize_size=28",
                                      "data.mean=[0.1307]",
                                      "data.std=[0.3081]",
                                      "--output-dir",
                                      dir / "png"};
  idx.insert(idx.end(), common.begin(), common.end());
  png.insert(png.end(), common.begin(), common.end());
  auto a = runLtrain(idx);
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  auto b = runLtrain(png);
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  INFO("IDX " << testAccuracy(dir / "idx") << ", PNG " << testAccuracy(dir / "png"));
  CHECK(std::abs(testAccuracy(dir / "idx") - testAccuracy(dir / "png")) <= 0.005);
  CHECK(testAccuracy(dir / "png") > 0.6);  // it learnt
}

TEST_CASE("an image that does not decode stops the run with its name, loader threads or not",
          "[data][image]") {
  TempDir dir;
  tool({"fashion-folder", dir / "ff", "40", "20"});
  ltrain::test::writeText(dir / "ff/train/Bag/zz-broken.png", "not a png");
  for (const std::string workers : {"0", "2"}) {
    INFO("workers " << workers);
    auto r = runLtrain({"train", kQuickstart, "data.dataset=image_folder",
                        "data.path=" + (dir / "ff"), "data.channels=1", "data.image_size=28",
                        "data.resize_size=28", "data.mean=[0.5]", "data.std=[0.5]",
                        "data.num_workers=" + workers, "--output-dir", dir / ("run" + workers)});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("image '" + (dir / "ff/train/Bag/zz-broken.png") +
                               "' is neither a JPEG nor a PNG file"));
  }
}

TEST_CASE("data.on_bad_image skip leaves broken files out and names them in summary.json",
          "[data][image][dist]") {
  TempDir dir;
  tool({"fashion-folder", dir / "ff", "199", "98"});
  const std::vector<std::string> bad{dir / "ff/train/Bag/zz-broken.png",
                                     dir / "ff/val/Coat/zz-cut.png", dir / "ff/val/Shirt/zz.jpg"};
  ltrain::test::writeText(bad[0], "not a png");
  // A PNG cut in half: libpng's error, not only a foreign file.
  const auto first = *std::filesystem::directory_iterator(dir / "ff/val/Coat");
  const std::string png = ltrain::io::readFile(first.path().string());
  ltrain::test::writeText(bad[1], png.substr(0, png.size() / 2));
  ltrain::test::writeText(bad[2], "\xff\xd8\xff");
  auto r =
      runLtrain({"train", kQuickstart, "data.dataset=image_folder", "data.path=" + (dir / "ff"),
                 "data.channels=1", "data.image_size=28", "data.resize_size=28", "data.mean=[0.5]",
                 "data.std=[0.5]", "data.on_bad_image=skip", "data.num_workers=2", "train.epochs=2",
                 "train.log_every=1", "--nproc-per-node", "2", "--output-dir", dir / "run"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Contains("skipped: image '" + bad[0] + "'"));
  auto summary = ltrain::test::readJson(dir / "run/summary.json");
  CHECK(summary["skipped_images"].get<int>() == 3);
  auto files = summary["skipped_image_files"].get<std::vector<std::string>>();
  std::sort(files.begin(), files.end());
  auto want = bad;
  std::sort(want.begin(), want.end());
  CHECK(files == want);
  // The broken training file is drawn once an epoch (200 files on 2 ranks: no padding).
  int64_t draws = 0;
  for (const auto& rec : ltrain::test::metricRecords(dir / "run/metrics.jsonl", "train"))
    draws += rec["skipped_images"].get<int64_t>();
  CHECK(draws == 2);
  // Accuracy over the 98 validation files that decode, not the 100 there are.
  const double correct = summary["test_accuracy"].get<double>() * 98;
  CHECK(std::abs(correct - std::round(correct)) < 1e-6);
}

TEST_CASE("data.jpeg_dct_scaling decodes large JPEGs smaller and crops the same region",
          "[data][image]") {
  TempDir dir;
  tool({"make-decode-set", dir / "set"});
  const std::string jpg = dir / "set/large.jpg";
  REQUIRE(std::filesystem::exists(jpg));
  const auto full = ltrain::data::decodeImageFile(jpg, 3);
  // Evaluation at resize 64: the shorter side may go down to 64, so 1/4 of a 300-pixel side.
  const auto scaled = ltrain::data::decodeImageFile(
      jpg, 3, [&](int64_t h, int64_t w) { return ltrain::data::evalMinScale(h, w, 64); });
  CHECK(scaled.full_height == full.height);
  CHECK(scaled.full_width == full.width);
  CHECK(std::min(scaled.height, scaled.width) >= 64);
  CHECK(std::min(scaled.height, scaled.width) < std::min(full.height, full.width) / 2);
  // Both transforms see the same picture: the scaled one within a few levels on average.
  auto a = ltrain::data::evalTransform(full, 64, 56).to(torch::kFloat),
       b = ltrain::data::evalTransform(scaled, 64, 56).to(torch::kFloat);
  CHECK((a - b).abs().mean().item<double>() < 4.0);
  ltrain::data::ExampleRng r1(3, 0, 5), r2(3, 0, 5);
  auto ta = ltrain::data::trainTransform(full, 32, r1).to(torch::kFloat),
       tb = ltrain::data::trainTransform(scaled, 32, r2).to(torch::kFloat);
  CHECK((ta - tb).abs().mean().item<double>() < 6.0);
  // No scaling asked: Pillow's full-size decode.
  const auto same = ltrain::data::decodeImageFile(jpg, 3, [](int64_t, int64_t) { return 1.0; });
  CHECK(same.pixels == full.pixels);
  // A quarter's scale is Pillow's draft mode (libjpeg's same scaled IDCT): within 1 level.
  const auto quarter = ltrain::data::decodeImageFile(jpg, 3, [](int64_t, int64_t) { return 0.25; });
  const auto pillow =
      ltrain::io::loadSafetensors(dir / "set/pillow.safetensors").at("draft4:large.jpg");
  REQUIRE(pillow.sizes() == torch::IntArrayRef({quarter.height, quarter.width, 3}));
  auto ours = torch::from_blob(const_cast<uint8_t*>(quarter.pixels.data()),
                               {quarter.height, quarter.width, 3}, torch::kByte)
                  .to(torch::kInt);
  CHECK((ours - pillow.to(torch::kInt)).abs().max().item<int>() <= 1);
}

TEST_CASE(
    "data.channels 1 alone takes gray defaults for data.mean and data.std, PNG and JPEG "
    "files in modes L, RGB, RGBA and P",
    "[data][image]") {
  TempDir dir;
  tool({"mixed-mode-folder", dir / "gray"});
  const std::string cfg = dir / "gray.yaml";
  ltrain::test::writeText(cfg,
                          "name: gray\n"
                          "data:\n"
                          "  dataset: image_folder\n"
                          "  path: " +
                              (dir / "gray") +
                              "\n"
                              "  image_size: 28\n"
                              "  channels: 1\n"
                              "  batch_size: 8\n"
                              "model: {name: mlp, hidden: [32]}\n"
                              "optimizer: {name: adamw, lr: 0.01}\n"
                              "train: {epochs: 6, log_every: 1}\n");
  // `ltrain config` shows the values and where they came from; both are what a run uses.
  auto shown = runLtrain({"config", cfg, "--explain"});
  INFO(shown.err);
  REQUIRE(shown.exit_code == 0);
  CHECK_THAT(shown.out, Contains("mean: [0.459]"));
  CHECK_THAT(shown.out, Contains("std: [0.226]"));
  CHECK_THAT(shown.out, Contains("default (data.channels 1)"));
  auto run = runLtrain({"train", cfg, "--output-dir", dir / "run"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(testAccuracy(dir / "run") > 0.9);  // dark against light, whatever each file's mode
  const std::string resolved = ltrain::io::readFile(dir / "run/config.yaml");
  CHECK_THAT(resolved, Contains("mean: [0.459]"));
  // A list the user wrote is still checked, with its file and line.
  const std::string bad = dir / "bad.yaml";
  ltrain::test::writeText(bad, "base: gray.yaml\ndata:\n  mean: [0.5, 0.5, 0.5]\n");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"config", bad}, {"train", bad, "--output-dir", dir / "bad"}}) {
    auto r = runLtrain(args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(bad + ":3: data.mean has 3 values, expected one per channel "
                                     "(data.channels 1)"));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "bad"));
}
