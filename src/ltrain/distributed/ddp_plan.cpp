// The plan DistributedDataParallel makes: every rank holds the whole model and the whole
// optimizer; the bucket reducer all-reduces the gradients while backward runs, and every rank then
// takes the same optimizer step. With one process there is nothing to reduce.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/optim/fused.h"
#include "ltrain/optim/optimizer.h"

namespace ltrain::distributed {
namespace {

class DdpPlan final : public ParallelPlan, private PlanState {
 public:
  explicit DdpPlan(PlanSetup s)
      : model_(std::move(s.model)),
        optimizer_(s.make_optimizer(model_->parameters(), {})),
        extras_given_(s.extras),
        norm_group_(s.norm_group),
        norm_weight_(std::move(s.norm_weight)) {
    if (!s.pg) {
      watchGradients();
      return;
    }
    backend_ = s.pg->backendName() + (s.pg->sharedMemory() ? " (shared memory)" : "");
    if (s.shares.empty()) s.shares.push_back({s.pg->device(), ReducedTensors::of(*model_)});
    // NCCL wants one device per communicator: a pipeline's stages each get one, over the same
    // stage of every replica. The stop vote's extra scalars ride on the first stage's buckets.
    for (size_t i = 0; i < s.shares.size(); ++i) {
      auto& share = s.shares[i];
      Stage st;
      st.pg =
          s.shares.size() == 1 ? nullptr : s.pg->subgroup(fmt::format("stage{}", i), share.device);
      ReducerOptions o;
      o.bucket_cap_mb = s.dist.bucket_cap_mb;
      o.find_unused_parameters = s.dist.find_unused_parameters;
      o.collective =
          allReduceBuckets(st.pg ? *st.pg : *s.pg, compressedType(s.dist.grad_compression));
      o.rebuild_buckets = true;
      if (i == 0) o.extras = s.extras;
      st.has_buffers = !share.tensors.buffers.empty();
      st.reducer =
          std::make_unique<BucketReducer>(std::move(share.tensors), st.pg ? *st.pg : *s.pg, o);
      stages_.push_back(std::move(st));
    }
  }

  ~DdpPlan() override {
    for (auto& [p, hook] : hooks_) p.remove_hook(hook);
  }

  void prepare(const MicroStep& m) override {
    if (m.last_backward_of_stage >= 0) {
      const auto stage = static_cast<size_t>(m.last_backward_of_stage);
      if (stage < stages_.size()) stages_[stage].reducer->prepareBackward(true);
      return;
    }
    if (m.first) zeroGradientsInPlace();
    for (auto& st : stages_) {
      st.reducer->prepareBackward(m.last);
      if (st.has_buffers) st.reducer->broadcastBuffers();
    }
  }

  torch::Tensor finishGradients(const torch::Tensor& unscale) override {
    if (stages_.empty()) {
      // One process: the extras are this rank's own values.
      extras_ = extras_given_.values(torch::kFloat);
      forgetUnseenGradients();
    } else {
      for (auto& st : stages_) st.reducer->finishBackward();
      extras_ = stages_.front().reducer->extraScalars();
    }
    return unscaleAndFindInf(gradients(), unscale);
  }

  double gradNorm() override { return std::sqrt(squaredNorm().item<double>()); }

  void step(const OptimizerStep& s) override {
    if (s.clip_grad_norm > 0) {
      clipToNorm(gradients(), squaredNorm().sqrt(), s.clip_grad_norm);
    }
    optim::setLearningRate(*optimizer_, s.lr);
    optim::setFoundInf(*optimizer_, s.found_inf);
    optimizer_->step();
  }

  void zeroGradients() override {
    torch::NoGradGuard no_grad;
    for (auto& g : gradients()) g.zero_();
  }

  StepReport lastStep() const override {
    StepReport r;
    for (const auto& st : stages_) {
      r.collectives += st.reducer->lastStep().collectives;
      for (double w : st.reducer->lastStep().bucket_wait_s) r.wait_s += w;
    }
    r.extras = extras_;
    return r;
  }

