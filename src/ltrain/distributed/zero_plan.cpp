// The plan of ZeRO stages 1, 2 and 3 (dist.zero: 1, 2, 3): the optimizer state is sharded
// across ranks, under stage 2 the gradients as well (the reducer keeps only each bucket's reduced
// slice: ReducerOptions::release_after_reduce), and under stage 3 the parameters too: each
// bucket is then one unit of layers, whose flat slice is all a rank keeps of its parameters
// (sharded_parameters.h gathers them around each unit's forward and backward).
// The bucket reducer reduce-scatters each bucket, so each rank receives the averaged gradients of
// its 1/world slice; it updates that slice of the flattened parameters with its own optimizer,
// and an all-gather gives every rank all updated parameters (stage 3: the next forward's). Per
// element this is the same arithmetic as plain DDP, so the weights agree to rounding; the optimizer
// state per rank is about 1/world of it.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "ltrain/common/tensor_storage.h"
#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/sharded_parameters.h"
#include "ltrain/optim/fused.h"
#include "ltrain/optim/optimizer.h"

namespace ltrain::distributed {
namespace {

class ZeroPlan final : public ParallelPlan, private PlanState {
 public:
  explicit ZeroPlan(PlanSetup s)
      : model_(std::move(s.model)),
        pg_(*s.pg),
        rank_(pg_.runtime().rank),
        world_(pg_.runtime().world_size),
        stage_(s.dist.zero),
        make_optimizer_(std::move(s.make_optimizer)),
        extra_count_(s.extra_scalars),
        fill_extras_(std::move(s.fill_extras)),
        norm_group_(s.norm_group),
        norm_weight_(s.norm_weight) {
    ReducerOptions o;
    o.bucket_cap_mb = s.dist.bucket_cap_mb;
    if (s.fill_layer && stage_ != 3)
      throw std::logic_error("a model built deferred needs dist.zero 3");
    o.broadcast_parameters = !s.fill_layer;  // deferred: made alike on every rank below
    o.collective = ReducerOptions::Collective::kReduceScatter;
    o.release_after_reduce = stage_ >= 2;
    // Units gathered in bf16 (stage 3 under bf16): gradients reduce in dist.reduce_dtype, into
    // the fp32 slices the optimizer steps.
    if (stage_ == 3) gathered_dtype_ = s.compute_dtype;
    if (stage_ == 3 && s.compute_dtype == torch::kBFloat16 &&
        s.dist.reduce_dtype == config::ReduceDtype::kBf16)
      o.reduce_dtype = torch::kBFloat16;
    auto tensors = ReducedTensors::of(*model_);
    std::vector<int64_t> unit_of_layer;
    std::map<const c10::TensorImpl*, int64_t> unit_of;  // stage 3: each parameter's unit
    if (stage_ == 3) {
      unit_of_layer = unitsOfLayers(s.layer_params, s.dist.fsdp_unit);
      for (size_t l = 0; l < s.layer_params.size(); ++l)
        for (const auto& p : s.layer_params[l]) unit_of[p.unsafeGetTensorImpl()] = unit_of_layer[l];
      for (const auto& [name, p] : tensors.params) {
        auto it = unit_of.find(p.unsafeGetTensorImpl());
        if (it == unit_of.end())
          throw std::logic_error("dist.zero 3: parameter " + name + " is in no layer");
        o.groups.push_back(it->second);
      }
      o.on_bucket_grads = [this](size_t b) { sharded_->release(unit_of_bucket_[b]); };
    }
    reducer_ = std::make_unique<BucketReducer>(std::move(tensors), pg_, o);
    has_buffers_ = !model_->buffers().empty();
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> slices, masks;
    for (size_t b = 0; b < reducer_->bucketCount(); ++b) {
      Shard sh{reducer_->layout(b), {}, {}};
      const auto& first = sh.bucket.params.front();
      if (sh.bucket.shard.scalar_type() != first.scalar_type() && !o.reduce_dtype)
        throw std::logic_error("ZeRO-1 gradients must travel in the parameters' dtype");
      auto slice = s.fill_layer ? filledSlice(sh, unit_of.at(first.unsafeGetTensorImpl()),
                                              unit_of_layer, s.fill_layer)
                                : flatSlice(sh, sh.bucket.params);
      sh.param = slice.set_requires_grad(true);
      // The optimizer reads the reduce-scatter's output in place: no copy per step; reduced in
      // another dtype, it is cast into a gradient of the slice's own after each backward.
      if (sh.bucket.shard.scalar_type() != sh.param.scalar_type())
        sh.grad = torch::zeros_like(sh.param);
      sh.param.mutable_grad() = sh.grad.defined() ? sh.grad : sh.bucket.shard;
      slices.push_back(sh.param);
      // Which elements of the slice are of matrices, a byte each: a mask the optimizer keeps
      // (decay on matrices) costs a quarter of the slice, not a whole fp32 copy of it.
      std::vector<torch::Tensor> matrix;
      for (const auto& p : sh.bucket.params)
        matrix.push_back(torch::full(p.sizes(), p.dim() >= 2, p.options().dtype(torch::kBool)));
      masks.push_back(flatSlice(sh, matrix));
      shards_.push_back(std::move(sh));
    }
    opt_ = make_optimizer_(slices, masks);
    if (stage_ == 3) shardParameters(unit_of, std::move(unit_of_layer), s);
  }

