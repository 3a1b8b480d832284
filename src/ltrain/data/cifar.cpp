#include "ltrain/data/cifar.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"

namespace ltrain::data {
namespace {

constexpr int64_t kPixels = 3 * 32 * 32;

Dataset readFiles(const std::vector<std::string>& files, int classes) {
  const int64_t label_bytes = classes == 100 ? 2 : 1, record = label_bytes + kPixels;
  std::vector<std::string> contents;
  int64_t n = 0;
  for (const auto& f : files) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec))
      throw UsageError(
          fmt::format("data file '{}' not found (expected the CIFAR-{} binary "
                      "version in data.path)",
                      f, classes));
    contents.push_back(io::readFile(f));
    const auto size = static_cast<int64_t>(contents.back().size());
    if (size == 0 || size % record != 0)
      throw UsageError(fmt::format(
          "data file '{}' is truncated or not CIFAR-{}: {} bytes is not a whole number of "
          "{}-byte records",
          f, classes, size, record));
    n += size / record;
  }
  Dataset d;
  d.inputs = torch::empty({n, 3, 32, 32}, torch::kUInt8);
  d.targets = torch::empty({n}, torch::kLong);
  auto* px = d.inputs.data_ptr<uint8_t>();
  auto* lab = d.targets.data_ptr<int64_t>();
  int64_t i = 0;
  for (size_t fi = 0; fi < contents.size(); ++fi) {
    const auto* p = reinterpret_cast<const uint8_t*>(contents[fi].data());
    const int64_t records = static_cast<int64_t>(contents[fi].size()) / record;
    for (int64_t r = 0; r < records; ++r, ++i, p += record) {
      const int label = p[label_bytes - 1];  // CIFAR-100: the fine label follows the coarse one
      if (label >= classes)
        throw UsageError(fmt::format("data file '{}': record {} has label {}, expected 0..{}",
                                     files[fi], r, label, classes - 1));
      lab[i] = label;
      std::memcpy(px + i * kPixels, p + label_bytes, kPixels);
    }
  }
  d.num_classes = classes;
  return d;
}

}  // namespace

Splits loadCifar(const std::string& dir, int classes) {
  std::vector<std::string> train, test;
  if (classes == 10) {
    for (int b = 1; b <= 5; ++b) train.push_back(fmt::format("{}/data_batch_{}.bin", dir, b));
    test.push_back(dir + "/test_batch.bin");
  } else {
    train.push_back(dir + "/train.bin");
    test.push_back(dir + "/test.bin");
  }
  Splits s;
  s.train = readFiles(train, classes);
  s.test = readFiles(test, classes);
  // Per-channel statistics of each training set, as the common PyTorch recipes use.
  const std::vector<float> mean = classes == 10 ? std::vector<float>{0.4914f, 0.4822f, 0.4465f}
                                                : std::vector<float>{0.5071f, 0.4865f, 0.4409f};
  const std::vector<float> std = classes == 10 ? std::vector<float>{0.2470f, 0.2435f, 0.2616f}
                                               : std::vector<float>{0.2673f, 0.2564f, 0.2762f};
  for (Dataset* d : {&s.train, &s.test}) d->channel_mean = mean, d->channel_std = std;
  return s;
}

}  // namespace ltrain::data
