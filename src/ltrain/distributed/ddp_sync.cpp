// GradientSync as DistributedDataParallel does it: every rank holds the whole model and the whole
// optimizer; the bucket reducer all-reduces the gradients while backward runs, and every rank then
// takes the same optimizer step. With one process there is nothing to reduce.
#include <fmt/format.h>
#include <torch/torch.h>

#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/distributed/gradient_sync.h"
#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/process_group.h"

namespace ltrain::distributed {
namespace {

class DdpSync final : public GradientSync {
 public:
  explicit DdpSync(SyncSetup s)
      : model_(std::move(s.model)),
        optimizer_(s.make_optimizer(model_->parameters())),
        fill_extras_(std::move(s.fill_extras)),
        extra_count_(s.extra_scalars) {
    if (!s.pg) return;
    ReducerOptions o;
    o.bucket_cap_mb = s.dist.bucket_cap_mb;
    o.find_unused_parameters = s.dist.find_unused_parameters;
    o.compression = s.dist.grad_compression;
    o.extra_scalars = s.extra_scalars;
    reducer_ = std::make_unique<BucketReducer>(model_, *s.pg, o);
    reducer_->setExtraScalars(fill_extras_);
    has_buffers_ = !model_->buffers().empty();
    backend_ = s.pg->backendName();
  }

  void beforeForward(bool first, bool last) override {
    if (first) optimizer_->zero_grad();
    if (!reducer_) return;
    reducer_->prepareBackward(last);
    if (has_buffers_) reducer_->broadcastBuffers();
  }

  void finishBackward() override {
    if (!reducer_) {
      // One process: the extras are this rank's own values.
      std::vector<float> v(extra_count_, 0.f);
      if (fill_extras_ && extra_count_ > 0) fill_extras_(v.data());
      extras_ = torch::tensor(v);
      return;
    }
    reducer_->finishBackward();
    extras_ = reducer_->extraScalars();
  }

  torch::Tensor findInf(double unscale) override { return unscaleAndFindInf(gradients(), unscale); }

  double gradNorm() override { return globalNorm(gradients()); }

  void clipGradNorm(double max_norm) override {
    const auto grads = gradients();
    clipToNorm(grads, globalNorm(grads), max_norm);
  }

  void optimizerStep(double lr) override {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    optimizer_->step();
  }

  void discardGradients() override {
    torch::NoGradGuard no_grad;
    for (auto& g : gradients()) g.zero_();
  }

  torch::Tensor extras() const override { return extras_; }

  void withWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>& write) override {
    write(*optimizer_);
  }

  void loadWholeOptimizer(const torch::optim::Optimizer& whole) override {
    copyStateNextToParameters(whole, *optimizer_);
  }

  int64_t optimizerStateBytes() const override {
    return distributed::optimizerStateBytes(*optimizer_);
  }

  SyncStats lastStep() const override {
    SyncStats s;
    if (!reducer_) return s;
    s.collectives = reducer_->lastStep().collectives;
    for (double w : reducer_->lastStep().bucket_wait_s) s.wait_s += w;
    return s;
  }

  std::string describe() const override {
    return reducer_
               ? fmt::format("on {} with {} gradient buckets", backend_, reducer_->bucketCount())
               : "";
  }

 private:
  std::vector<torch::Tensor> gradients() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) out.push_back(p.grad());
    return out;
  }

  std::shared_ptr<torch::nn::Module> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<BucketReducer> reducer_;
  std::function<void(float*)> fill_extras_;
  size_t extra_count_;
  torch::Tensor extras_;
  bool has_buffers_ = false;
  std::string backend_;
};

}  // namespace

std::unique_ptr<GradientSync> makeDdpSync(SyncSetup setup) {
  return std::make_unique<DdpSync>(std::move(setup));
}

std::unique_ptr<GradientSync> makeGradientSync(SyncSetup setup) {
  const bool sharded = setup.pg && setup.pg->runtime().world_size > 1 && setup.dist.zero == 1;
  return sharded ? makeZero1Sync(std::move(setup)) : makeDdpSync(std::move(setup));
}

}  // namespace ltrain::distributed
