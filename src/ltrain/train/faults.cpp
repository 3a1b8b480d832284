#include "ltrain/train/faults.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace ltrain::train {

Faults::Faults(const distributed::Runtime& rt) : my_rank_(rt.rank), armed_(rt.restart_count == 0) {
  const char* names[kKinds] = {"KILL", "NAN",       "SIGNAL", "HANG",
                               "STOP", "NAN_INPUT", "SAVE",   "DRIFT"};
  for (int k = 0; k < kKinds; ++k) {
    step_[k] = -1, rank_[k] = 0;
    const char* spec = std::getenv(fmt::format("LTRAIN_FAULT_{}_AT_STEP", names[k]).c_str());
    if (!spec) continue;
    step_[k] = std::atoll(spec);
    if (const char* colon = std::strchr(spec, ':')) rank_[k] = std::atoll(colon + 1);
  }
  if (const char* dir = std::getenv("LTRAIN_TRACE_INDICES"))
    trace_path_ = fmt::format("{}/rank{}.txt", dir, rt.rank);
}

void Faults::traceEpoch(int64_t epoch, const std::vector<int64_t>& indices) {
  if (trace_path_.empty()) return;
  trace_indices_ = indices, trace_next_ = 0, trace_epoch_ = epoch;
}

void Faults::traceStep(int64_t examples) {
  if (trace_path_.empty()) return;
  std::ofstream out(trace_path_, std::ios::app);
  out << trace_epoch_;
  for (int64_t i = 0; i < examples && trace_next_ < trace_indices_.size(); ++i)
    out << ' ' << trace_indices_[trace_next_++];
  out << '\n';
}

void Faults::drift(int64_t step, torch::nn::Module& model) const {
  if (!at(kDrift, step)) return;
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters())
    if (p.numel() > 0) p.view(-1).narrow(0, 0, 1).add_(1e-3);
}

bool Faults::at(Kind k, int64_t step) const {
  return armed_ && step_[k] == step && rank_[k] == my_rank_;
}

void Faults::beforeForward(int64_t step, torch::Tensor& inputs) const {
  if (at(kNanInput, step)) inputs = inputs * std::nan("");
}

void Faults::duringStep(int64_t step, torch::Tensor& loss) const {
  if (at(kNan, step)) loss = loss * std::nan("");
  if (at(kStop, step)) std::raise(SIGSTOP);
  if (at(kHang, step))
    for (volatile bool spin = true; spin;) {
    }
}

void Faults::afterStep(int64_t step) const {
  if (at(kKill, step)) std::raise(SIGKILL);
  if (at(kSignal, step)) std::raise(SIGTERM);
}

}  // namespace ltrain::train