  ~ZeroPlan() override {
    if (set_layer_hooks_) set_layer_hooks_(nullptr);
  }

  void prepare(const MicroStep& m) override {
    if (m.last_backward_of_stage >= 0) return;  // no pipeline under ZeRO
    if (m.first)
      for (auto& p : model_->parameters()) p.mutable_grad().reset();
    reducer_->prepareBackward(m.last);
    if (has_buffers_) reducer_->broadcastBuffers();
  }

  torch::Tensor finishGradients(const torch::Tensor& unscale) override {
    reducer_->finishBackward();
    if (sharded_) sharded_->releaseAll();  // a unit whose gradients never all came
    for (auto& s : shards_)
      if (s.grad.defined()) s.grad.copy_(s.bucket.shard);
    auto found = unscaleAndFindInf(shardGradients(), unscale);
    std::vector<at::Tensor> io{found};
    pg_.wait(pg_.allreduce(io));  // a rank's inf is every rank's
    return io[0].clamp_max(1.0);
  }

  double gradNorm() override { return globalNorm().item<double>(); }

  void step(const OptimizerStep& s) override {
    if (s.clip_grad_norm > 0) clipToNorm(shardGradients(), globalNorm(), s.clip_grad_norm);
    optim::setLearningRate(*opt_, s.lr);
    optim::setFoundInf(*opt_, s.found_inf);
    opt_->step();
    if (sharded_)
      reduceExtras();  // the next forward gathers the parameters
    else
      allGatherParameters();
  }

  void zeroGradients() override {
    torch::NoGradGuard no_grad;
    for (auto& s : shards_) {
      s.bucket.shard.zero_();
      if (s.grad.defined()) s.grad.zero_();
    }
    // The step's extras still reach every rank: a skipped step gathers nothing else.
    if (sharded_)
      reduceExtras();
    else
      allGatherParameters();
  }

  StepReport lastStep() const override {
    StepReport r;
    r.collectives = reducer_->lastStep().collectives;
    for (double w : reducer_->lastStep().bucket_wait_s) r.wait_s += w;
    r.extras = extras_;
    return r;
  }

  PlanSummary summary() const override {
    PlanSummary r;
    r.optimizer_state_bytes = distributed::optimizerStateBytes(*opt_);
    auto grads = reducer_->bufferTensors();  // the slices are the flat parameters' .grad too
    for (const auto& p : model_->parameters()) grads.push_back(p.grad());
    for (const auto& sh : shards_) grads.push_back(sh.grad);
    r.gradient_bytes = distinctStorageBytes(grads);
    if (sharded_) {
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
    } else {
      auto params = model_->parameters();  // and the flat slices the optimizer steps
      for (const auto& sh : shards_) params.push_back(sh.param);
      r.parameter_bytes = distinctStorageBytes(params);
      r.description = fmt::format("on {} with {} gradient buckets, ZeRO-{}", pg_.backendName(),
                                  reducer_->bucketCount(), stage_);
    }
    return r;
  }

  PlanState& state() override { return *this; }

 private:
  void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>& write) override {
    optim::syncStepsToHost(*opt_);
    auto whole = make_optimizer_(model_->parameters(), {});
    gatherStateInto(*whole);
    if (!sharded_) {
      if (rank_ == 0) write(*whole);
      return;
    }
    sharded_->withWholeOnHost(rank_ == 0, [&] { write(*whole); });
  }

