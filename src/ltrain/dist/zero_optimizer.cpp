#include "ltrain/dist/zero_optimizer.h"

#include <torch/torch.h>

#include <csignal>
#include <stdexcept>

namespace ltrain::dist {
namespace {

// One parameter's optimizer state as named tensors, for the optimizers ltrain makes (SGD, Adam,
// AdamW): LibTorch keeps it in a per-type struct, so it is moved in and out by type.
struct ParamState {
  int64_t step = 0;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // in a fixed order
};

bool readState(const torch::optim::Optimizer& opt, const torch::Tensor& p, ParamState& out) {
  auto it = opt.state().find(p.unsafeGetTensorImpl());
  if (it == opt.state().end()) return false;
  out = ParamState{};
  auto add = [&](const char* name, const torch::Tensor& t) {
    if (t.defined()) out.tensors.emplace_back(name, t);
  };
  if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
    add("momentum_buffer", s->momentum_buffer());
  } else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get())) {
    out.step = a->step();
    add("exp_avg", a->exp_avg()), add("exp_avg_sq", a->exp_avg_sq());
    add("max_exp_avg_sq", a->max_exp_avg_sq());
  } else if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get())) {
    out.step = w->step();
    add("exp_avg", w->exp_avg()), add("exp_avg_sq", w->exp_avg_sq());
    add("max_exp_avg_sq", w->max_exp_avg_sq());
  } else {
    throw std::logic_error("ZeRO-1: optimizer state of an unknown optimizer type");
  }
  return true;
}

void writeState(torch::optim::Optimizer& opt, const torch::Tensor& p, const ParamState& in) {
  auto get = [&](const char* name) {
    for (const auto& [n, t] : in.tensors)
      if (n == name) return t;
    return torch::Tensor();
  };
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  if (dynamic_cast<torch::optim::SGD*>(&opt)) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(get("momentum_buffer"));
    state = std::move(s);
  } else if (dynamic_cast<torch::optim::Adam*>(&opt)) {
    auto a = std::make_unique<torch::optim::AdamParamState>();
    a->step(in.step), a->exp_avg(get("exp_avg")), a->exp_avg_sq(get("exp_avg_sq"));
    a->max_exp_avg_sq(get("max_exp_avg_sq"));
    state = std::move(a);
  } else if (dynamic_cast<torch::optim::AdamW*>(&opt)) {
    auto w = std::make_unique<torch::optim::AdamWParamState>();
    w->step(in.step), w->exp_avg(get("exp_avg")), w->exp_avg_sq(get("exp_avg_sq"));
    w->max_exp_avg_sq(get("max_exp_avg_sq"));
    state = std::move(w);
  } else {
    throw std::logic_error("ZeRO-1: an optimizer type it cannot shard");
  }
  opt.state()[p.unsafeGetTensorImpl()] = std::move(state);
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, c10::intrusive_ptr<c10d::Backend> pg,
                             int64_t rank, int64_t world, const MakeOptimizer& make,
                             std::chrono::milliseconds timeout, std::function<int()> pending_signal)
    : pg_(std::move(pg)),
      rank_(rank),
      world_(world),
      timeout_(timeout),
      pending_signal_(std::move(pending_signal)) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params;
  for (size_t b = 0; b < ddp.bucketCount(); ++b) {
    Shard s{ddp.bucket(b), {}};
    if (!s.bucket.shard_grad.defined())
      throw std::logic_error("ZeroOptimizer needs a DistributedDataParallel that shards gradients");
    const auto& first = s.bucket.params.front();
    if (s.bucket.shard_grad.scalar_type() != first.scalar_type())
      throw std::logic_error("ZeRO-1 gradients must travel in the parameters' dtype");
    std::vector<torch::Tensor> per_param;
    for (const auto& p : s.bucket.params) per_param.push_back(p);
    s.param = flatSlice(s, per_param).set_requires_grad(true);
    // The optimizer reads the reduce-scatter's output in place: no copy per step.
    s.param.mutable_grad() = s.bucket.shard_grad;
    params.push_back(s.param);
    shards_.push_back(std::move(s));
  }
  opt_ = make(params);
}

// This rank's slice of the flattened, zero-padded concatenation of `per_param` (one tensor per
// parameter of the bucket, each of that parameter's size).
torch::Tensor ZeroOptimizer::flatSlice(const Shard& s,
                                       const std::vector<torch::Tensor>& per_param) const {
  const auto& first = s.bucket.params.front();
  auto flat = torch::zeros({s.bucket.padded}, first.options());
  for (size_t i = 0; i < per_param.size(); ++i)
    flat.narrow(0, s.bucket.offsets[i], per_param[i].numel()).copy_(per_param[i].reshape(-1));
  const int64_t n = s.bucket.padded / world_;
  return flat.narrow(0, rank_ * n, n).clone();
}

bool ZeroOptimizer::gradientsFinite() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flags;
  // On the first bucket's device: a pipeline's buckets live on several.
  const auto at = shards_.front().param.device();
  for (const auto& s : shards_) flags.push_back(torch::isfinite(s.bucket.shard_grad).all().to(at));
  auto bad = (~torch::stack(flags).all()).to(torch::kFloat).reshape({1});
  std::vector<at::Tensor> io{bad};
  pg_->allreduce(io)->wait(timeout_);
  return io[0].item<float>() == 0.f;
}

double ZeroOptimizer::gradNorm() {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, shards_.front().param.options().dtype(torch::kDouble));
  for (const auto& s : shards_) sum += sumOfSquares(s.bucket.shard_grad).to(sum.device());
  std::vector<at::Tensor> io{sum};
  pg_->allreduce(io)->wait(timeout_);
  return std::sqrt(io[0].item<double>());
}

