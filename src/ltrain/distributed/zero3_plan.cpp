// dist.zero 3: the optimizer state, the gradients and the parameters sharded across ranks. Each
// bucket is one unit of layers (dist.fsdp_unit), whose flat slice is all a rank keeps of its
// parameters: sharded_parameters.h gathers a unit around its forward and backward, in the compute
// dtype (bf16 under train.precision bf16, the fp32 values staying in the slices). A model built
// deferred is made here unit by unit, so the whole model never exists on a rank.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "ltrain/common/tensor_storage.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/sharded_parameters.h"
#include "ltrain/distributed/zero_sharded_optimizer.h"
#include "ltrain/optim/fused.h"

namespace ltrain::distributed {
namespace {

// Which unit each layer, and each parameter, belongs to.
struct Units {
  std::vector<int64_t> of_layer;
  std::map<const c10::TensorImpl*, int64_t> of_param;

  static Units of(const PlanSetup& s) {
    Units u;
    u.of_layer = unitsOfLayers(s.layer_params, s.dist.fsdp_unit);
    for (size_t l = 0; l < s.layer_params.size(); ++l)
      for (const auto& p : s.layer_params[l]) u.of_param[p.unsafeGetTensorImpl()] = u.of_layer[l];
    return u;
  }
  int64_t ofParam(const torch::Tensor& p, const std::string& name) const {
    auto it = of_param.find(p.unsafeGetTensorImpl());
    if (it == of_param.end())
      throw std::logic_error("dist.zero 3: parameter " + name + " is in no layer");
    return it->second;
  }
};

// A deferred build's unit: its values made here, a layer at a time, into one flat buffer of
// which this rank keeps its slice; the buffer goes at once, and the parameters have no memory
// again.
torch::Tensor filledSlice(const ShardedOptimizerPlan::Shard& s, const ElementRange& window,
                          const Units& units, const PlanSetup& setup) {
  torch::NoGradGuard no_grad;
  const auto& first = s.bucket.params.front();
  const int64_t unit = units.of_param.at(first.unsafeGetTensorImpl());
  auto flat = torch::zeros({s.bucket.padded}, first.options());
  std::map<const c10::TensorImpl*, int64_t> offset_of;
  for (size_t i = 0; i < s.bucket.params.size(); ++i) {
    auto& p = s.bucket.params[i];
    p.set_data(flat.narrow(0, s.bucket.offsets[i], p.numel()).view(p.sizes()));
    offset_of[p.unsafeGetTensorImpl()] = s.bucket.offsets[i];
  }
  // Of each parameter, the elements that fall into this rank's slice.
  auto wanted = [&](const torch::Tensor& p) {
    auto it = offset_of.find(p.unsafeGetTensorImpl());
    if (it == offset_of.end()) return std::pair<int64_t, int64_t>{0, 0};
    const auto here = overlap(window, it->second, p.numel());
    return std::pair<int64_t, int64_t>{here.begin, here.end};
  };
  for (size_t l = 0; l < units.of_layer.size(); ++l)
    if (units.of_layer[l] == unit) setup.fill_layer(l, wanted);
  auto slice = flat.narrow(0, window.begin, window.size()).clone();
  for (const auto& p : s.bucket.params) p.set_data(storageless(p.sizes(), p.options()));
  return slice;
}

class Zero3Plan final : public ShardedOptimizerPlan {
 public:
  explicit Zero3Plan(const PlanSetup& s) : Zero3Plan(s, Units::of(s)) {}

  ~Zero3Plan() override {
    if (set_layer_hooks_) set_layer_hooks_(nullptr);
  }

 private:
  Zero3Plan(const PlanSetup& s, Units units)
      : ShardedOptimizerPlan(
            s,
            [&](ReducerOptions& o, const ReducedTensors& tensors) {
              // Units gathered in bf16: gradients reduce in dist.reduce_dtype, into the fp32
              // slices the optimizer steps.
              if (s.compute_dtype == torch::kBFloat16 &&
                  s.dist.reduce_dtype == config::ReduceDtype::kBf16)
                o.collective = reduceScatterBuckets(*s.pg, torch::kBFloat16);
              for (const auto& [name, p] : tensors.params)
                o.groups.push_back(units.ofParam(p, name));
              o.on_bucket_grads = [this](size_t b) { sharded_->release(unit_of_bucket_[b]); };
            },
            s.fill_layer ? FirstSlice([&](const Shard& sh, const ElementRange& mine) {
              return filledSlice(sh, mine, units, s);
            })
                         : nullptr),
        gathered_dtype_(s.compute_dtype),
        prefetch_(s.dist.fsdp_prefetch),
        set_layer_hooks_(s.set_layer_hooks) {
    shardParameters(units);
  }