  void loadWholeOptimizer(const torch::optim::Optimizer& whole) override;
  void loadOptimizerRanges(const RangeSource& source) override;

  std::vector<UnitShard> unitShards() override;

  void forEachUnitOnHost(
      bool main,
      const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) override {
    if (sharded_) sharded_->forEachUnitOnHost(main, unit_of_bucket_, fn);  // in bucket order
  }

  struct Shard {
    BucketLayout bucket;
    torch::Tensor param;  // this rank's slice of the flattened bucket, updated by opt_
    torch::Tensor grad;   // its gradient where the bucket reduces in another dtype
  };

  // The norm over every rank's slices: a 0-d double on the device, summed by a collective.
  torch::Tensor globalNorm() {
    auto sum = (norm_weight_ ? weightedSquares() : sumOfAllSquares(shardGradients())).reshape({1});
    std::vector<at::Tensor> io{sum};
    pg_.wait(pg_.allreduce(io));
    if (norm_group_) norm_group_->wait(norm_group_->allreduce(io));  // the other parts' squares
    return io[0].reshape({}).sqrt();
  }

  // The squares of this rank's slices, each parameter's piece of them weighted by norm_weight.
  torch::Tensor weightedSquares() const {
    std::vector<torch::Tensor> pieces;
    std::vector<double> weights;
    for (const auto& s : shards_) {
      const auto& g = s.grad.defined() ? s.grad : s.bucket.shard;
      const int64_t n = s.bucket.padded / world_, lo = rank_ * n;
      for (size_t i = 0; i < s.bucket.params.size(); ++i) {
        const auto& p = s.bucket.params[i];
        const int64_t off = s.bucket.offsets[i];
        const int64_t b = std::clamp(lo - off, int64_t{0}, p.numel());
        const int64_t e = std::clamp(lo + n - off, int64_t{0}, p.numel());
        if (e <= b) continue;
        pieces.push_back(g.narrow(0, off + b - lo, e - b));
        weights.push_back(norm_weight_(p));
      }
    }
    return sumOfAllSquares(pieces, weights);
  }

  std::vector<torch::Tensor> shardGradients() const {
    std::vector<torch::Tensor> out;
    for (const auto& s : shards_) out.push_back(s.grad.defined() ? s.grad : s.bucket.shard);
    return out;
  }

  // This rank's slice of the flattened, zero-padded concatenation of `per_param` (one tensor per
  // parameter of the bucket, each of that parameter's size, all of one dtype), on their device.
  torch::Tensor flatSlice(const Shard& s, const std::vector<torch::Tensor>& per_param) const {
    auto flat = torch::zeros({s.bucket.padded}, per_param.front().options());
    for (size_t i = 0; i < per_param.size(); ++i)
      flat.narrow(0, s.bucket.offsets[i], per_param[i].numel()).copy_(per_param[i].reshape(-1));
    const int64_t n = s.bucket.padded / world_;
    return flat.narrow(0, rank_ * n, n).clone();
  }

  // A deferred build's unit: its values made here, a layer at a time, into one flat buffer of
  // which this rank keeps its slice; the buffer goes at once, and the parameters have no memory
  // again (the whole model never exists on this rank).
  torch::Tensor filledSlice(const Shard& s, int64_t unit, const std::vector<int64_t>& unit_of_layer,
                            const decltype(PlanSetup::fill_layer)& fill_layer) const {
    torch::NoGradGuard no_grad;
    const auto& first = s.bucket.params.front();
    auto flat = torch::zeros({s.bucket.padded}, first.options());
    std::map<const c10::TensorImpl*, int64_t> offset_of;
    for (size_t i = 0; i < s.bucket.params.size(); ++i) {
      auto& p = s.bucket.params[i];
      p.set_data(flat.narrow(0, s.bucket.offsets[i], p.numel()).view(p.sizes()));
      offset_of[p.unsafeGetTensorImpl()] = s.bucket.offsets[i];
    }
    const int64_t n = s.bucket.padded / world_;
    // Of each parameter, the elements that fall into this rank's slice.
    auto wanted = [&, lo = rank_ * n, hi = (rank_ + 1) * n](const torch::Tensor& p) {
      auto it = offset_of.find(p.unsafeGetTensorImpl());
      if (it == offset_of.end()) return std::pair<int64_t, int64_t>{0, 0};
      const int64_t b = std::clamp(lo - it->second, int64_t{0}, p.numel());
      const int64_t e = std::clamp(hi - it->second, int64_t{0}, p.numel());
      return std::pair<int64_t, int64_t>{b, e};
    };
    for (size_t l = 0; l < unit_of_layer.size(); ++l)
      if (unit_of_layer[l] == unit) fill_layer(l, wanted);
    auto slice = flat.narrow(0, rank_ * n, n).clone();
    for (const auto& p : s.bucket.params) p.set_data(storageless(p.sizes(), p.options()));
    return slice;
  }

