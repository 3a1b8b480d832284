// dist.tensor_parallel N: a 2-D mesh of world = dp x N ranks. Ranks [k N, (k + 1) N) form a
// tensor-parallel group (one host: they talk in every layer's forward and backward); the ranks
// holding the same part, one per group, form a data-parallel group, over which DDP (ddp_plan.cpp)
// averages the gradients of this rank's part. Each rank's values are its part of the
// one-process model (models/tensor_parallel.h); the optimizer steps that part.
// Clipping takes the norm over the whole model: the split parameters' squares summed over the
// tensor-parallel group, the replicated ones (equal on every rank of it) counted once.
// Checkpoints are sharded checkpoints of the whole model (checkpoint/sharded_checkpoint.h): each
// parameter gathered over the group in turn and every rank of the world writing its 1/world of it,
// so that they resume on any other split, and generate, export and evaluate read them as any
// other run's.
#include <fmt/format.h>
#include <torch/torch.h>

#include <set>
#include <stdexcept>

#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/models/tensor_parallel.h"
#include "ltrain/optim/fused.h"

namespace ltrain::distributed {
namespace {

// The model's collectives, over the tensor-parallel group.
class GroupCollectives final : public models::TensorParallelGroup {
 public:
  explicit GroupCollectives(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {}
  void allreduceSum(torch::Tensor& t) override {
    std::vector<at::Tensor> io{t};
    pg_->wait(pg_->allreduce(io));
  }
  torch::Tensor allgather(const torch::Tensor& t) override {
    auto in = t.contiguous().view(-1);
    auto out = torch::empty({pg_->runtime().world_size * in.numel()}, in.options());
    pg_->wait(pg_->allgatherInto(out, in));
    auto shape = t.sizes().vec();
    shape.insert(shape.begin(), pg_->runtime().world_size);
    return out.view(shape);
  }

 private:
  std::shared_ptr<ProcessGroup> pg_;
};

class TensorParallelPlan final : public ParallelPlan, private PlanState {
 public:
  explicit TensorParallelPlan(PlanSetup s)
      : model_(std::dynamic_pointer_cast<models::ClassifierImpl>(s.model)),
        tp_(model_->tp),
        world_pg_(s.pg),
        make_optimizer_(s.make_optimizer),
        fill_extras_(s.fill_extras),
        extra_count_(s.extra_scalars) {
    const int64_t n = tp_->size, world = s.pg->runtime().world_size, rank = s.pg->runtime().rank;
    if (world % n != 0)
      throw std::logic_error("tensor parallel: the world is not a multiple of the group");
    std::vector<int64_t> tp_ranks, dp_ranks;
    for (int64_t i = 0; i < n; ++i) tp_ranks.push_back(rank / n * n + i);
    for (int64_t i = rank % n; i < world; i += n) dp_ranks.push_back(i);
    tp_pg_ = s.pg->subgroupOf(fmt::format("tp{}", rank / n), tp_ranks);
    if (dp_ranks.size() > 1) dp_pg_ = s.pg->subgroupOf(fmt::format("dp{}", rank % n), dp_ranks);
    dp_ = static_cast<int64_t>(dp_ranks.size());
    tp_->group = std::make_shared<GroupCollectives>(tp_pg_);
    tp_->fill(model_);
    for (const auto& p : model_->named_parameters())
      if (tp_->split(p.key()).dim < 0) replicated_.insert(p.value().unsafeGetTensorImpl());
    // DDP over the data-parallel group (none: one replica); the stop vote is reduced here.
    s.pg = dp_pg_.get();
    s.extra_scalars = 0, s.fill_extras = nullptr;
    inner_ = makeDdpPlan(std::move(s));
  }

  void prepare(const MicroStep& m) override { inner_->prepare(m); }

  // One all-reduce over the world carries the non-finite flag (a split gradient may overflow on
  // one rank of a group only: every rank skips) and the stop vote.
  torch::Tensor finishGradients(const torch::Tensor& unscale) override {
    const auto found = inner_->finishGradients(unscale);
    std::vector<float> extras(extra_count_, 0.f);
    if (fill_extras_ && extra_count_ > 0) fill_extras_(extras.data());
    auto t = torch::cat({found.reshape({1}).to(torch::kFloat),
                         torch::tensor(extras, torch::kFloat).to(found.device())});
    std::vector<at::Tensor> io{t};
    world_pg_->wait(world_pg_->allreduce(io));
    extras_ = t.narrow(0, 1, static_cast<int64_t>(extra_count_));
    return t.narrow(0, 0, 1).gt(0).to(found.scalar_type()).reshape(found.sizes());
  }

  double gradNorm() override { return std::sqrt(normSquared().item<double>()); }

  void step(const OptimizerStep& s) override {
    if (s.clip_grad_norm > 0) clipToNorm(gradients(), normSquared().sqrt(), s.clip_grad_norm);
    inner_->step({s.lr, 0.0, s.found_inf});
  }

  void zeroGradients() override { inner_->zeroGradients(); }

  StepReport lastStep() const override {
    auto r = inner_->lastStep();
    r.extras = extras_;
    return r;
  }

