#include "support/reference_run.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

namespace ltrain::test {
namespace {

void mustRun(const std::vector<std::string>& argv) {
  auto r = runProcess(argv, {{"OMP_NUM_THREADS", "1"}});
  if (r.exit_code == 0) return;
  std::ostringstream m;
  for (const auto& a : argv) m << a << ' ';
  m << "exited " << r.exit_code << ":\n" << r.out << r.err;
  throw std::runtime_error(m.str());
}

}  // namespace

double SideBySide::worstRelative() const {
  double worst = 0;
  for (const auto& [step, loss] : reference) {
    auto it = ltrain.find(step);
    if (it == ltrain.end()) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(loss - it->second) / std::abs(loss));
  }
  return worst;
}

std::string SideBySide::describe() const {
  std::ostringstream m;
  m << "worst relative loss difference " << worstRelative();
  for (int step : {reference.empty() ? 0 : reference.begin()->first,
                   reference.empty() ? 0 : reference.rbegin()->first})
    if (reference.count(step) && ltrain.count(step))
      m << "; step " << step << ": " << reference.at(step) << " vs " << ltrain.at(step);
  return m.str();
}

SideBySide trainBesideReference(const std::string& config, const std::string& init_weights,
                                int processes, const std::string& reference_out,
                                const std::string& ltrain_out,
                                const std::vector<std::string>& ltrain_overrides) {
  const std::string n = std::to_string(processes);
  std::vector<std::string> py =
      processes == 1
          ? std::vector<std::string>{LTRAIN_PYTHON}
          : std::vector<std::string>{LTRAIN_TORCHRUN, "--standalone", "--nproc-per-node", n};
  for (const std::string& a :
       {std::string(LTRAIN_SOURCE_DIR) + "/bench/reference/train_ref.py", config,
        std::string("--ltrain"), std::string(LTRAIN_BINARY), std::string("--init"), init_weights,
        std::string("--out"), reference_out})
    py.push_back(a);
  mustRun(py);
  std::vector<std::string> lt{LTRAIN_BINARY,  "train",   config, "--nproc-per-node", n,
                              "--output-dir", ltrain_out};
  lt.insert(lt.end(), ltrain_overrides.begin(), ltrain_overrides.end());
  mustRun(lt);
  return {trainLosses(reference_out + "/metrics.jsonl"),
          trainLosses(ltrain_out + "/metrics.jsonl")};
}

}  // namespace ltrain::test
