#include "ltrain/distributed/zero_sharded_optimizer.h"

#include <algorithm>

#include "ltrain/common/mapped_memory.h"
#include "ltrain/common/tensor_memory.h"
#include "ltrain/common/tensor_storage.h"
#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/optim/fused.h"
#include "ltrain/optim/optimizer.h"

namespace ltrain::distributed {

ShardedOptimizerPlan::ShardedOptimizerPlan(const PlanSetup& s, const Configure& configure,
                                           const FirstSlice& first_slice)
    : model_(s.model),
      pg_(*s.pg),
      rank_(pg_.runtime().rank),
      world_(pg_.runtime().world_size),
      stage_(s.dist.zero),
      make_optimizer_(s.make_optimizer),
      extras_given_(s.extras),
      norm_group_(s.norm_group),
      norm_weight_(s.norm_weight) {
  ReducerOptions o;
  o.bucket_cap_mb = s.dist.bucket_cap_mb;
  o.broadcast_parameters = !s.fill_layer;  // deferred: made alike on every rank by first_slice
  o.collective = reduceScatterBuckets(pg_);
  o.release_after_reduce = stage_ >= 2;
  auto tensors = ReducedTensors::of(*model_);
  configure(o, tensors);
  reducer_ = std::make_unique<BucketReducer>(std::move(tensors), pg_, o);
  has_buffers_ = !model_->buffers().empty();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> slices;
  std::vector<std::vector<ElementRange>> decay;
  for (size_t b = 0; b < reducer_->bucketCount(); ++b) {
    Shard sh{reducer_->layout(b), {}, {}};
    if (sh.bucket.shard.scalar_type() != sh.bucket.params.front().scalar_type() && stage_ != 3)
      throw std::logic_error("ZeRO-1/2 gradients must travel in the parameters' dtype");
    sh.param = (first_slice ? first_slice(sh, mine(sh)) : flatSlice(sh, sh.bucket.params))
                   .set_requires_grad(true);
    // The optimizer reads the reduce-scatter's output in place: no copy per step; reduced in
    // another dtype, it is cast into a gradient of the slice's own after each backward.
    if (sh.bucket.shard.scalar_type() != sh.param.scalar_type())
      sh.grad = mappedZeros(sh.param.numel(), sh.param.options(), Transient::kGradientSlices);
    sh.param.mutable_grad() = sh.grad.defined() ? sh.grad : sh.bucket.shard;
    slices.push_back(sh.param);
    // Which elements of the slice are of matrices (optimizer.decay matrices decays those).
    decay.emplace_back();
    const auto window = mine(sh);
    for (size_t i = 0; i < sh.bucket.params.size(); ++i) {
      const auto& p = sh.bucket.params[i];
      const auto here = overlap(window, sh.bucket.offsets[i], p.numel());
      if (p.dim() < 2 || here.empty()) continue;
      const int64_t at = sh.bucket.offsets[i] + here.begin - window.begin;
      decay.back().push_back({at, at + here.size()});
    }
    shards_.push_back(std::move(sh));
  }
  opt_ = make_optimizer_(slices, decay);
}

void ShardedOptimizerPlan::prepare(const MicroStep& m) {
  if (m.last_backward_of_stage >= 0) return;  // no pipeline under ZeRO
  if (m.first) {
    for (auto& p : model_->parameters()) p.mutable_grad().reset();
    freeGradients();
  }
  reducer_->prepareBackward(m.last);
  if (has_buffers_) reducer_->broadcastBuffers();
}

torch::Tensor ShardedOptimizerPlan::finishGradients(const torch::Tensor& unscale) {
  reducer_->finishBackward();
  afterBackward();
  for (auto& s : shards_)
    if (s.grad.defined()) {
      allocateStorage(s.grad, Transient::kGradientSlices);
      s.grad.copy_(s.bucket.shard);
    }
  auto found = unscaleAndFindInf(shardGradients(), unscale);
  std::vector<at::Tensor> io{found};
  pg_.wait(pg_.allreduce(io));  // a rank's inf is every rank's
  return io[0].clamp_max(1.0);
}

void ShardedOptimizerPlan::step(const OptimizerStep& s) {
  if (s.clip_grad_norm > 0) clipToNorm(shardGradients(), globalNorm(), s.clip_grad_norm);
  optim::setLearningRate(*opt_, s.lr);
  optim::setFoundInf(*opt_, s.found_inf);
  opt_->step();
  afterStep();
}

void ShardedOptimizerPlan::zeroGradients() {
  torch::NoGradGuard no_grad;
  for (auto& s : shards_)
    for (const auto* t : {&s.bucket.shard, &s.grad})
      if (t->defined() && hasStorage(*t)) t->zero_();
  afterStep();  // the step's extras still reach every rank
}

// At a step's start the reduced slices hold nothing it reads (its reduce-scatters write every
// element; the last step's norm was logged), so their memory goes until their bucket launches,
// as torch.optim's zero_grad(set_to_none=True) drops .grad: the forward and the first half of
// backward, where the activations peak, run without G / W.
void ShardedOptimizerPlan::freeGradients() {
  for (auto& s : shards_)
    for (const auto* t : {&s.bucket.shard, &s.grad})
      if (t->defined()) freeStorage(*t, Transient::kGradientSlices);
}

StepReport ShardedOptimizerPlan::lastStep() const {
  StepReport r;
  r.collectives = reducer_->lastStep().collectives;
  for (double w : reducer_->lastStep().bucket_wait_s) r.wait_s += w;
  r.extras = extras_;
  return r;
}

PlanSummary ShardedOptimizerPlan::summary() const {
  PlanSummary r;
  r.optimizer_state_bytes = distributed::optimizerStateBytes(*opt_);
  // The buckets' buffers and the parameters' .grad where they have memory now; the reduced
  // slices (the flat parameters' .grad) as a step holds them, their memory being freed between
  // steps.
  std::vector<torch::Tensor> grads;
  for (const auto& t : reducer_->bufferTensors())
    if (!std::any_of(shards_.begin(), shards_.end(),
                     [&](const Shard& sh) { return t.is_same(sh.bucket.shard); }))
      grads.push_back(t);
  for (const auto& p : model_->parameters()) grads.push_back(p.grad());
  for (const auto& sh : shards_)
    r.gradient_bytes_within_steps +=
        bytesOf(sh.bucket.shard) + (sh.grad.defined() ? bytesOf(sh.grad) : 0);
  r.gradient_bytes = distinctStorageBytes(grads) + r.gradient_bytes_within_steps;
  describe(r);
  return r;
}

void ShardedOptimizerPlan::saveWholeOptimizer(
    const std::function<void(torch::optim::Optimizer&)>& write) {
  optim::syncStepsToHost(*opt_);
  auto whole = make_optimizer_(model_->parameters(), {});
  gatherStateInto(*whole);
  writeWhole(*whole, write);
}

void ShardedOptimizerPlan::writeWhole(torch::optim::Optimizer& whole,
                                      const std::function<void(torch::optim::Optimizer&)>& write) {
  if (rank_ == 0) write(whole);
}

torch::Tensor ShardedOptimizerPlan::globalNorm() {
  auto sum = (norm_weight_ ? weightedSquares() : sumOfAllSquares(shardGradients())).reshape({1});
  std::vector<at::Tensor> io{sum};
  pg_.wait(pg_.allreduce(io));
  if (norm_group_) norm_group_->wait(norm_group_->allreduce(io));  // the other parts' squares
  return io[0].reshape({}).sqrt();
}

// The squares of this rank's slices, each parameter's piece of them weighted by norm_weight.
torch::Tensor ShardedOptimizerPlan::weightedSquares() const {
  std::vector<torch::Tensor> pieces;
  std::vector<double> weights;
  for (const auto& s : shards_) {
    const auto& g = s.grad.defined() ? s.grad : s.bucket.shard;
    const auto window = mine(s);
    for (size_t i = 0; i < s.bucket.params.size(); ++i) {
      const auto& p = s.bucket.params[i];
      const auto here = overlap(window, s.bucket.offsets[i], p.numel());
      if (here.empty()) continue;
      pieces.push_back(g.narrow(0, s.bucket.offsets[i] + here.begin - window.begin, here.size()));
      weights.push_back(norm_weight_(p));
    }
  }
  return sumOfAllSquares(pieces, weights);
}

std::vector<torch::Tensor> ShardedOptimizerPlan::shardGradients() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : shards_) out.push_back(s.grad.defined() ? s.grad : s.bucket.shard);
  return out;
}

