#include "ltrain/data/csv_table.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"

namespace ltrain::data {
namespace {

// One CSV line: commas separate, double quotes may wrap a field ("" inside is a quote). Written
// here: no CSV library is on the project's list, and this is the part of RFC 4180 tables need.
std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        out.back() += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  for (auto& cell : out) {  // "1 ,2": spaces around a field are not part of it
    const auto b = cell.find_first_not_of(" \t");
    cell = b == std::string::npos ? "" : cell.substr(b, cell.find_last_not_of(" \t") - b + 1);
  }
  return out;
}

struct Table {
  std::vector<float> features;  // row-major
  std::vector<std::string> labels;
  int64_t columns = 0;
};

// `label_optional`: a table to predict, which may leave the label column out (its labels then
// come back empty).
Table readTable(const std::string& path, const std::string& label_column,
                std::vector<std::string>* header_out, bool label_optional = false) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UsageError(
        fmt::format("data file '{}' not found (expected train.csv and test.csv in "
                    "data.path for dataset 'csv')",
                    path));
  std::istringstream in(io::readFile(path));
  std::string line;
  if (!std::getline(in, line))
    throw UsageError(fmt::format("data file '{}' is empty: expected a header row", path));
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
  const auto header = splitCsv(line);
  auto label_at = std::find(header.begin(), header.end(), label_column) - header.begin();
  const bool no_label = label_at == static_cast<long>(header.size());
  if (no_label && label_optional) {
    // The training header without its label column is what this one must be.
    auto want = *header_out;
    want.erase(std::find(want.begin(), want.end(), label_column));
    if (header != want)
      throw UsageError(fmt::format(
          "input '{}': its columns differ from the training file's (expected {} feature columns "
          "as train.csv has, with or without '{}')",
          path, want.size(), label_column));
    label_at = -1;
  } else if (no_label)
    throw UsageError(fmt::format("data file '{}': no column '{}' (data.label_column) in its header",
                                 path, label_column));
  if (header.size() < 2)
    throw UsageError(
        fmt::format("data file '{}': expected feature columns besides '{}'", path, label_column));
  if (label_at >= 0 && header_out && !header_out->empty() && *header_out != header)
    throw UsageError(fmt::format("data file '{}': its columns differ from train.csv's", path));
  if (header_out && label_at >= 0) *header_out = header;
  Table t;
  t.columns = static_cast<int64_t>(header.size()) - (label_at >= 0 ? 1 : 0);
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.empty() || line == "\r") continue;
    const auto cells = splitCsv(line);
    if (cells.size() != header.size())
      throw UsageError(fmt::format("{}:{}: {} fields, expected {} as in the header", path, n,
                                   cells.size(), header.size()));
    for (size_t c = 0; c < cells.size(); ++c) {
      if (static_cast<long>(c) == label_at) {
        t.labels.push_back(cells[c]);
        continue;
      }
      char* end = nullptr;
      const float v = std::strtof(cells[c].c_str(), &end);
      if (cells[c].empty() || *end != '\0' || !std::isfinite(v))
        throw UsageError(fmt::format("{}:{}: column '{}' holds '{}', expected a number", path, n,
                                     header[c], cells[c]));
      t.features.push_back(v);
    }
    if (label_at < 0) t.labels.emplace_back();
  }
  if (t.labels.empty()) throw UsageError(fmt::format("data file '{}' has no rows", path));
  return t;
}

struct Standardisation {
  torch::Tensor mean, sd;
};

// The training file's per-column statistics (a constant column is centred and left unscaled:
// divided by 1, not by a vanishing deviation).
Standardisation standardisation(Table& train) {
  auto tr = torch::from_blob(train.features.data(),
                             {static_cast<int64_t>(train.labels.size()), train.columns})
                .clone();
  auto sd = tr.std(0, /*unbiased=*/false);
  return {tr.mean(0), torch::where(sd < 1e-6, torch::ones_like(sd), sd)};
}

}  // namespace

torch::Tensor readCsvInputs(const std::string& dir, const std::string& label_column,
                            const std::string& path, std::vector<std::string>& labels) {
  std::vector<std::string> header;
  Table train = readTable(dir + "/train.csv", label_column, &header);
  Table t = readTable(path, label_column, &header, /*label_optional=*/true);
  const auto z = standardisation(train);
  labels = t.labels;
  const auto n = static_cast<int64_t>(t.labels.size());
  return (torch::from_blob(t.features.data(), {n, t.columns}).clone() - z.mean) / z.sd;
}

Splits loadCsv(const std::string& dir, const std::string& label_column) {
  std::vector<std::string> header;
  Table train = readTable(dir + "/train.csv", label_column, &header);
  Table test = readTable(dir + "/test.csv", label_column, &header);
  std::map<std::string, int64_t> classes;
  for (const auto& l : train.labels) classes.emplace(l, 0);
  int64_t k = 0;
  for (auto& [label, id] : classes) id = k++;
  if (k < 2)
    throw UsageError(fmt::format(
        "data file '{}/train.csv': its column '{}' (data.label_column) holds one class, expected "
        "at least 2",
        dir, label_column));
  // Standardised with the training file's statistics.
  const int64_t f = train.columns;
  const auto z = standardisation(train);
  const auto &mean = z.mean, &sd = z.sd;
  Splits s;
  for (const auto& [label, id] : classes) s.class_names.push_back(label);
  for (auto [t, d, name] :
       {std::tuple{&train, &s.train, "train.csv"}, std::tuple{&test, &s.test, "test.csv"}}) {
    const auto n = static_cast<int64_t>(t->labels.size());
    d->inputs = (torch::from_blob(t->features.data(), {n, f}).clone() - mean) / sd;
    d->targets = torch::empty({n}, torch::kLong);
    for (int64_t i = 0; i < n; ++i) {
      auto it = classes.find(t->labels[static_cast<size_t>(i)]);
      if (it == classes.end())
        throw UsageError(
            fmt::format("data file '{}/{}': row {} has label '{}', which train.csv "
                        "never has",
                        dir, name, i + 1, t->labels[static_cast<size_t>(i)]));
      d->targets[i] = it->second;
    }
    d->num_classes = k;
  }
  return s;
}

}  // namespace ltrain::data
