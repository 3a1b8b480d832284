#include "ltrain/train/dpo.h"

#include <torch/torch.h>

#include "ltrain/data/chat_examples.h"

namespace ltrain::train {
namespace {

namespace F = torch::nn::functional;

// The reference's parameter values in place for one forward: each parameter's data and its kept
// starting value trade places (set_data: no copy), and trade back on leaving, however it leaves.
class SwappedIn {
 public:
  SwappedIn(std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& kept)
      : params_(params), kept_(kept) {
    swap();
  }
  ~SwappedIn() { swap(); }
  SwappedIn(const SwappedIn&) = delete;
  SwappedIn& operator=(const SwappedIn&) = delete;

 private:
  void swap() {
    for (size_t i = 0; i < params_.size(); ++i) {
      auto current = params_[i].data();
      params_[i].set_data(kept_[i]);
      kept_[i] = current;
    }
  }
  std::vector<torch::Tensor>& params_;
  std::vector<torch::Tensor>& kept_;
};

// [B, 2, T] -> [2B, T]: the chosen sequences, then the rejected ones (TRL's batch order).
torch::Tensor sequences(const torch::Tensor& pairs) {
  return pairs.transpose(0, 1).reshape({-1, pairs.size(2)});
}

}  // namespace

torch::Tensor sequenceLogProbs(const torch::Tensor& logits, const torch::Tensor& targets) {
  // Cross-entropy with ignore_index -100 is minus the learned tokens' log-probabilities, zero
  // elsewhere.
  const auto nll = F::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
      F::CrossEntropyFuncOptions().reduction(torch::kNone).ignore_index(data::kIgnoredTarget));
  return -nll.view(targets.sizes()).sum(1);
}

DpoTerms dpoLoss(const torch::Tensor& chosen, const torch::Tensor& rejected,
                 const torch::Tensor& ref_chosen, const torch::Tensor& ref_rejected, double beta) {
  const auto chosen_ratio = chosen - ref_chosen, rejected_ratio = rejected - ref_rejected;
  DpoTerms t;
  t.loss = -F::logsigmoid(beta * (chosen_ratio - rejected_ratio)).mean();
  const auto rc = beta * chosen_ratio.detach(), rr = beta * rejected_ratio.detach();
  t.stats = torch::stack({rc.sum(), rr.sum(), rc.gt(rr).to(rc.scalar_type()).sum(),
                          torch::full({}, static_cast<double>(rc.numel()), rc.options())});
  return t;
}

std::vector<std::pair<std::string, double>> dpoMetrics(const std::vector<double>& s) {
  const double n = s.at(3) > 0 ? s[3] : 1.0;
  return {{"rewards/chosen", s[0] / n},
          {"rewards/rejected", s[1] / n},
          {"rewards/accuracies", s[2] / n},
          {"rewards/margins", (s[0] - s[1]) / n}};
}

Dpo::Dpo(double beta, models::Classifier model) : beta_(beta), model_(std::move(model)) {
  torch::NoGradGuard no_grad;
  for (const auto& p : model_->named_parameters())
    if (p.value().requires_grad()) {
      names_.push_back(p.key());
      start_.push_back(p.value().detach().clone());
    }
  place();
}

void Dpo::place() {
  torch::NoGradGuard no_grad;
  const auto named = model_->named_parameters();
  params_.clear();
  for (size_t i = 0; i < names_.size(); ++i) {
    params_.push_back(named[names_[i]]);
    start_[i] = start_[i].to(params_[i].options());
  }
}

torch::Tensor Dpo::referenceLogProbs(const torch::Tensor& x, const torch::Tensor& y,
                                     const compute::Devices& devices) {
  torch::NoGradGuard no_grad;
  SwappedIn reference(params_, start_);
  return sequenceLogProbs(compute::forward(model_, x, devices).to(torch::kFloat), y);
}

DpoTerms Dpo::loss(const torch::Tensor& inputs, const torch::Tensor& targets,
                   const compute::Devices& devices) {
  const int64_t pairs = inputs.size(0);
  const auto x = sequences(inputs), y = sequences(targets);
  const auto ref = referenceLogProbs(x, y, devices);
  const auto mine = sequenceLogProbs(compute::forward(model_, x, devices).to(torch::kFloat), y);
  return dpoLoss(mine.narrow(0, 0, pairs), mine.narrow(0, pairs, pairs), ref.narrow(0, 0, pairs),
                 ref.narrow(0, pairs, pairs), beta_);
}

}  // namespace ltrain::train