  void allGatherParameters();
  void reduceExtras();
  void shardParameters(const std::map<const c10::TensorImpl*, int64_t>& unit_of,
                       std::vector<int64_t> unit_of_layer, const PlanSetup& s);
  void gatherStateInto(torch::optim::Optimizer& whole);

  std::shared_ptr<torch::nn::Module> model_;
  ProcessGroup& pg_;
  int64_t rank_, world_;
  int64_t stage_;  // 1, 2 or 3
  ParallelPlan::MakeOptimizer make_optimizer_;
  size_t extra_count_;
  std::function<void(float*)> fill_extras_;
  std::unique_ptr<BucketReducer> reducer_;
  std::vector<Shard> shards_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  torch::Tensor extras_;
  bool has_buffers_ = false;
  // Stage 3: the sharded parameters (installed as the model's layer hooks) and each bucket's unit.
  std::shared_ptr<ShardedParameters> sharded_;
  std::vector<size_t> unit_of_bucket_;
  std::function<void(std::shared_ptr<models::LayerHooks>)> set_layer_hooks_;
  bool prefetch_ = false;
  torch::ScalarType gathered_dtype_ = torch::kFloat;
  ProcessGroup* norm_group_;
  std::function<double(const torch::Tensor&)> norm_weight_;
};

// Each bucket is one unit: its flat slice becomes the only copy of its parameters this rank
// keeps.
void ZeroPlan::shardParameters(const std::map<const c10::TensorImpl*, int64_t>& unit_of,
                               std::vector<int64_t> unit_of_layer, const PlanSetup& s) {
  const int64_t units =
      unit_of_layer.empty() ? 0 : *std::max_element(unit_of_layer.begin(), unit_of_layer.end()) + 1;
  if (units != static_cast<int64_t>(shards_.size()))
    throw std::logic_error("dist.zero 3: a unit without trainable parameters");
  std::vector<ShardedParameters::UnitInit> init(shards_.size());
  for (size_t b = 0; b < shards_.size(); ++b) {
    const auto u =
        static_cast<size_t>(unit_of.at(shards_[b].bucket.params.front().unsafeGetTensorImpl()));
    unit_of_bucket_.push_back(u);
    init[u] = {shards_[b].bucket, shards_[b].param};
  }
  prefetch_ = s.dist.fsdp_prefetch;
  sharded_ = std::make_shared<ShardedParameters>(pg_, std::move(init), std::move(unit_of_layer),
                                                 prefetch_, gathered_dtype_);
  set_layer_hooks_ = s.set_layer_hooks;
  if (!set_layer_hooks_) throw std::logic_error("dist.zero 3 needs the model's layer hooks");
  set_layer_hooks_(sharded_);
}

std::vector<UnitShard> ZeroPlan::unitShards() {
  if (!sharded_) return {};
  optim::syncStepsToHost(*opt_);
  const auto names = reducer_->bucketParameterNames();
  std::vector<UnitShard> out;
  for (size_t b = 0; b < shards_.size(); ++b) {
    const auto& sh = shards_[b];
    UnitShard u;
    for (size_t i = 0; i < sh.bucket.params.size(); ++i)
      u.params.push_back({names[b][i], sh.bucket.params[i].sizes().vec(), sh.bucket.offsets[i]});
    u.padded = sh.bucket.padded;
    u.begin = rank_ * (sh.bucket.padded / world_);
    u.values = sh.param.detach();
    ParamState st;
    if (readParamState(*opt_, sh.param, st)) u.optimizer_step = st.step, u.state = st.tensors;
    out.push_back(std::move(u));
  }
  return out;
}

// Stage 3 has no all-gather after the step for the extras to ride on: they get an all-reduce.
void ZeroPlan::reduceExtras() {
  if (extra_count_ == 0) return;
  std::vector<float> v(extra_count_, 0.f);
  if (fill_extras_) fill_extras_(v.data());
  auto t = torch::empty({static_cast<int64_t>(v.size())}, shards_.front().param.detach().options());
  for (size_t i = 0; i < v.size(); ++i) t[static_cast<int64_t>(i)].fill_(v[i]);
  std::vector<at::Tensor> io{t};
  pg_.wait(pg_.allreduce(io));
  extras_ = io[0];
}

// Every bucket's all-gather is started before any is waited on; the extras ride on the last one
// (each rank's row carries its values, summed over the rows afterwards).
void ZeroPlan::allGatherParameters() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> gathered;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t b = 0; b < shards_.size(); ++b) {
    auto in = shards_[b].param.detach();
    if (b + 1 == shards_.size() && extra_count_ > 0) {
      std::vector<float> v(extra_count_, 0.f);
      if (fill_extras_) fill_extras_(v.data());
      auto extra = torch::empty({static_cast<int64_t>(v.size())}, in.options());
      for (size_t i = 0; i < v.size(); ++i) extra[static_cast<int64_t>(i)].fill_(v[i]);
      in = torch::cat({in, extra});
    }
    gathered.push_back(torch::empty({world_ * in.numel()}, in.options()));
    works.push_back(pg_.allgatherInto(gathered.back(), in));
  }
  for (size_t b = 0; b < shards_.size(); ++b) {
    pg_.wait(works[b]);
    const auto& s = shards_[b];
    const int64_t n = s.bucket.padded / world_;
    auto rows = gathered[b].view({world_, -1});
    if (rows.size(1) > n) extras_ = rows.narrow(1, n, static_cast<int64_t>(extra_count_)).sum(0);
    auto flat = rows.narrow(1, 0, n).reshape(-1);
    for (size_t i = 0; i < s.bucket.params.size(); ++i) {
      auto& p = s.bucket.params[i];
      p.copy_(flat.narrow(0, s.bucket.offsets[i], p.numel()).view_as(p));
    }
  }
}

