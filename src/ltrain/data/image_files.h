// Image files as they sit on disk, decoded and transformed by the loader's threads:
//   image_folder  DIR/<train_dir>/<class>/*.{jpg,jpeg,png} and DIR/<val_dir>/<class>/...; the
//                 classes are the sub-folders sorted by name, their indices the labels, and the
//                 files of a class sorted by path: torchvision.datasets.ImageFolder's rule.
//   image_list    CSV manifests (DIR/<train_list>, DIR/<val_list>) of path,label rows (a header
//                 row first; paths relative to the manifest, labels integers from 0).
// Training examples get the random resized crop and flip, evaluation examples the resize and
// centre crop (data/image_transforms.h), then (x / 255 - mean) / std per channel.
#pragma once
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ltrain/data/dataset.h"

namespace ltrain::data {

struct ImageTransform {
  bool train = false;  // random resized crop + flip (else resize + centre crop)
  int64_t channels = 3, size = 224, resize = 256;
  std::vector<float> mean, std;
  uint64_t seed = 0;
  bool dct_scaling = false;  // data.jpeg_dct_scaling
  bool skip_bad = false;     // data.on_bad_image skip
};

class ImageFiles final : public ExampleSource {
 public:
  ImageFiles(std::vector<std::string> paths, std::vector<int64_t> labels, ImageTransform t);
  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  std::vector<int64_t> exampleShape() const override { return {t_.channels, t_.size, t_.size}; }
  torch::ScalarType inputType() const override { return torch::kFloat; }
  std::vector<int64_t> targetShape() const override { return {}; }
  // A file that does not decode throws (UsageError naming it), or under skip_bad becomes a zero
  // image with target -100, which the loss and the accuracy leave out (PyTorch's ignore_index).
  void gather(const int64_t* indices, int64_t count, torch::Tensor& inputs,
              torch::Tensor& targets) const override;
  int64_t skippedDraws() const override { return skipped_draws_.load(); }
  std::vector<std::string> skippedFiles() const override;
  void shift(int64_t) override {}
  void setEpoch(int64_t epoch) override { epoch_ = epoch; }
  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<int64_t>& labels() const { return labels_; }

 private:
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  bool knownBad(int64_t i) const;
  void markBad(int64_t i, const char* why) const;

  ImageTransform t_;
  std::vector<float> scale_, shift_;  // per channel: the normalisation as x * scale + shift
  int64_t epoch_ = 0;
  // Files found bad, kept so that later epochs do not decode them again (loader threads share
  // them).
  mutable std::mutex bad_mu_;
  mutable std::set<int64_t> bad_;               // examples
  mutable std::vector<std::string> bad_files_;  // their files, in the order found
  mutable std::atomic<int64_t> skipped_draws_{0};
};

// The files and labels of one split (UsageError naming the folder or manifest when it is
// missing, empty, or holds what ltrain cannot read). `classes` receives the class names.
void listImageFolder(const std::string& dir, std::vector<std::string>& paths,
                     std::vector<int64_t>& labels, std::vector<std::string>& classes);
void listImageManifest(const std::string& manifest, std::vector<std::string>& paths,
                       std::vector<int64_t>& labels);

// What the config's data keys say about the training (`train`) or evaluation transform.
ImageTransform imageTransform(const config::DataConfig& cfg, uint64_t seed, bool train);
// Whether ltrain decodes the file by its extension (.jpg, .jpeg, .png, any case).
bool isImageFile(const std::string& path);

Splits loadImages(const config::DataConfig& cfg, uint64_t seed);

}  // namespace ltrain::data
