#include "support/results.h"

#include <torch/torch.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "ltrain/io/safetensors.h"

namespace ltrain::test {

std::map<int, std::map<std::string, std::string>> workerResults(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> r;
  static const std::regex line(R"(\[rank (\d+)\] result (.*))");
  std::istringstream in(out);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    std::istringstream kv(m[2].str());
    std::string item;
    while (kv >> item) {
      auto eq = item.find('=');
      if (eq != std::string::npos) r[std::stoi(m[1])][item.substr(0, eq)] = item.substr(eq + 1);
    }
  }
  return r;
}

double maxWeightDiff(const std::string& a, const std::string& b) {
  auto x = io::loadSafetensors(a), y = io::loadSafetensors(b);
  if (x.size() != y.size()) throw std::runtime_error(a + " and " + b + " hold other tensors");
  double d = 0;
  for (auto& [k, t] : x) d = std::max(d, (t - y.at(k)).abs().max().item<double>());
  return d;
}

}  // namespace ltrain::test
