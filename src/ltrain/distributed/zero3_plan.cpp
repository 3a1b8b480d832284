// dist.zero 3: the optimizer state, the gradients and the parameters sharded across ranks. Each
// bucket is one unit of layers (dist.fsdp_unit), whose flat slice is all a rank keeps of its
// parameters: sharded_parameters.h gathers a unit around its forward and backward, in the compute
// dtype (bf16 under train.precision bf16, the fp32 values staying in the slices). A model built
// deferred is made here unit by unit, so the whole model never exists on a rank.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "ltrain/common/tensor_storage.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/sharded_parameters.h"
#include "ltrain/distributed/zero_sharded_optimizer.h"
#include "ltrain/optim/fused.h"

namespace ltrain::distributed {
namespace {

// Which unit each layer, and each parameter, belongs to; and each unit's frozen parameters (a LoRA
// run's base), which no bucket holds: laid out flat as a bucket is, a layout per dtype (a base
// held in bf16 keeps its norms in fp32), in the order the layers hold them, to be sharded and
// gathered with the unit's own and never reduced.
struct Units {
  std::vector<int64_t> of_layer;
  std::map<const c10::TensorImpl*, int64_t> of_param;
  std::vector<std::vector<BucketLayout>> frozen;          // per unit, per dtype
  std::vector<std::vector<torch::Tensor>> frozen_slices;  // this rank's slice of each, once made
  int64_t rank = 0, world = 1;