  // Each bucket is one unit: its flat slice becomes the only copy of its parameters this rank
  // keeps.
  void shardParameters(const Units& units) {
    const int64_t count = units.of_layer.empty()
                              ? 0
                              : *std::max_element(units.of_layer.begin(), units.of_layer.end()) + 1;
    if (count != static_cast<int64_t>(shards_.size()))
      throw std::logic_error("dist.zero 3: a unit without trainable parameters");
    std::vector<ShardedParameters::UnitInit> init(shards_.size());
    for (size_t b = 0; b < shards_.size(); ++b) {
      const auto u = static_cast<size_t>(
          units.of_param.at(shards_[b].bucket.params.front().unsafeGetTensorImpl()));
      unit_of_bucket_.push_back(u);
      init[u] = {shards_[b].bucket, shards_[b].param};
    }
    sharded_ = std::make_shared<ShardedParameters>(pg_, std::move(init), units.of_layer, prefetch_,
                                                   gathered_dtype_);
    if (!set_layer_hooks_) throw std::logic_error("dist.zero 3 needs the model's layer hooks");
    set_layer_hooks_(sharded_);
  }

  void afterBackward() override {
    sharded_->releaseAll();
  }  // a unit whose gradients never all came

  // No all-gather follows the step (the next forward gathers each unit) for the extras to ride
  // on: they get an all-reduce.
  void afterStep() override {
    if (extras_given_.count == 0) return;
    std::vector<at::Tensor> io{extras_given_.values(shards_.front().param.detach().options())};
    pg_.wait(pg_.allreduce(io));
    extras_ = io[0];
  }

  void describe(PlanSummary& r) const override {
    r.parameter_bytes = sharded_->shardBytes() + sharded_->gatheredBytes();
    r.gathered_peak_bytes = sharded_->peakGatheredBytes();
    r.description = fmt::format(
        "on {}, ZeRO-3 over {} unit(s){}{}", pg_.backendName(), sharded_->unitCount(),
        prefetch_ ? " with prefetch" : "",
        gathered_dtype_ == torch::kBFloat16
            ? fmt::format(", gathered in bf16, reduced in {}",
                          reducer_->bucketCount() > 0 &&
                                  shards_.front().bucket.shard.scalar_type() == torch::kBFloat16
                              ? "bf16"
                              : "fp32")
            : "");
  }

  void writeWhole(torch::optim::Optimizer& whole,
                  const std::function<void(torch::optim::Optimizer&)>& write) override {
    sharded_->withWholeOnHost(rank_ == 0, [&] { write(whole); });
  }

  std::vector<UnitShard> unitShards() override {
    optim::syncStepsToHost(*opt_);
    const auto names = reducer_->bucketParameterNames();
    std::vector<UnitShard> out;
    for (size_t b = 0; b < shards_.size(); ++b) {
      const auto& sh = shards_[b];
      UnitShard u;
      for (size_t i = 0; i < sh.bucket.params.size(); ++i)
        u.params.push_back({names[b][i], sh.bucket.params[i].sizes().vec(), sh.bucket.offsets[i]});
      u.padded = sh.bucket.padded;
      u.begin = mine(sh).begin;
      u.values = sh.param.detach();
      ParamState st;
      if (readParamState(*opt_, sh.param, st)) u.optimizer_step = st.step, u.state = st.tensors;
      out.push_back(std::move(u));
    }
    return out;
  }

  void forEachUnitOnHost(
      bool main,
      const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) override {
    sharded_->forEachUnitOnHost(main, unit_of_bucket_, fn);  // in bucket order
  }

  torch::ScalarType gathered_dtype_;
  bool prefetch_;
  std::function<void(std::shared_ptr<models::LayerHooks>)> set_layer_hooks_;
  std::shared_ptr<ShardedParameters> sharded_;  // installed as the model's layer hooks
  std::vector<size_t> unit_of_bucket_;
};

}  // namespace

std::unique_ptr<ParallelPlan> makeZero3Plan(PlanSetup setup) {
  return std::make_unique<Zero3Plan>(setup);
}

}  // namespace ltrain::distributed