torch::Tensor ShardedOptimizerPlan::flatSlice(const Shard& s,
                                              const std::vector<torch::Tensor>& per_param) const {
  auto flat = torch::zeros({s.bucket.padded}, per_param.front().options());
  for (size_t i = 0; i < per_param.size(); ++i)
    flat.narrow(0, s.bucket.offsets[i], per_param[i].numel()).copy_(per_param[i].reshape(-1));
  const auto window = mine(s);
  return flat.narrow(0, window.begin, window.size()).clone();
}

// Gathered on rank 0 only, shard by shard into host memory: no rank ever holds more than one
// bucket's worth of the whole state on its device.
void ShardedOptimizerPlan::gatherStateInto(torch::optim::Optimizer& whole) {
  torch::NoGradGuard no_grad;
  for (const auto& s : shards_) {
    ParamState st;
    if (!readParamState(*opt_, s.param, st)) continue;  // no step yet: the same on every rank
    std::vector<torch::Tensor> joined;
    for (const auto& [name, t] : st.tensors) {
      std::vector<at::Tensor> in{t.contiguous()};
      std::vector<std::vector<at::Tensor>> out;
      if (rank_ == 0) {
        out.emplace_back();
        for (int64_t r = 0; r < world_; ++r) out[0].push_back(torch::empty_like(in[0]));
      }
      pg_.wait(pg_.gatherToRankZero(out, in));
      if (rank_ == 0) joined.push_back(torch::cat(out[0]).to(torch::kCPU));
    }
    if (rank_ != 0) continue;
    for (size_t i = 0; i < s.bucket.params.size(); ++i) {
      const auto& p = s.bucket.params[i];
      ParamState ps;
      ps.step = st.step;
      for (size_t k = 0; k < joined.size(); ++k)
        ps.tensors.emplace_back(
            st.tensors[k].first,
            joined[k].narrow(0, s.bucket.offsets[i], p.numel()).view(p.sizes()).clone());
      writeParamState(whole, p, ps);
    }
  }
}

