#include "ltrain/data/image_files.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "ltrain/common/errors.h"
#include "ltrain/data/image_decode.h"
#include "ltrain/data/image_transforms.h"

namespace ltrain::data {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Extensions torchvision's ImageFolder takes that ltrain does not decode: refused, not skipped,
// so that a class never silently loses its images.
bool otherImage(const fs::path& p) {
  const std::string e = lower(p.extension().string());
  return e == ".bmp" || e == ".ppm" || e == ".pgm" || e == ".tif" || e == ".tiff" || e == ".webp";
}

}  // namespace

bool isImageFile(const std::string& path) {
  const std::string e = lower(fs::path(path).extension().string());
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

ImageFiles::ImageFiles(std::vector<std::string> paths, std::vector<int64_t> labels,
                       ImageTransform t)
    : paths_(std::move(paths)), labels_(std::move(labels)), t_(std::move(t)) {
  // (x / 255 - mean) / std as one multiply-add per batch.
  for (size_t c = 0; c < t_.mean.size(); ++c)
    scale_.push_back(1.f / (255.f * t_.std[c])), shift_.push_back(-t_.mean[c] / t_.std[c]);
}

void ImageFiles::gather(const int64_t* indices, int64_t count, torch::Tensor& inputs,
                        torch::Tensor& targets) const {
  auto* target = targets.data_ptr<int64_t>();
  const int channels = static_cast<int>(t_.channels);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t i = indices[r];
    const auto& path = paths_[static_cast<size_t>(i)];
    ExampleRng rng(t_.seed, epoch_, i);
    MinScale min_scale;
    if (t_.dct_scaling)
      min_scale =
          t_.train
              ? MinScale([&](int64_t h, int64_t w) { return trainMinScale(h, w, t_.size, rng); })
              : MinScale([&](int64_t h, int64_t w) { return evalMinScale(h, w, t_.resize); });
    torch::Tensor x;
    if (!t_.skip_bad || !knownBad(i)) try {
        const Image im = decodeImageFile(path, channels, min_scale);
        x = t_.train ? trainTransform(im, t_.size, rng) : evalTransform(im, t_.resize, t_.size);
      } catch (const UsageError& e) {
        if (!t_.skip_bad) throw;
        markBad(i, e.what());
      }
    if (!x.defined()) {  // skipped: left out of the loss and the accuracy
      ++skipped_draws_;
      inputs[r].zero_();
      target[r] = -100;
      continue;
    }
    inputs[r].copy_(x);  // uint8 to float
    target[r] = labels_[static_cast<size_t>(i)];
  }
  const auto c = static_cast<int64_t>(scale_.size());
  inputs.mul_(torch::from_blob(const_cast<float*>(scale_.data()), {1, c, 1, 1}))
      .add_(torch::from_blob(const_cast<float*>(shift_.data()), {1, c, 1, 1}));
}

bool ImageFiles::knownBad(int64_t i) const {
  std::lock_guard<std::mutex> lk(bad_mu_);
  return bad_.count(i) > 0;
}

void ImageFiles::markBad(int64_t i, const char* why) const {
  std::lock_guard<std::mutex> lk(bad_mu_);
  if (!bad_.insert(i).second) return;
  bad_files_.push_back(paths_[static_cast<size_t>(i)]);
  spdlog::warn("skipped: {} (data.on_bad_image skip)", why);
}

std::vector<std::string> ImageFiles::skippedFiles() const {
  std::lock_guard<std::mutex> lk(bad_mu_);
  return bad_files_;
}

void listImageFolder(const std::string& dir, std::vector<std::string>& paths,
                     std::vector<int64_t>& labels, std::vector<std::string>& classes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format(
        "image folder '{}' is not a directory (expected one sub-folder of images per class)", dir));
  classes.clear();
  // A folder that cannot be read partway is an error naming it: never a class that silently
  // lost its images (the iterators throw on errors after the first entry).
  try {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) classes.push_back(e.path().filename().string());
    std::sort(classes.begin(), classes.end());
    if (classes.empty())
      throw UsageError(fmt::format(
          "image folder '{}' has no class folders (expected {}/<class>/*.jpg or *.png)", dir, dir));
    for (size_t c = 0; c < classes.size(); ++c) {
      const fs::path cdir = fs::path(dir) / classes[c];
      // torchvision's order: sorted(os.walk(class folder)), each folder's files by name.
      std::vector<std::pair<std::string, std::string>> files;  // (folder, name)
      for (const auto& e : fs::recursive_directory_iterator(
               cdir, fs::directory_options::follow_directory_symlink)) {
        if (!e.is_regular_file()) continue;
        if (otherImage(e.path()))
          throw UsageError(
              fmt::format("image '{}': ltrain reads JPEG and PNG files only", e.path().string()));
        if (isImageFile(e.path().string()))
          files.emplace_back(e.path().parent_path().string(), e.path().filename().string());
      }
      if (files.empty())
        throw UsageError(fmt::format(
            "class folder '{}' holds no .jpg, .jpeg or .png files (every class needs images)",
            cdir.string()));
      std::sort(files.begin(), files.end());
      for (const auto& [folder, name] : files) {
        paths.push_back((fs::path(folder) / name).string());
        labels.push_back(static_cast<int64_t>(c));
      }
    }
  } catch (const fs::filesystem_error& e) {
    throw UsageError(fmt::format("image folder '{}' cannot be read: {}", dir, e.what()));
  }
}