// Gathered on rank 0 only, shard by shard into host memory: no rank ever holds more than one
// bucket's worth of the whole state on its device.
void ZeroPlan::gatherStateInto(torch::optim::Optimizer& whole) {
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

void ZeroPlan::loadWholeOptimizer(const torch::optim::Optimizer& whole) {
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
void ZeroPlan::loadOptimizerRanges(const RangeSource& source) {
  torch::NoGradGuard no_grad;
  const auto names = reducer_->bucketParameterNames();
  for (size_t b = 0; b < shards_.size(); ++b) {
    const auto& s = shards_[b];
    const int64_t n = s.bucket.padded / world_, lo = rank_ * n, hi = lo + n;
    ParamState st;
    std::vector<std::string> state_names;
    for (const auto& name : names[b]) {
      const auto& here = source.state_names(name);
      if (here.empty()) continue;
      if (state_names.empty()) state_names = here, st.step = source.step(name);
    }
    for (const auto& sname : state_names) {
      auto slice = torch::zeros({n}, s.param.detach().options());
      for (size_t i = 0; i < s.bucket.params.size(); ++i) {
        const int64_t off = s.bucket.offsets[i], numel = s.bucket.params[i].numel();
        const int64_t begin = std::clamp(lo - off, int64_t{0}, numel);
        const int64_t end = std::clamp(hi - off, int64_t{0}, numel);
        const auto& has = source.state_names(names[b][i]);
        if (end <= begin || std::find(has.begin(), has.end(), sname) == has.end()) continue;
        slice.narrow(0, off + begin - lo, end - begin)
            .copy_(source.read(names[b][i], sname, begin, end));
      }
      st.tensors.emplace_back(sname, slice);
    }
    if (!st.tensors.empty()) writeParamState(*opt_, s.param, st);
  }
}

}  // namespace

std::unique_ptr<ParallelPlan> makeZeroPlan(PlanSetup setup) {
  return std::make_unique<ZeroPlan>(std::move(setup));
}

}  // namespace ltrain::distributed