  static Units of(const PlanSetup& s) {
    Units u;
    u.rank = s.pg->runtime().rank, u.world = s.pg->runtime().world_size;
    u.of_layer = unitsOfLayers(s.layer_params, s.dist.fsdp_unit);
    const int64_t count =
        u.of_layer.empty() ? 0 : *std::max_element(u.of_layer.begin(), u.of_layer.end()) + 1;
    u.frozen.resize(static_cast<size_t>(count));
    u.frozen_slices.resize(u.frozen.size());
    for (size_t l = 0; l < s.layer_params.size(); ++l)
      for (const auto& p : s.layer_params[l]) {
        if (!u.of_param.emplace(p.unsafeGetTensorImpl(), u.of_layer[l]).second) continue;
        if (p.requires_grad()) continue;
        auto& layouts = u.frozen[static_cast<size_t>(u.of_layer[l])];
        auto f = std::find_if(layouts.begin(), layouts.end(), [&](const BucketLayout& b) {
          return b.params.front().scalar_type() == p.scalar_type();
        });
        if (f == layouts.end()) f = layouts.insert(layouts.end(), BucketLayout{});
        f->params.push_back(p), f->offsets.push_back(f->padded), f->padded += p.numel();
      }
    for (auto& layouts : u.frozen)
      for (auto& f : layouts) f.padded = (f.padded + u.world - 1) / u.world * u.world;
    return u;
  }
  size_t count() const { return frozen.size(); }
  int64_t ofParam(const torch::Tensor& p, const std::string& name) const {
    auto it = of_param.find(p.unsafeGetTensorImpl());
    if (it == of_param.end())
      throw std::logic_error("dist.zero 3: parameter " + name + " is in no layer");
    return it->second;
  }
};

// This rank's slice of a layout whose parameters hold their whole values.
torch::Tensor wholeSlice(const BucketLayout& l, const ElementRange& window) {
  torch::NoGradGuard no_grad;
  auto flat = torch::zeros({l.padded}, l.params.front().options());
  for (size_t i = 0; i < l.params.size(); ++i)
    flat.narrow(0, l.offsets[i], l.params[i].numel()).copy_(l.params[i].detach().reshape(-1));
  return flat.narrow(0, window.begin, window.size()).clone();
}

// A deferred build's unit: its values made here, a layer at a time, into one flat buffer per
// layout (the bucket's, the frozen parameters'), of which this rank keeps its slices; the buffers
// go at once, and the parameters have no memory again. Parameters made after the build (LoRA's
// adapters) keep their values where the source has none of its own (a checkpoint has).
std::vector<torch::Tensor> filledSlices(const std::vector<const BucketLayout*>& layouts,
                                        int64_t unit, const Units& units, const PlanSetup& setup) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flats;
  std::map<const c10::TensorImpl*, ElementRange> wanted_of;  // in each parameter's own indices
  for (const auto* l : layouts) {
    auto flat = torch::zeros({l->padded}, l->params.front().options());
    const auto window = rankSlice(l->padded, units.rank, units.world);
    for (size_t i = 0; i < l->params.size(); ++i) {
      const auto& p = l->params[i];
      auto view = flat.narrow(0, l->offsets[i], p.numel()).view(p.sizes());
      if (hasStorage(p)) view.copy_(p.detach());
      p.set_data(view);
      wanted_of[p.unsafeGetTensorImpl()] = overlap(window, l->offsets[i], p.numel());
    }
    flats.push_back(std::move(flat));
  }
  auto wanted = [&](const torch::Tensor& p) {
    auto it = wanted_of.find(p.unsafeGetTensorImpl());
    if (it == wanted_of.end()) return std::pair<int64_t, int64_t>{0, 0};
    return std::pair<int64_t, int64_t>{it->second.begin, it->second.end};
  };
  for (size_t l = 0; l < units.of_layer.size(); ++l)
    if (units.of_layer[l] == unit) setup.fill_layer(l, wanted);
  std::vector<torch::Tensor> slices;
  for (size_t k = 0; k < layouts.size(); ++k) {
    const auto window = rankSlice(layouts[k]->padded, units.rank, units.world);
    slices.push_back(flats[k].narrow(0, window.begin, window.size()).clone());
    for (const auto& p : layouts[k]->params) p.set_data(storageless(p.sizes(), p.options()));
  }
  return slices;
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
              o.on_bucket_grads = [this](size_t b) { sharded_->gradientsIn(unit_of_bucket_[b]); };
            },
            s.fill_layer ? FirstSlice([&](const Shard& sh, const ElementRange&) {
              // The unit's frozen parameters are made with its trainable ones, kept for later.
              const int64_t u = units.of_param.at(sh.bucket.params.front().unsafeGetTensorImpl());
              std::vector<const BucketLayout*> layouts{&sh.bucket};
              for (const auto& f : units.frozen[static_cast<size_t>(u)]) layouts.push_back(&f);
              auto slices = filledSlices(layouts, u, units, s);
              units.frozen_slices[static_cast<size_t>(u)].assign(slices.begin() + 1, slices.end());
              return slices.front();
            })
                         : nullptr),
        gathered_dtype_(s.compute_dtype),
        prefetch_(s.dist.fsdp_prefetch),
        set_layer_hooks_(s.set_layer_hooks) {
    shardParameters(units, s);
  }

  // Each bucket is one unit's trainable parameters, its frozen ones (if any) another layout: their
  // flat slices become the only copy of its parameters this rank keeps.
  void shardParameters(Units& units, const PlanSetup& s) {
    std::map<const c10::TensorImpl*, std::string> names;
    for (const auto& p : model_->named_parameters())
      names.emplace(p.value().unsafeGetTensorImpl(), p.key());
    std::vector<ShardedParameters::UnitInit> init(units.count());
    bucket_of_unit_.assign(units.count(), -1);
    for (size_t b = 0; b < shards_.size(); ++b) {
      const auto u = static_cast<size_t>(
          units.of_param.at(shards_[b].bucket.params.front().unsafeGetTensorImpl()));
      unit_of_bucket_.push_back(u);
      bucket_of_unit_[u] = static_cast<int64_t>(b);
      init[u].pieces.push_back({shards_[b].bucket, shards_[b].param});
    }
    for (size_t u = 0; u < units.count(); ++u) {
      const auto& layouts = units.frozen[u];
      auto& slices = units.frozen_slices[u];
      if (!layouts.empty() && slices.empty()) {  // a unit of frozen parameters only
        std::vector<const BucketLayout*> all;
        for (const auto& f : layouts) all.push_back(&f);
        if (s.fill_layer)
          slices = filledSlices(all, static_cast<int64_t>(u), units, s);
        else
          for (const auto* f : all)
            slices.push_back(wholeSlice(*f, rankSlice(f->padded, rank_, world_)));
      }
      for (size_t k = 0; k < layouts.size(); ++k) {
        const auto& frozen = layouts[k];
        init[u].pieces.push_back({frozen, slices[k]});
        init[u].frozen = true;
        UnitShard shard;  // no optimizer state
        for (size_t i = 0; i < frozen.params.size(); ++i)
          shard.params.push_back({names.at(frozen.params[i].unsafeGetTensorImpl()),
                                  frozen.params[i].sizes().vec(), frozen.offsets[i]});
        shard.padded = frozen.padded;
        shard.begin = rankSlice(frozen.padded, rank_, world_).begin;
        shard.values = slices[k];
        frozen_.push_back({u, std::move(shard)});
      }
      if (init[u].pieces.empty()) throw std::logic_error("dist.zero 3: a unit without parameters");
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

  // Unit by unit, its trainable piece and then its frozen ones, as the parameters' pieces come.
  std::vector<UnitShard> unitShards() override {
    optim::syncStepsToHost(*opt_);
    const auto names = reducer_->bucketParameterNames();
    std::vector<UnitShard> out;
    auto frozen = frozen_.begin();
    for (size_t u = 0; u < bucket_of_unit_.size(); ++u) {
      if (const int64_t b = bucket_of_unit_[u]; b >= 0) {
        const auto& sh = shards_[static_cast<size_t>(b)];
        UnitShard us;
        for (size_t i = 0; i < sh.bucket.params.size(); ++i)
          us.params.push_back({names[static_cast<size_t>(b)][i], sh.bucket.params[i].sizes().vec(),
                               sh.bucket.offsets[i]});
        us.padded = sh.bucket.padded;
        us.begin = mine(sh).begin;
        us.values = sh.param.detach();
        ParamState st;
        if (readParamState(*opt_, sh.param, st)) us.optimizer_step = st.step, us.state = st.tensors;
        out.push_back(std::move(us));
      }
      for (; frozen != frozen_.end() && frozen->first == u; ++frozen) out.push_back(frozen->second);
    }
    return out;
  }

  void forEachUnitOnHost(
      bool main,
      const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) override {
    std::vector<size_t> order(bucket_of_unit_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    sharded_->forEachUnitOnHost(main, order, fn);  // in unitShards' order
  }

  torch::ScalarType gathered_dtype_;
  bool prefetch_;
  std::function<void(std::shared_ptr<models::LayerHooks>)> set_layer_hooks_;
  std::shared_ptr<ShardedParameters> sharded_;  // installed as the model's layer hooks
  std::vector<size_t> unit_of_bucket_;
  std::vector<int64_t> bucket_of_unit_;  // -1: a unit of frozen parameters only
  // Each unit's frozen pieces as a checkpoint lists them, by unit.
  std::vector<std::pair<size_t, UnitShard>> frozen_;
};

}  // namespace

std::unique_ptr<ParallelPlan> makeZero3Plan(PlanSetup setup) {
  return std::make_unique<Zero3Plan>(setup);
}

}  // namespace ltrain::distributed