void listImageManifest(const std::string& manifest, std::vector<std::string>& paths,
                       std::vector<int64_t>& labels) {
  std::ifstream in(manifest);
  if (!in)
    throw UsageError(
        fmt::format("image list '{}' cannot be read (expected a CSV of path,label)", manifest));
  const fs::path base = fs::path(manifest).parent_path();
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (n == 1 || line.empty()) continue;  // the header row
    const auto comma = line.rfind(',');
    if (comma == std::string::npos)
      throw UsageError(
          fmt::format("image list '{}' line {}: expected path,label, got '{}'", manifest, n, line));
    const std::string path = line.substr(0, comma), label = line.substr(comma + 1);
    int64_t value = -1;
    size_t used = 0;
    try {
      value = std::stoll(label, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != label.size() || value < 0)
      throw UsageError(fmt::format("image list '{}' line {}: label '{}' is not an integer from 0",
                                   manifest, n, label));
    const fs::path p = fs::path(path).is_absolute() ? fs::path(path) : base / path;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      throw UsageError(
          fmt::format("image list '{}' line {}: no file '{}'", manifest, n, p.string()));
    paths.push_back(p.string());
    labels.push_back(value);
  }
  if (paths.empty()) throw UsageError(fmt::format("image list '{}' lists no images", manifest));
}

ImageTransform imageTransform(const config::DataConfig& cfg, uint64_t seed, bool train) {
  ImageTransform t;
  t.train = train && cfg.augment == config::Augment::kResizedCropFlip;
  t.channels = cfg.channels, t.size = cfg.image_size;
  t.resize = cfg.resize_size > 0 ? cfg.resize_size : (cfg.image_size * 256 + 112) / 224;
  t.mean.assign(cfg.mean.begin(), cfg.mean.end());
  t.std.assign(cfg.std.begin(), cfg.std.end());
  t.seed = seed;
  t.dct_scaling = cfg.jpeg_dct_scaling;
  t.skip_bad = cfg.on_bad_image == config::BadImage::kSkip;
  return t;
}

Splits loadImages(const config::DataConfig& cfg, uint64_t seed) {
  const fs::path dir = cfg.path;
  std::vector<std::string> train_paths, val_paths, train_classes, val_classes;
  std::vector<int64_t> train_labels, val_labels;
  int64_t classes = 0;
  if (cfg.dataset == "image_folder") {
    listImageFolder((dir / cfg.train_dir).string(), train_paths, train_labels, train_classes);
    listImageFolder((dir / cfg.val_dir).string(), val_paths, val_labels, val_classes);
    if (val_classes != train_classes)
      throw UsageError(fmt::format(
          "image folders '{}' and '{}' have different classes ({} and {}): the labels would "
          "disagree",
          (dir / cfg.train_dir).string(), (dir / cfg.val_dir).string(), train_classes.size(),
          val_classes.size()));
    classes = static_cast<int64_t>(train_classes.size());
  } else {
    listImageManifest((dir / cfg.train_list).string(), train_paths, train_labels);
    listImageManifest((dir / cfg.val_list).string(), val_paths, val_labels);
    for (auto l : train_labels) classes = std::max(classes, l + 1);
    for (auto l : val_labels) classes = std::max(classes, l + 1);
    if (classes < 2)
      throw UsageError(
          fmt::format("image lists under '{}' hold one class (label 0) only", dir.string()));
  }
  const ImageTransform t = imageTransform(cfg, seed, false),
                       train = imageTransform(cfg, seed, true);
  Splits s;
  s.train.source =
      std::make_shared<ImageFiles>(std::move(train_paths), std::move(train_labels), train);
  s.test.source = std::make_shared<ImageFiles>(std::move(val_paths), std::move(val_labels), t);
  s.train.num_classes = s.test.num_classes = classes;
  s.class_names = train_classes;
  return s;
}

}  // namespace ltrain::data
