#include "ltrain/data/dataset.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/data/chat_examples.h"
#include "ltrain/data/cifar.h"
#include "ltrain/data/csv_table.h"
#include "ltrain/data/idx.h"
#include "ltrain/data/image_files.h"
#include "ltrain/data/text.h"
#include "ltrain/data/token_shards.h"

namespace ltrain::data {
namespace {

// Debian's dataset-fashion-mnist; LTRAIN_FASHION_MNIST_DIR names another copy (a machine where
// the package is unpacked elsewhere, as scripts/gpu_check.sh does on the GPU machine).
std::string fashionMnistDir() {
  const char* env = std::getenv("LTRAIN_FASHION_MNIST_DIR");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

// Prefer the gzip file Debian ships; accept an unpacked one too.
std::string findIdx(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + stem + ext;
    if (std::filesystem::exists(p)) return p;
  }
  throw UsageError(fmt::format(
      "data file '{}/{}.gz' not found (expected the IDX files of the dataset "
      "in data.path{})",
      dir, stem, dir == fashionMnistDir() ? "; install Debian's dataset-fashion-mnist" : ""));
}

Dataset synthetic(const config::DataConfig& cfg, int64_t n, uint64_t seed) {
  // Class prototypes plus noise: learnable, but not in one step, and identical for a given seed.
  auto gen = at::detail::createCPUGenerator(seed);
  const auto& s = cfg.synthetic_shape;
  auto protos = torch::randn({cfg.synthetic_classes, s[0], s[1], s[2]}, gen);
  Dataset d;
  d.targets = torch::randint(cfg.synthetic_classes, {n}, gen, torch::kLong);
  d.inputs = protos.index_select(0, d.targets) + 1.5 * torch::randn({n, s[0], s[1], s[2]}, gen);
  d.num_classes = cfg.synthetic_classes;
  return d;
}

}  // namespace

std::string resolvedDataPath(const config::DataConfig& cfg) {
  if (!cfg.path.empty() || cfg.dataset != "fashion_mnist") return cfg.path;
  return fashionMnistDir();
}

Dataset loadIdxPair(const std::string& images, const std::string& labels, int64_t num_classes) {
  IdxArray img = readIdx(images), lab = readIdx(labels);
  if (img.dims.size() != 3)
    throw UsageError(
        fmt::format("data file '{}': expected images of 3 dimensions [N, H, W], got {}", images,
                    img.dims.size()));
  if (lab.dims.size() != 1)
    throw UsageError(fmt::format("data file '{}': expected labels of 1 dimension [N], got {}",
                                 labels, lab.dims.size()));
  if (img.dims[0] != lab.dims[0])
    throw UsageError(fmt::format("data files '{}' and '{}' disagree: {} images but {} labels",
                                 images, labels, img.dims[0], lab.dims[0]));
  for (size_t i = 0; i < lab.bytes.size(); ++i)
    if (lab.bytes[i] >= num_classes)
      throw UsageError(fmt::format("data file '{}': label {} at index {} is outside 0..{}", labels,
                                   lab.bytes[i], i, num_classes - 1));
  Dataset d;
  const int64_t n = img.dims[0], h = img.dims[1], w = img.dims[2];
  d.inputs = torch::from_blob(img.bytes.data(), {n, 1, h, w}, torch::kUInt8).clone();
  d.targets = torch::from_blob(lab.bytes.data(), {n}, torch::kUInt8).to(torch::kLong);
  d.num_classes = num_classes;
  return d;
}

Splits loadDataset(const config::DataConfig& cfg, uint64_t seed, int64_t block_size,
                   int64_t vocab_size) {
  Splits s;
  if (cfg.dataset == "text")
    return loadText(cfg.path, cfg.tokenizer, cfg.val_fraction, block_size, vocab_size);
  if (cfg.dataset == "tokens") return loadTokens(cfg, block_size, vocab_size);
  if (cfg.dataset == "chat" || cfg.dataset == "preference")
    return loadChat(cfg, block_size, vocab_size);
  if (cfg.dataset == "image_folder" || cfg.dataset == "image_list") return loadImages(cfg, seed);
  if (cfg.dataset == "synthetic") {
    // Train and test share the prototypes (same seed) but draw different examples.
    Dataset all = synthetic(cfg, cfg.synthetic_train_samples + cfg.synthetic_test_samples, seed);
    s.train = all;
    s.test = all;
    s.train.inputs = all.inputs.narrow(0, 0, cfg.synthetic_train_samples).clone();
    s.train.targets = all.targets.narrow(0, 0, cfg.synthetic_train_samples).clone();
    s.test.inputs =
        all.inputs.narrow(0, cfg.synthetic_train_samples, cfg.synthetic_test_samples).clone();
    s.test.targets =
        all.targets.narrow(0, cfg.synthetic_train_samples, cfg.synthetic_test_samples).clone();
    return s;
  }
  const std::string dir = resolvedDataPath(cfg);
  std::error_code ec;
  if (cfg.dataset == "cifar10" || cfg.dataset == "cifar100" || cfg.dataset == "csv") {
    if (dir.empty() || !std::filesystem::is_directory(dir, ec))
      throw UsageError(
          fmt::format("data.path '{}' is not a directory (dataset '{}' needs the "
                      "directory of its files)",
                      dir, cfg.dataset));
    if (cfg.dataset == "csv") return loadCsv(dir, cfg.label_column);
    return loadCifar(dir, cfg.dataset == "cifar10" ? 10 : 100);
  }
  if (!std::filesystem::is_directory(dir, ec))
    throw UsageError(
        fmt::format("data.path '{}' is not a directory{}", dir,
                    dir == fashionMnistDir() ? " (install Debian's dataset-fashion-mnist)" : ""));
  // Looked up one by one, in a fixed order, so a missing file is always reported the same way.
  for (auto [split, prefix] : {std::pair{&s.train, "train"}, std::pair{&s.test, "t10k"}}) {
    const std::string images = findIdx(dir, std::string(prefix) + "-images-idx3-ubyte");
    const std::string labels = findIdx(dir, std::string(prefix) + "-labels-idx1-ubyte");
    *split = loadIdxPair(images, labels, 10);
  }
  // Per-dataset normalisation constants, as in the common PyTorch recipes.
  const bool fashion = cfg.dataset == "fashion_mnist";
  for (Dataset* d : {&s.train, &s.test}) {
    d->mean = fashion ? 0.2860f : 0.1307f;
    d->std = fashion ? 0.3530f : 0.3081f;
  }
  return s;
}

}  // namespace ltrain::data