  PlanSummary summary() const override {
    PlanSummary r;
    r.optimizer_state_bytes = distributed::optimizerStateBytes(*optimizer_);
    std::vector<torch::Tensor> grads;  // a .grad that is a view of its bucket counts once
    for (const auto& st : stages_)
      for (auto& t : st.reducer->bufferTensors()) grads.push_back(t);
    for (const auto& p : model_->parameters()) grads.push_back(p.grad());
    r.gradient_bytes = distinctStorageBytes(grads);
    r.parameter_bytes = distinctStorageBytes(model_->parameters());
    r.description = describe();
    return r;
  }

  PlanState& state() override { return *this; }

 private:
  void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>& write) override {
    write(*optimizer_);
  }

  void loadWholeOptimizer(const torch::optim::Optimizer& whole) override {
    copyStateNextToParameters(whole, *optimizer_);
  }

  std::string describe() const {
    if (stages_.empty()) return "";
    size_t buckets = 0;
    for (const auto& st : stages_) buckets += st.reducer->bucketCount();
    return fmt::format("on {} with {} gradient buckets{}", backend_, buckets,
                       stages_.size() > 1
                           ? fmt::format(" ({} communicators, one per stage)", stages_.size())
                           : "");
  }

  struct Stage {
    std::shared_ptr<ProcessGroup> pg;  // a stage's own communicator; null: the job's
    std::unique_ptr<BucketReducer> reducer;
    bool has_buffers = false;
  };

  // Zeroed where they are, as PyTorch's DDP under gradient_as_bucket_view (backward then
  // accumulates straight into the bucket, and no step allocates whole gradients anew), and in one
  // process too: set to none there, a large model's gradients went back to the heap, the next
  // forward's activations landed among them, and the next backward's no longer fit (a 302M GPT's
  // peak grew by 800 MiB of allocator slack at its second step; giving the pages back instead cost
  // 13% samples/s in faults, bench/RESULTS.md). What PyTorch's set-to-none means for the
  // optimizer is kept by forgetUnseenGradients().
  void zeroGradientsInPlace() {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
    if (seen_) std::fill(seen_->begin(), seen_->end(), 0);
  }

  // One process: each trainable parameter's gradient hook marks it as given a gradient this step.
  void watchGradients() {
    const auto params = model_->parameters();
    seen_ = std::make_shared<std::vector<uint8_t>>(params.size(), 0);
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      auto seen = seen_;  // shared with the hooks, which the destructor removes
      hooks_.emplace_back(
          params[i], params[i].register_hook([seen, i](const torch::Tensor&) { (*seen)[i] = 1; }));
    }
  }

  // A parameter no backward reached since the step's first micro-step (an expert no token chose,
  // a branch not taken) has no gradient, as after PyTorch's zero_grad(set_to_none=True): the
  // optimizer skips it rather than stepping it with zeros (weight decay, momentum).
  void forgetUnseenGradients() {
    const auto params = model_->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      if (!(*seen_)[i] && params[i].grad().defined()) params[i].mutable_grad().reset();
  }

  // The whole model's squared gradient norm (PlanSetup::norm_group: summed over the parts).
  torch::Tensor squaredNorm() const {
    if (!norm_group_) return sumOfAllSquares(gradients());
    std::vector<torch::Tensor> grads;
    std::vector<double> weights;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) grads.push_back(p.grad()), weights.push_back(norm_weight_(p));
    std::vector<at::Tensor> io{sumOfAllSquares(grads, weights).reshape({1})};
    norm_group_->wait(norm_group_->allreduce(io));
    return io[0].reshape({});
  }

  std::vector<torch::Tensor> gradients() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) out.push_back(p.grad());
    return out;
  }

  std::shared_ptr<torch::nn::Module> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<Stage> stages_;
  ExtraScalars extras_given_;
  torch::Tensor extras_;
  std::string backend_;
  ProcessGroup* norm_group_;
  std::function<double(const torch::Tensor&)> norm_weight_;
  std::shared_ptr<std::vector<uint8_t>> seen_;  // one process: watchGradients()
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace

std::unique_ptr<ParallelPlan> makeDdpPlan(PlanSetup setup) {
  return std::make_unique<DdpPlan>(std::move(setup));
}

}  // namespace ltrain::distributed
