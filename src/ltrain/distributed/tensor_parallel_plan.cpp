// dist.tensor_parallel N: a 2-D mesh of world = dp x N ranks. Ranks [k N, (k + 1) N) form a
// tensor-parallel group (one host: they talk in every layer's forward and backward); the ranks
// holding the same part, one per group, form a data-parallel group, over which DDP (ddp_plan.cpp)
// averages the gradients of this rank's part, or ZeRO-3 (zero3_plan.cpp, dist.zero 3) shards it
// further (torchtitan's FSDP + TP). Each rank's values are its part of the
// one-process model (models/tensor_parallel.h); the optimizer steps that part.
// Clipping takes the norm over the whole model: the split parameters' squares summed over the
// tensor-parallel group, the replicated ones (equal on every rank of it) counted once.
// Checkpoints are sharded checkpoints of the whole model (checkpoint/sharded_checkpoint.h): each
// parameter gathered over the group in turn and every rank of the world writing its 1/world of it,
// so that they resume on any other split, and generate, export and evaluate read them as any
// other run's.
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "ltrain/distributed/gradients.h"
#include "ltrain/distributed/mesh.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/whole_parameter_unit.h"
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
  torch::Tensor reduceScatter(const torch::Tensor& t) override {
    auto in = t.contiguous().view(-1);
    auto out = torch::empty({in.numel() / pg_->runtime().world_size}, in.options());
    pg_->wait(pg_->reduceScatterInto(out, in));
    auto shape = t.sizes().vec();
    shape[0] /= pg_->runtime().world_size;
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
        extras_given_(s.extras) {
    const int64_t n = tp_->size, world = s.pg->runtime().world_size, rank = s.pg->runtime().rank;
    if (world % n != 0)
      throw std::logic_error("tensor parallel: the world is not a multiple of the group");
    const Mesh mesh{rank, world, n};
    const auto tp_ranks = mesh.tpGroup(), dp_ranks = mesh.dpGroup();
    tp_pg_ = s.pg->subgroupOf(fmt::format("tp{}", mesh.dpRank()), tp_ranks);
    if (dp_ranks.size() > 1)
      dp_pg_ = s.pg->subgroupOf(fmt::format("dp{}", mesh.tpRank()), dp_ranks);
    dp_ = static_cast<int64_t>(dp_ranks.size());
    tp_->group = std::make_shared<GroupCollectives>(tp_pg_);
    // Built deferred (dist.zero 3 over two replicas or more), ZeRO-3 makes each layer's part as it
    // shards it; else the parts are made here.
    zero_ = model_->deferred != nullptr;
    if (zero_ && !dp_pg_) throw std::logic_error("tensor parallel: ZeRO-3 needs two replicas");
    if (!zero_) tp_->fill(model_);
    for (const auto& p : model_->named_parameters())
      if (tp_->split(p.key()).dim < 0) replicated_.insert(p.value().unsafeGetTensorImpl());
    // The data-parallel dimension: ZeRO-3 or DDP over the replicas (none: one replica). Clipping
    // takes the whole model's norm: the split parameters' squares summed over the group, the
    // replicated ones (equal on every rank of it) counted once. The stop vote is reduced here.
    s.pg = dp_pg_.get();
    s.extras = {};
    s.norm_group = tp_pg_.get();
    s.norm_weight = [this, share = 1.0 / static_cast<double>(n)](const torch::Tensor& p) {
      return replicated_.count(p.unsafeGetTensorImpl()) ? share : 1.0;
    };
    inner_ = zero_ ? makeZero3Plan(std::move(s)) : makeDdpPlan(std::move(s));
  }

  void prepare(const MicroStep& m) override { inner_->prepare(m); }

  // One all-reduce over the world carries the non-finite flag (a split gradient may overflow on
  // one rank of a group only: every rank skips) and the stop vote.
  torch::Tensor finishGradients(const torch::Tensor& unscale) override {
    const auto found = inner_->finishGradients(unscale);
    auto t = torch::cat({found.reshape({1}).to(torch::kFloat),
                         extras_given_.values(found.options().dtype(torch::kFloat))});
    std::vector<at::Tensor> io{t};
    world_pg_->wait(world_pg_->allreduce(io));
    extras_ = t.narrow(0, 1, static_cast<int64_t>(extras_given_.count));
    return t.narrow(0, 0, 1).gt(0).to(found.scalar_type()).reshape(found.sizes());
  }

  double gradNorm() override { return inner_->gradNorm(); }
  void step(const OptimizerStep& s) override { inner_->step(s); }
  void zeroGradients() override { inner_->zeroGradients(); }

  StepReport lastStep() const override {
    auto r = inner_->lastStep();
    r.extras = extras_;
    return r;
  }

  PlanSummary summary() const override {
    auto r = inner_->summary();
    if (!r.description.empty())  // ZeRO's names ZeRO-3; DDP's only its buckets
      r.description = fmt::format(" ({}{})", zero_ ? "" : "DDP ", r.description);
    r.description =
        fmt::format("tensor parallel {} x data parallel {}{}", tp_->size, dp_, r.description);
    return r;
  }

  PlanState& state() override { return *this; }

  // Each replicated parameter's sum and sum of squares, in double, gathered over the group and
  // held against the group's first rank: the same arithmetic on the same values keeps them equal
  // bit for bit, so a difference is a replica that went its own way (a nondeterministic kernel, a
  // bad device). Under ZeRO-3 the replicas are slices spread over the data-parallel ranks: not
  // compared.
  void checkReplicas() override {
    if (zero_) return;
    torch::NoGradGuard no_grad;
    std::vector<std::string> names;
    std::vector<torch::Tensor> sums;
    for (const auto& p : model_->named_parameters()) {
      if (!replicated_.count(p.value().unsafeGetTensorImpl())) continue;
      const auto v = p.value().detach().to(torch::kDouble);
      names.push_back(p.key());
      sums.push_back(torch::stack({v.sum(), v.square().sum()}));
    }
    if (sums.empty()) return;
    auto mine = torch::cat(sums);
    auto all = torch::empty({tp_->size * mine.numel()}, mine.options());
    tp_pg_->wait(tp_pg_->allgatherInto(all, mine));
    const auto rows = all.view({tp_->size, -1}).cpu();
    const auto* v = rows.data_ptr<double>();
    const int64_t k = rows.size(1);
    for (int64_t r = 1; r < tp_->size; ++r)
      for (int64_t i = 0; i < k; ++i) {
        const double a = v[i], b = v[r * k + i];
        if (std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(a))) continue;
        const auto group =
            Mesh{world_pg_->runtime().rank, world_pg_->runtime().world_size, tp_->size}.tpGroup();
        throw std::runtime_error(fmt::format(
            "tensor parallel: replicated parameter '{}' differs between ranks {} and {} of a "
            "group ({} {} vs {}): the replicas went apart (a nondeterministic kernel or a bad "
            "device); resume from the last checkpoint",
            names[static_cast<size_t>(i / 2)], group.front(), group[static_cast<size_t>(r)],
            i % 2 == 0 ? "sum" : "sum of squares", a, b));
      }
  }

 private:
  // The plan's checkpoints are always sharded (unitShards), read back by ranges.
  void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>&) override {
    throw std::logic_error("tensor parallel: checkpoints are sharded");
  }
  void loadWholeOptimizer(const torch::optim::Optimizer&) override {
    throw std::logic_error("tensor parallel: checkpoints are read by ranges");
  }

  // Collective: `fn(name, value, state)` for each of this rank's parameters, its part whole (under
  // ZeRO-3 gathered over the replicas a unit at a time), with its optimizer state when
  // `with_state` (state.tensors empty before the first step).
  using LocalParam =
      std::function<void(const std::string&, const torch::Tensor&, const ParamState&)>;
  void forEachPart(bool with_state, const LocalParam& fn) {
    torch::NoGradGuard no_grad;
    const auto units = zero_ ? inner_->state().unitShards() : std::vector<UnitShard>{};
    if (units.empty()) {  // DDP: the parameters and the optimizer state are here
      inner_->state().saveWholeOptimizer([&](torch::optim::Optimizer& opt) {
        optim::syncStepsToHost(opt);
        for (const auto& p : model_->named_parameters()) {
          ParamState st;
          if (with_state) readParamState(opt, p.value(), st);
          fn(p.key(), p.value().detach(), st);
        }
      });
      return;
    }
    auto whole = [&](const torch::Tensor& slice, int64_t padded) {
      auto in = slice.contiguous();
      auto out = torch::empty({padded}, in.options());
      dp_pg_->wait(dp_pg_->allgatherInto(out, in));
      return out;
    };
    for (const auto& u : units) {
      const auto values = whole(u.values, u.padded);
      std::vector<torch::Tensor> states;
      if (with_state)
        for (const auto& st : u.state) states.push_back(whole(st.second, u.padded));
      for (const auto& p : u.params) {
        const int64_t numel = c10::multiply_integers(p.shape);
        ParamState st;
        st.step = u.optimizer_step;
        for (size_t k = 0; k < states.size(); ++k)
          st.tensors.emplace_back(u.state[k].first,
                                  states[k].narrow(0, p.offset, numel).view(p.shape));
        fn(p.name, values.narrow(0, p.offset, numel).view(p.shape), st);
      }
    }
  }

  // One unit per parameter, under its whole name and shape; this rank's 1/world of it.
  std::vector<UnitShard> unitShards() override {
    std::vector<UnitShard> out;
    const auto& rt = world_pg_->runtime();
    forEachPart(true, [&](const std::string& name, const torch::Tensor& value,
                          const ParamState& st) {
      ParamState whole{st.step, {}};
      for (const auto& [state, t] : st.tensors)
        whole.tensors.emplace_back(state, tp_->gather(name, t));
      out.push_back(wholeParameterUnit(name, tp_->split(name).whole_shape, tp_->gather(name, value),
                                       whole, rt.rank, rt.world_size));
    });
    return out;
  }

  void forEachUnitOnHost(
      bool main,
      const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) override {
    size_t i = 0;
    forEachPart(false, [&](const std::string& name, const torch::Tensor& value, const ParamState&) {
      auto whole = tp_->gather(name, value);
      if (main) fn(i, {whole.cpu()});
      ++i;
    });
  }

  // Each parameter's optimizer state read whole, one at a time, and this rank's part kept.
  void loadOptimizerRanges(const RangeSource& source) override {
    torch::NoGradGuard no_grad;
    auto part = [this, source](const std::string& name, const std::string& state) {
      const auto& shape = tp_->split(name).whole_shape;
      auto whole = source.read(name, state, 0, c10::multiply_integers(shape)).view(shape);
      return tp_->slice(name, whole).contiguous();
    };
    if (zero_) {  // ZeRO-3 reads its slices of this rank's parts
      RangeSource parts = source;
      parts.read = [part](const std::string& name, const std::string& state, int64_t b, int64_t e) {
        return part(name, state).view(-1).narrow(0, b, e - b);
      };
      inner_->state().loadOptimizerRanges(parts);
      return;
    }
    auto parts = make_optimizer_(model_->parameters(), {});
    for (const auto& p : model_->named_parameters()) {
      const auto& names = source.state_names(p.key());
      if (names.empty()) continue;
      ParamState st;
      st.step = source.step(p.key());
      for (const auto& name : names) st.tensors.emplace_back(name, part(p.key(), name));
      writeParamState(*parts, p.value(), st);
    }
    inner_->state().loadWholeOptimizer(*parts);
  }

  models::Classifier model_;
  std::shared_ptr<models::TensorParallelism> tp_;
  ProcessGroup* world_pg_;
  std::shared_ptr<ProcessGroup> tp_pg_, dp_pg_;
  int64_t dp_ = 1;
  bool zero_ = false;
  std::set<const c10::TensorImpl*> replicated_;
  MakeOptimizer make_optimizer_;
  ExtraScalars extras_given_;
  torch::Tensor extras_;
  std::unique_ptr<ParallelPlan> inner_;
};

}  // namespace

std::unique_ptr<ParallelPlan> makeTensorParallelPlan(PlanSetup setup) {
  return std::make_unique<TensorParallelPlan>(std::move(setup));
}

}  // namespace ltrain::distributed
