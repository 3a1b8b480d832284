#include "ltrain/inference/predict.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>

#include "ltrain/common/errors.h"
#include "ltrain/compute/precision.h"
#include "ltrain/data/csv_table.h"
#include "ltrain/data/image_files.h"
#include "ltrain/data/loader.h"
#include "ltrain/inference/trained_model.h"
#include "ltrain/io/files.h"

namespace ltrain::inference {
namespace fs = std::filesystem;
using compute::AutocastScope;
namespace {

// What is predicted: the examples (image files, or table rows already standardised) and what is
// known of their classes.
struct Inputs {
  data::Dataset examples;
  std::vector<std::string> names;  // the CSV's input column: a path, or a table's row number
  std::vector<int64_t> labels;     // the known class, -1 where none is known
};

// RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

int64_t classIndex(const std::vector<std::string>& classes, const std::string& name) {
  const auto it = std::find(classes.begin(), classes.end(), name);
  return it == classes.end() ? -1 : it - classes.begin();
}

// Image inputs: a class-folder tree (labels by folder name, matched to the training classes), a
// folder of images, a manifest, or one image.
Inputs imageInputs(const config::DataConfig& cfg, uint64_t seed,
                   const std::vector<std::string>& classes, const std::string& input) {
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  std::error_code ec;
  if (fs::is_directory(input, ec)) {
    bool has_folders = false, has_images = false;
    for (const auto& e : fs::directory_iterator(input, ec)) {
      has_folders = has_folders || e.is_directory();
      has_images = has_images || (e.is_regular_file() && data::isImageFile(e.path().string()));
    }
    if (has_folders && !has_images) {
      std::vector<std::string> folder_classes;
      data::listImageFolder(input, paths, labels, folder_classes);
      for (auto& l : labels)  // this tree's class order to the model's
        l = classIndex(classes, folder_classes[static_cast<size_t>(l)]);
    } else {
      for (const auto& e : fs::directory_iterator(input))
        if (e.is_regular_file() && data::isImageFile(e.path().string()))
          paths.push_back(e.path().string());
      if (paths.empty())
        throw UsageError(fmt::format(
            "--input '{}' holds no .jpg, .jpeg or .png files and no class folders", input));
      std::sort(paths.begin(), paths.end());
      labels.assign(paths.size(), -1);
    }
  } else if (fs::is_regular_file(input, ec) && data::isImageFile(input)) {
    paths = {input};
    labels = {-1};
  } else if (fs::is_regular_file(input, ec)) {
    data::listImageManifest(input, paths, labels);  // UsageError when it is no manifest
    for (auto& l : labels)
      if (l >= static_cast<int64_t>(classes.size())) l = -1;
  } else {
    throw UsageError(fmt::format(
        "--input '{}' not found (expected an image, a folder of images or class folders, or a "
        "path,label manifest)",
        input));
  }
  Inputs in;
  in.names = paths;
  in.labels = labels;
  // Targets carry the row number, so that a file skipped under data.on_bad_image (target -100)
  // is told apart from the rest.
  std::vector<int64_t> rows(paths.size());
  std::iota(rows.begin(), rows.end(), 0);
  in.examples.source = std::make_shared<data::ImageFiles>(std::move(paths), std::move(rows),
                                                          data::imageTransform(cfg, seed, false));
  return in;
}

Inputs tableInputs(const config::DataConfig& cfg, const std::vector<std::string>& classes,
                   const std::string& input) {
  std::vector<std::string> labels;
  Inputs in;
  in.examples.inputs =
      data::readCsvInputs(data::resolvedDataPath(cfg), cfg.label_column, input, labels);
  const auto n = static_cast<int64_t>(labels.size());
  in.examples.targets = torch::arange(n, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    in.names.push_back(std::to_string(i + 1));  // the data row, as the table's line n + 1
    in.labels.push_back(labels[static_cast<size_t>(i)].empty()
                            ? -1
                            : classIndex(classes, labels[static_cast<size_t>(i)]));
  }
  return in;
}

}  // namespace

PredictSummary runPredict(const PredictRequest& req) {
  auto lc = config::loadConfig(req.config, req.overrides);
  const auto& cfg = lc.cfg;
  const bool images = cfg.data.dataset == "image_folder" || cfg.data.dataset == "image_list";
  if (!images && cfg.data.dataset != "csv")
    throw UsageError(fmt::format(
        "ltrain predict reads image files (data.dataset image_folder, image_list) and tables "
        "(csv); data.dataset {} is not one of them",
        cfg.data.dataset));
  if (req.top_k < 1) throw UsageError(fmt::format("--top-k is {}, expected 1 or more", req.top_k));
  std::error_code ec;
  if (fs::exists(req.output, ec) && !req.overwrite)
    throw UsageError(fmt::format(
        "--output '{}' exists; remove it, name another file, or pass --overwrite", req.output));
  if (fs::exists(req.input, ec) && fs::exists(req.output, ec) &&
      fs::equivalent(req.input, req.output, ec))
    throw UsageError(fmt::format("--output '{}' is the input", req.output));

  auto t = loadTrainedClassifier(lc, req.checkpoint);
  const int64_t k_classes = t.splits.train.num_classes;
  std::vector<std::string> classes = t.splits.class_names;
  for (auto c = static_cast<int64_t>(classes.size()); c < k_classes; ++c)
    classes.push_back(std::to_string(c));  // image_list: the labels are the names
  const int64_t k = std::min(req.top_k, k_classes);
  Inputs in = images ? imageInputs(cfg.data, static_cast<uint64_t>(cfg.seed), classes, req.input)
                     : tableInputs(cfg.data, classes, req.input);

  std::ostringstream csv;
  csv << "input,label,prediction,probability";
  for (int64_t j = 2; j <= k; ++j) csv << ",top" << j << ",probability" << j;
  csv << "\n";
  PredictSummary sum;
  const int64_t n = in.examples.size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  data::Loader loader(in.examples, std::move(order), cfg.data.eval_batch_size, false,
                      cfg.data.num_workers, cfg.data.prefetch);
  torch::NoGradGuard no_grad;
  data::Batch b;
  int64_t row = 0;
  while (loader.next(b)) {
    AutocastScope autocast(cfg.train.precision, t.devices.main.type());
    auto logits =
        compute::forward(t.model, b.inputs.to(t.devices.main), t.devices).to(torch::kFloat);
    auto [p, idx] = torch::softmax(logits, -1).topk(k, -1);
    p = p.cpu(), idx = idx.cpu();
    const auto pa = p.accessor<float, 2>();
    const auto ia = idx.accessor<int64_t, 2>();
    const auto* rows = b.targets.data_ptr<int64_t>();
    for (int64_t r = 0; r < b.targets.size(0); ++r, ++row) {
      const auto label = in.labels[static_cast<size_t>(row)];
      csv << csvField(in.names[static_cast<size_t>(row)]) << ","
          << (label >= 0 ? csvField(classes[static_cast<size_t>(label)]) : "");
      if (rows[r] < 0) {  // a file that does not decode, under data.on_bad_image skip
        ++sum.skipped;
        csv << ",," << std::string(static_cast<size_t>(2 * (k - 1)), ',') << "\n";
        continue;
      }
      for (int64_t j = 0; j < k; ++j)
        csv << "," << csvField(classes[static_cast<size_t>(ia[r][j])]) << ","
            << fmt::format("{:.6g}", pa[r][j]);
      csv << "\n";
      if (label >= 0) ++sum.labelled, sum.correct += ia[r][0] == label;
    }
  }
  sum.rows = row;
  io::writeFileAtomic(req.output, csv.str());
  return sum;
}

}  // namespace ltrain::inference
