#include "ltrain/train/loss_tally.h"

#include <torch/torch.h>

#include <cmath>

namespace ltrain::train {

LossTally::LossTally(torch::Device device) : device_(device) {
  window_sum_ = zeros(), window_count_ = zeros(), epoch_sum_ = zeros(), epoch_count_ = zeros();
  skipped_ = zeros(), first_skipped_ = zeros().fill_(-1);
}

StateDict LossTally::state() const {
  const Totals t = read();
  return {{"skipped_steps", stateScalar(t.skipped)},
          {"epoch_loss_sum", stateScalar(t.epoch_sum)},
          {"epoch_loss_count", stateScalar(t.epoch_count)}};
}

void LossTally::check(const StateDict& s) const {
  stateInt(s, "skipped_steps", 0), stateDouble(s, "epoch_loss_sum", 0);  // one number each
  stateInt(s, "epoch_loss_count", 0);
}

void LossTally::load(const StateDict& s) {
  skipped_.fill_(static_cast<double>(stateInt(s, "skipped_steps", 0)));
  epoch_sum_.fill_(stateDouble(s, "epoch_loss_sum", 0));
  epoch_count_.fill_(static_cast<double>(stateInt(s, "epoch_loss_count", 0)));
}

torch::Tensor LossTally::zeros() const {
  return torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
}

void LossTally::add(const torch::Tensor& loss, const torch::Tensor& found_inf, bool skipped,
                    int64_t step) {
  torch::NoGradGuard no_grad;
  const auto l = loss.detach().to(device_, torch::kDouble).reshape({});
  if (!found_inf.defined()) {  // known on the host
    if (skipped) {
      skipped_ += 1;
      first_skipped_.masked_fill_(first_skipped_ < 0, static_cast<double>(step));
      return;
    }
    window_sum_ += l, window_count_ += 1, epoch_sum_ += l, epoch_count_ += 1;
    return;
  }
  const auto bad = found_inf.to(device_, torch::kDouble).reshape({}) > 0;
  const auto ok = (~bad).to(torch::kDouble);
  const auto kept = torch::where(bad, torch::zeros_like(l), l);  // a nan loss must not leak in
  window_sum_ += kept, window_count_ += ok, epoch_sum_ += kept, epoch_count_ += ok;
  skipped_ += bad.to(torch::kDouble);
  first_skipped_.masked_fill_(bad & (first_skipped_ < 0), static_cast<double>(step));
}

void LossTally::startEpoch() {
  epoch_sum_.zero_(), epoch_count_.zero_();
}

double LossTally::takeWindowMean() {
  const double sum = window_sum_.item<double>(), n = window_count_.item<double>();
  window_sum_.zero_(), window_count_.zero_();
  return n > 0 ? sum / n : std::nan("");
}

LossTally::Totals LossTally::read() const {
  return {epoch_sum_.item<double>(), static_cast<int64_t>(epoch_count_.item<double>()),
          static_cast<int64_t>(skipped_.item<double>())};
}

int64_t LossTally::firstSkippedStep() const {
  return static_cast<int64_t>(first_skipped_.item<double>());
}

}  // namespace ltrain::train