void ZeroOptimizer::clipGradNorm(double max_norm) {
  // As torch::nn::utils::clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double coef = max_norm / (gradNorm() + 1e-6);
  if (coef >= 1.0) return;
  torch::NoGradGuard no_grad;
  for (auto& s : shards_) s.bucket.shard_grad.mul_(coef);
}

void ZeroOptimizer::step() {
  opt_->step();
  torch::NoGradGuard no_grad;
  // Every bucket's all-gather is started before any is waited on.
  std::vector<torch::Tensor> gathered;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t b = 0; b < shards_.size(); ++b) {
    auto in = shards_[b].param.detach();
    if (b + 1 == shards_.size() && pending_signal_) {
      const int sig = pending_signal_();
      auto vote =
          torch::tensor({sig == SIGTERM ? 1.f : 0.f, sig == SIGINT ? 1.f : 0.f}, in.options());
      in = torch::cat({in, vote});
    }
    gathered.push_back(torch::empty({world_ * in.numel()}, in.options()));
    works.push_back(pg_->_allgather_base(gathered.back(), in));
  }
  stop_vote_ = 0;
  for (size_t b = 0; b < shards_.size(); ++b) {
    works[b]->wait(timeout_);
    const auto& s = shards_[b];
    const int64_t n = s.bucket.padded / world_;
    auto rows = gathered[b].view({world_, -1});
    if (rows.size(1) > n) {
      const auto votes = rows.narrow(1, n, 2).sum(0).to(torch::kCPU, torch::kFloat);
      stop_vote_ = votes[0].item<float>() > 0 ? SIGTERM : votes[1].item<float>() > 0 ? SIGINT : 0;
    }
    auto flat = rows.narrow(1, 0, n).reshape(-1);
    for (size_t i = 0; i < s.bucket.params.size(); ++i) {
      auto& p = s.bucket.params[i];
      p.copy_(flat.narrow(0, s.bucket.offsets[i], p.numel()).view_as(p));
    }
  }
}

torch::Tensor sumOfSquares(const torch::Tensor& g) {
  return at::linalg_vector_norm(g, 2, c10::nullopt, false, torch::kDouble).square();
}

int64_t optimizerStateBytes(const torch::optim::Optimizer& opt) {
  int64_t bytes = 0;
  for (const auto& group : opt.param_groups())
    for (const auto& p : group.params()) {
      ParamState st;
      if (!readState(opt, p, st)) continue;
      for (const auto& [name, t] : st.tensors) bytes += t.numel() * t.element_size();
    }
  return bytes;
}

int64_t ZeroOptimizer::stateBytes() const {
  return optimizerStateBytes(*opt_);
}

void ZeroOptimizer::gatherStateInto(torch::optim::Optimizer& full) {
  torch::NoGradGuard no_grad;
  for (const auto& s : shards_) {
    ParamState st;
    if (!readState(*opt_, s.param, st)) continue;  // no step yet: the same on every rank
    // Gathered on rank 0 only, the rank that writes the checkpoint: the others never hold more
    // than their slice.
    std::vector<torch::Tensor> whole;
    for (const auto& [name, t] : st.tensors) {
      std::vector<at::Tensor> in{t.contiguous()};
      std::vector<std::vector<at::Tensor>> out;
      if (rank_ == 0) {
        out.emplace_back();
        for (int64_t r = 0; r < world_; ++r) out[0].push_back(torch::empty_like(in[0]));
      }
      c10d::GatherOptions opts;
      opts.rootRank = 0;
      pg_->gather(out, in, opts)->wait(timeout_);
      if (rank_ == 0) whole.push_back(torch::cat(out[0]));
    }
    if (rank_ != 0) continue;
    for (size_t i = 0; i < s.bucket.params.size(); ++i) {
      const auto& p = s.bucket.params[i];
      ParamState ps;
      ps.step = st.step;
      for (size_t k = 0; k < whole.size(); ++k)
        ps.tensors.emplace_back(
            st.tensors[k].first,
            whole[k].narrow(0, s.bucket.offsets[i], p.numel()).view_as(p).clone());
      writeState(full, p, ps);
    }
  }
}

void ZeroOptimizer::loadStateFrom(const torch::optim::Optimizer& full) {
  torch::NoGradGuard no_grad;
  for (const auto& s : shards_) {
    const size_t n = s.bucket.params.size();
    std::vector<ParamState> per_param(n);
    std::vector<char> has(n, 0);
    int first = -1;
    for (size_t i = 0; i < n; ++i) {
      has[i] = readState(full, s.bucket.params[i], per_param[i]);
      if (has[i] && first < 0) first = static_cast<int>(i);
    }
    if (first < 0) continue;
    // A parameter without state (one no rank ever used, in a run with
    // dist.find_unused_parameters) starts from zero moments, like the rest of its slice.
    const ParamState& like = per_param[first];
    ParamState st;
    st.step = like.step;
    for (size_t k = 0; k < like.tensors.size(); ++k) {
      std::vector<torch::Tensor> tensors;
      for (size_t i = 0; i < n; ++i)
        tensors.push_back(has[i] && k < per_param[i].tensors.size()
                              ? per_param[i].tensors[k].second
                              : torch::zeros_like(s.bucket.params[i]));
      st.tensors.emplace_back(like.tensors[k].first, flatSlice(s, tensors));
    }
    writeState(*opt_, s.param, st);
  }
}

void ZeroOptimizer::clearGradients() {
  torch::NoGradGuard no_grad;
  for (auto& s : shards_) s.bucket.shard_grad.zero_();
}

}  // namespace ltrain::dist
