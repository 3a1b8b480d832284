// dist.expert_parallel N (mixtral, qwen3_moe): ranks [k N, (k + 1) N) form an expert-parallel
// group, each holding 1/N of every layer's experts (models/moe.h: a token's rows go to its
// experts' ranks and come back by all-to-all). Every rank reads its own data, so everything else
// (attention, norms, routers, embeddings) is replicated and averaged by DDP over the whole world.
// An expert's gradient is what the tokens of its group brought it through the all-to-alls: it is
// summed over the replicas of the same experts (one per group, same place) and divided by the
// world, which is the one-process model's gradient of the mean loss.
// Clipping takes the whole model's norm: the experts' squares summed over the group, the replicated
// parameters' (equal on every rank) counted once.
// Checkpoints are sharded checkpoints of the whole model (checkpoint/sharded_checkpoint.h), as
// tensor parallelism writes them: each expert's values broadcast from its rank in turn and every
// rank writing its 1/world of each parameter, so that they resume on any other split (each rank
// reads the whole model, then keeps its experts) and generate, export and evaluate read them as any
// other run's.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "ltrain/distributed/mesh.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/whole_parameter_unit.h"
#include "ltrain/models/moe.h"
#include "ltrain/optim/fused.h"

namespace ltrain::distributed {
namespace {

class GroupExchange final : public models::ExpertExchange {
 public:
  explicit GroupExchange(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {}
  int64_t rank() const override { return pg_->runtime().rank; }
  int64_t size() const override { return pg_->runtime().world_size; }
  torch::Tensor allToAll(const torch::Tensor& in, const std::vector<int64_t>& send,
                         const std::vector<int64_t>& recv) override {
    auto input = in.contiguous();
    auto shape = input.sizes().vec();
    shape[0] = 0;
    for (const auto r : recv) shape[0] += r;
    auto out = torch::empty(shape, input.options());
    const auto start = std::chrono::steady_clock::now();
    pg_->wait(pg_->allToAll(out, input, recv, send));
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
  // The time spent in all-to-alls since the last call.
  double takeSeconds() { return std::exchange(seconds_, 0.0); }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  double seconds_ = 0;
};

class ExpertParallelPlan final : public ParallelPlan, private PlanState {
 public:
  explicit ExpertParallelPlan(PlanSetup s) : model_(s.model), world_pg_(s.pg) {
    const int64_t n = s.dist.expert_parallel, world = s.pg->runtime().world_size;
    if (world % n != 0)
      throw std::logic_error("expert parallel: the world is not a multiple of the group");
    const Mesh mesh{s.pg->runtime().rank, world, n};
    ep_pg_ = s.pg->subgroupOf(fmt::format("ep{}", mesh.dpRank()), mesh.tpGroup());
    if (mesh.dp() > 1)
      replica_pg_ = s.pg->subgroupOf(fmt::format("experts{}", mesh.tpRank()), mesh.dpGroup());
    world_ = world;
    // The whole model's parameters, as a checkpoint lists them, before the others' experts go.
    for (const auto& p : model_->named_parameters())
      whole_.push_back({p.key(), p.value().sizes().vec(), -1});
    exchange_ = std::make_shared<GroupExchange>(ep_pg_);
    const auto owners = models::splitExperts(*model_, exchange_);
    for (auto& w : whole_)
      if (auto it = owners.find(w.name); it != owners.end()) w.owner = it->second;
    const auto device = s.shares.empty() ? torch::Device(torch::kCPU) : s.shares[0].device;
    ReducedTensors dense;
    for (const auto& p : model_->named_parameters()) {
      if (owners.count(p.key())) {
        experts_.push_back(p.value());
        expert_set_.insert(p.value().unsafeGetTensorImpl());
      } else {
        dense.params.emplace_back(p.key(), p.value());
      }
    }
    dense.buffers = ReducedTensors::of(*model_).buffers;
    s.shares = {{device, std::move(dense)}};
    s.norm_group = ep_pg_.get();
    s.norm_weight = [this, share = 1.0 / static_cast<double>(n)](const torch::Tensor& p) {
      return expert_set_.count(p.unsafeGetTensorImpl()) ? 1.0 : share;
    };
    inner_ = makeDdpPlan(std::move(s));
  }

  void prepare(const MicroStep& m) override { inner_->prepare(m); }

  // The experts' gradients summed over their replicas and divided by the world (DDP averages the
  // rest); a non-finite one on any rank makes every rank skip.
  torch::Tensor finishGradients(const torch::Tensor& unscale) override {
    torch::Tensor bad;
    {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> grads;
      for (auto& p : experts_) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        grads.push_back(p.grad().view(-1));
      }
      auto flat = torch::cat(grads);
      if (replica_pg_) {
        std::vector<at::Tensor> io{flat};
        replica_pg_->wait(replica_pg_->allreduce(io));
      }
      flat.mul_(1.0 / static_cast<double>(world_));
      if (unscale.defined()) flat.mul_(unscale.to(flat.device()).reshape({}));
      int64_t at = 0;
      for (auto& g : grads) g.copy_(flat.narrow(0, at, g.numel())), at += g.numel();
      bad = flat.isfinite().all().logical_not().to(torch::kFloat).reshape({1});
      std::vector<at::Tensor> io{bad};
      world_pg_->wait(world_pg_->allreduce(io));
    }
    const auto found = inner_->finishGradients(unscale);
    return torch::maximum(found,
                          bad.gt(0).to(found.device(), found.scalar_type()).reshape(found.sizes()));
  }

  double gradNorm() override { return inner_->gradNorm(); }
  void step(const OptimizerStep& s) override {
    inner_->step(s);
    all_to_all_s_ = exchange_->takeSeconds();
  }
  void zeroGradients() override {
    inner_->zeroGradients();
    all_to_all_s_ = exchange_->takeSeconds();
  }
  StepReport lastStep() const override {
    auto r = inner_->lastStep();
    r.all_to_all_s = all_to_all_s_;
    return r;
  }

  PlanSummary summary() const override {
    auto r = inner_->summary();
    r.description =
        fmt::format("expert parallel {} x data parallel {} (DDP {})", ep_pg_->runtime().world_size,
                    world_ / ep_pg_->runtime().world_size, r.description);
    return r;
  }

  PlanState& state() override { return *this; }

 private:
  struct WholeParam {
    std::string name;
    std::vector<int64_t> shape;
    int64_t owner = -1;  // the rank of the group holding it; -1: every rank
  };

  // The plan's checkpoints are always sharded (unitShards).
  void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>&) override {
    throw std::logic_error("expert parallel: checkpoints are sharded");
  }
  // A resume reads the whole model and optimizer on every rank: each keeps its experts' state.
  void loadWholeOptimizer(const torch::optim::Optimizer& whole) override {
    inner_->state().loadWholeOptimizer(whole);
  }