  PlanSummary summary() const override {
    auto r = inner_->summary();
    r.description = fmt::format("tensor parallel {} x data parallel {}{}", tp_->size, dp_,
                                r.description.empty() ? "" : " (DDP " + r.description + ")");
    return r;
  }

  PlanState& state() override { return *this; }

 private:
  // The plan's checkpoints are always sharded (unitShards), read back by ranges.
  void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>&) override {
    throw std::logic_error("tensor parallel: checkpoints are sharded");
  }
  void loadWholeOptimizer(const torch::optim::Optimizer&) override {
    throw std::logic_error("tensor parallel: checkpoints are read by ranges");
  }

  // One unit per parameter, under its whole name and shape; this rank's 1/world of it.
  std::vector<UnitShard> unitShards() override {
    std::vector<UnitShard> out;
    inner_->state().saveWholeOptimizer([&](torch::optim::Optimizer& opt) {
      optim::syncStepsToHost(opt);
      for (const auto& p : model_->named_parameters()) {
        UnitShard u;
        const auto& shape = tp_->split(p.key()).whole_shape;
        const int64_t numel = c10::multiply_integers(shape);
        const int64_t world = world_pg_->runtime().world_size;
        u.params.push_back({p.key(), shape, 0});
        u.padded = (numel + world - 1) / world * world;
        u.begin = world_pg_->runtime().rank * (u.padded / world);
        u.values = mySlice(u, tp_->gather(p.key(), p.value().detach()));
        ParamState st;
        if (readParamState(opt, p.value(), st)) {
          u.optimizer_step = st.step;
          for (const auto& [name, t] : st.tensors)
            u.state.emplace_back(name, mySlice(u, tp_->gather(p.key(), t)));
        }
        out.push_back(std::move(u));
      }
    });
    return out;
  }

  void forEachUnitOnHost(
      bool main,
      const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) override {
    size_t i = 0;
    for (const auto& p : model_->named_parameters()) {
      auto whole = tp_->gather(p.key(), p.value().detach());
      if (main) fn(i, {whole.cpu()});
      ++i;
    }
  }

  // Each parameter's optimizer state read whole, one at a time, and this rank's part kept.
  void loadOptimizerRanges(const RangeSource& source) override {
    torch::NoGradGuard no_grad;
    auto parts = make_optimizer_(model_->parameters(), {});
    for (const auto& p : model_->named_parameters()) {
      const auto& names = source.state_names(p.key());
      if (names.empty()) continue;
      const auto& shape = tp_->split(p.key()).whole_shape;
      ParamState st;
      st.step = source.step(p.key());
      for (const auto& name : names) {
        auto whole = source.read(p.key(), name, 0, c10::multiply_integers(shape)).view(shape);
        st.tensors.emplace_back(name, tp_->slice(p.key(), whole).contiguous());
      }
      writeParamState(*parts, p.value(), st);
    }
    inner_->state().loadWholeOptimizer(*parts);
  }

  // This rank's [begin, begin + padded / world) of `whole` flattened, zero beyond its end.
  torch::Tensor mySlice(const UnitShard& u, const torch::Tensor& whole) const {
    const int64_t n = u.padded / world_pg_->runtime().world_size;
    auto flat = whole.reshape(-1);
    auto out = torch::zeros({n}, flat.options());
    const int64_t have = std::clamp(flat.numel() - u.begin, int64_t{0}, n);
    if (have > 0) out.narrow(0, 0, have).copy_(flat.narrow(0, u.begin, have));
    return out;
  }

  std::vector<torch::Tensor> gradients() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) out.push_back(p.grad());
    return out;
  }

  // The whole model's squared gradient norm, the same on every rank: a 0-d double.
  torch::Tensor normSquared() {
    std::vector<torch::Tensor> split, replicated;
    for (const auto& p : model_->parameters())
      if (p.grad().defined())
        (replicated_.count(p.unsafeGetTensorImpl()) ? replicated : split).push_back(p.grad());
    auto sum = sumOfAllSquares(split) +
               sumOfAllSquares(replicated).to(split.empty() ? torch::kCPU : split[0].device()) /
                   static_cast<double>(tp_->size);
    auto io = std::vector<at::Tensor>{sum.reshape({1})};
    tp_pg_->wait(tp_pg_->allreduce(io));
    return io[0].reshape({});
  }

  models::Classifier model_;
  std::shared_ptr<models::TensorParallelism> tp_;
  ProcessGroup* world_pg_;
  std::shared_ptr<ProcessGroup> tp_pg_, dp_pg_;
  int64_t dp_ = 1;
  std::set<const c10::TensorImpl*> replicated_;
  MakeOptimizer make_optimizer_;
  std::function<void(float*)> fill_extras_;
  size_t extra_count_;
  torch::Tensor extras_;
  std::unique_ptr<ParallelPlan> inner_;
};

}  // namespace

std::unique_ptr<ParallelPlan> makeTensorParallelPlan(PlanSetup setup) {
  return std::make_unique<TensorParallelPlan>(std::move(setup));
}

}  // namespace ltrain::distributed
