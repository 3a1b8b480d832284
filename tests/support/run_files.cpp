#include "support/run_files.h"

#include <sstream>

#include "support/process.h"

namespace ltrain::test {

io::Json readJson(const std::string& path) {
  return io::Json::parse(readText(path));
}

double summaryValue(const std::string& run, const char* key) {
  return readJson(run + "/summary.json")[key].get<double>();
}

std::vector<io::Json> metricRecords(const std::string& path, const std::string& split) {
  std::vector<io::Json> out;
  std::istringstream in(readText(path));
  for (std::string line; std::getline(in, line);) {
    auto j = io::Json::parse(line);
    if (split.empty() || j.value("split", "") == split) out.push_back(std::move(j));
  }
  return out;
}

std::map<int, double> trainLosses(const std::string& path) {
  std::map<int, double> out;
  for (const auto& j : metricRecords(path, "train"))
    out[j["step"].get<int>()] = j["loss"].get<double>();
  return out;
}

std::vector<std::string> syntheticRun(const std::string& config, const std::string& out,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> a{"train",
                             config,
                             "data.dataset=synthetic",
                             "data.synthetic_shape=[1,6,6]",
                             "data.synthetic_train_samples=256",
                             "data.synthetic_test_samples=64",
                             "data.batch_size=32",
                             "model.hidden=[16]",
                             "train.log_every=2"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.insert(a.end(), {"--output-dir", out});
  return a;
}

}  // namespace ltrain::test