  // Collective: `fn(param, value, state)` for every parameter of the whole model in order, an
  // expert's broadcast from its rank over the group, with its optimizer state when `with_state`.
  using WholeFn = std::function<void(const WholeParam&, const torch::Tensor&, const ParamState&)>;
  void forEachWhole(bool with_state, const WholeFn& fn) {
    torch::NoGradGuard no_grad;
    std::map<std::string, torch::Tensor> local;
    for (const auto& p : model_->named_parameters()) local[p.key()] = p.value();
    inner_->state().saveWholeOptimizer([&](torch::optim::Optimizer& opt) {
      optim::syncStepsToHost(opt);
      // An expert's state has the names and step every parameter's has (all step together).
      ParamState like;
      if (with_state)
        for (const auto& p : model_->parameters())
          if (readParamState(opt, p, like)) break;
      const int64_t me = ep_pg_->runtime().rank;
      for (const auto& w : whole_) {
        ParamState st;
        if (w.owner < 0) {
          const auto& p = local.at(w.name);
          if (with_state) readParamState(opt, p, st);
          fn(w, p.detach(), st);
          continue;
        }
        auto value = w.owner == me ? local.at(w.name).detach().clone()
                                   : torch::empty(w.shape, experts_.front().options());
        std::vector<at::Tensor> io{value};
        if (w.owner == me && with_state) readParamState(opt, local.at(w.name), st);
        if (with_state && !like.tensors.empty()) {
          st.step = like.step;
          if (w.owner != me) st.tensors = like.tensors;
          for (auto& [state, t] : st.tensors) {
            t = w.owner == me ? t.clone() : torch::empty(w.shape, t.options());
            io.push_back(t);
          }
        }
        for (auto& t : io) {  // one at a time: Gloo broadcasts a single tensor
          std::vector<at::Tensor> one{t};
          ep_pg_->wait(ep_pg_->broadcastFrom(one, w.owner));
        }
        fn(w, value, st);
      }
    });
  }

  // One unit per parameter, under its whole name and shape; this rank's 1/world of it.
  std::vector<UnitShard> unitShards() override {
    std::vector<UnitShard> out;
    const int64_t rank = world_pg_->runtime().rank;
    forEachWhole(true, [&](const WholeParam& w, const torch::Tensor& value, const ParamState& st) {
      out.push_back(wholeParameterUnit(w.name, w.shape, value, st, rank, world_));
    });
    return out;
  }

  void forEachUnitOnHost(
      bool main,
      const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) override {
    size_t i = 0;
    forEachWhole(false, [&](const WholeParam&, const torch::Tensor& value, const ParamState&) {
      if (main) fn(i, {value.cpu()});
      ++i;
    });
  }

  std::shared_ptr<torch::nn::Module> model_;
  ProcessGroup* world_pg_;
  std::shared_ptr<ProcessGroup> ep_pg_, replica_pg_;
  int64_t world_ = 1;
  std::vector<WholeParam> whole_;
  std::vector<torch::Tensor> experts_;
  std::set<const c10::TensorImpl*> expert_set_;
  std::shared_ptr<GroupExchange> exchange_;
  double all_to_all_s_ = 0;
  std::unique_ptr<ParallelPlan> inner_;
};

}  // namespace

std::unique_ptr<ParallelPlan> makeExpertParallelPlan(PlanSetup setup) {
  return std::make_unique<ExpertParallelPlan>(std::move(setup));
}

}  // namespace ltrain::distributed
