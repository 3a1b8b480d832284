// dist.zero 1 and 2: the optimizer state sharded across ranks (zero_sharded_optimizer.h), under
// stage 2 the gradients as well (the reducer keeps only each bucket's reduced slice:
// ReducerOptions::release_after_reduce). After each step an all-gather gives every rank all the
// updated parameters.
#include <fmt/format.h>
#include <torch/torch.h>

#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/zero_sharded_optimizer.h"

namespace ltrain::distributed {
namespace {

class ZeroPlan final : public ShardedOptimizerPlan {
 public:
  explicit ZeroPlan(const PlanSetup& s)
      : ShardedOptimizerPlan(
            s, [](ReducerOptions&, const ReducedTensors&) {}, nullptr) {
    if (s.fill_layer) throw std::logic_error("a model built deferred needs dist.zero 3");
  }

 private:
  // Every bucket's all-gather is started before any is waited on; the extras ride on the last
  // one (each rank's row carries its values, summed over the rows afterwards).
  void afterStep() override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> gathered;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (size_t b = 0; b < shards_.size(); ++b) {
      auto in = shards_[b].param.detach();
      if (b + 1 == shards_.size() && extras_given_.count > 0)
        in = torch::cat({in, extras_given_.values(in.options())});
      gathered.push_back(torch::empty({world_ * in.numel()}, in.options()));
      works.push_back(pg_.allgatherInto(gathered.back(), in));
    }
    for (size_t b = 0; b < shards_.size(); ++b) {
      pg_.wait(works[b]);
      const auto& s = shards_[b];
      const int64_t n = mine(s).size();
      auto rows = gathered[b].view({world_, -1});
      if (rows.size(1) > n)
        extras_ = rows.narrow(1, n, static_cast<int64_t>(extras_given_.count)).sum(0);
      auto flat = rows.narrow(1, 0, n).reshape(-1);
      for (size_t i = 0; i < s.bucket.params.size(); ++i) {
        auto& p = s.bucket.params[i];
        p.copy_(flat.narrow(0, s.bucket.offsets[i], p.numel()).view_as(p));
      }
    }
  }

  void describe(PlanSummary& r) const override {
    auto params = model_->parameters();  // and the flat slices the optimizer steps
    for (const auto& sh : shards_) params.push_back(sh.param);
    r.parameter_bytes = distinctStorageBytes(params);
    r.description = fmt::format("on {} with {} gradient buckets, ZeRO-{}", pg_.backendName(),
                                reducer_->bucketCount(), stage_);
  }
};

}  // namespace

std::unique_ptr<ParallelPlan> makeZeroPlan(PlanSetup setup) {
  if (setup.dist.zero == 3) throw std::logic_error("dist.zero 3 is makeZero3Plan's");
  return std::make_unique<ZeroPlan>(setup);
}

}  // namespace ltrain::distributed