void ShardedOptimizerPlan::loadWholeOptimizer(const torch::optim::Optimizer& whole) {
  torch::NoGradGuard no_grad;
  for (const auto& s : shards_) {
    const size_t n = s.bucket.params.size();
    std::vector<ParamState> per_param(n);
    std::vector<char> has(n, 0);
    int first = -1;
    for (size_t i = 0; i < n; ++i) {
      has[i] = readParamState(whole, s.bucket.params[i], per_param[i]);
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
    writeParamState(*opt_, s.param, st);
  }
}

// Of each bucket, this rank's slice of every state, read from the checkpoint element range by
// element range; a parameter without state there starts from zero moments, as in
// loadWholeOptimizer.
void ShardedOptimizerPlan::loadOptimizerRanges(const RangeSource& source) {
  torch::NoGradGuard no_grad;
  const auto names = reducer_->bucketParameterNames();
  for (size_t b = 0; b < shards_.size(); ++b) {
    const auto& s = shards_[b];
    const auto window = mine(s);
    ParamState st;
    std::vector<std::string> state_names;
    for (const auto& name : names[b]) {
      const auto& here = source.state_names(name);
      if (here.empty()) continue;
      if (state_names.empty()) state_names = here, st.step = source.step(name);
    }
    for (const auto& sname : state_names) {
      auto slice = torch::zeros({window.size()}, s.param.detach().options());
      for (size_t i = 0; i < s.bucket.params.size(); ++i) {
        const int64_t off = s.bucket.offsets[i];
        const auto here = overlap(window, off, s.bucket.params[i].numel());
        const auto& has = source.state_names(names[b][i]);
        if (here.empty() || std::find(has.begin(), has.end(), sname) == has.end()) continue;
        slice.narrow(0, off + here.begin - window.begin, here.size())
            .copy_(source.read(names[b][i], sname, here.begin, here.end));
      }
      st.tensors.emplace_back(sname, slice);
    }
    if (!st.tensors.empty()) writeParamState(*opt_, s.param, st);
  }
}

}  // namespace ltrain::distributed
