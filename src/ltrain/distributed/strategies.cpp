// The strategies a model can be spread by, and parallelize(): the one place that turns a placed
// model and dist.* into a plan. A new strategy is its own file and one row here.
#include <torch/torch.h>

#include <stdexcept>

#include "ltrain/distributed/parallel_plan.h"

namespace ltrain::distributed {

std::vector<Strategy>& strategies() {
  static std::vector<Strategy> list = {
      {"tensor_parallel", [](const PlanSetup& s) { return s.pg && s.dist.tensor_parallel > 1; },
       makeTensorParallelPlan},
      {"expert_parallel", [](const PlanSetup& s) { return s.pg && s.dist.expert_parallel > 1; },
       makeExpertParallelPlan},
      // A process group of one shards too (a single launched worker with an explicit
      // dist.backend): its reduce-scatters, all-gathers and unit hooks then run on one GPU.
      {"zero3", [](const PlanSetup& s) { return s.pg && s.dist.zero == 3; }, makeZero3Plan},
      {"zero", [](const PlanSetup& s) { return s.pg && s.dist.zero >= 1; }, makeZeroPlan},
      {"ddp", [](const PlanSetup&) { return true; }, makeDdpPlan},
  };
  return list;
}

bool shardsParameters(const config::DistConfig& dist, bool grouped) {
  return grouped && dist.zero == 3;  // the zero3 row
}

std::unique_ptr<ParallelPlan> planFor(PlanSetup setup) {
  for (const auto& s : strategies())
    if (s.claims(setup)) return s.make(std::move(setup));
  throw std::logic_error("no parallel strategy claims this run");
}

std::unique_ptr<ParallelPlan> parallelize(models::Classifier& model, const config::DistConfig& dist,
                                          ProcessGroup* pg, PlanHooks hooks) {
  PlanSetup setup;
  setup.model = model.ptr();
  for (auto& st : model->stageTensors())
    setup.shares.push_back({st.device, {std::move(st.params), std::move(st.buffers)}});
  setup.make_optimizer = std::move(hooks.make_optimizer);
  setup.pg = pg, setup.dist = dist;
  setup.extras = std::move(hooks.extras);
  setup.compute_dtype = hooks.compute_dtype;
  if (model->layers)  // a TorchScript module has none: it is one unit, never sharded by layer
    for (size_t i = 0; i < model->layers->size(); ++i)
      setup.layer_params.push_back(model->layerParameters(i));
  setup.set_layer_hooks = [m = model](std::shared_ptr<models::LayerHooks> h) mutable {
    models::setLayerHooks(*m, std::move(h));
  };
  if (model->deferred) {
    if (!shardsParameters(dist, pg != nullptr))
      throw std::logic_error("a model built deferred needs a plan that shards its parameters");
    setup.fill_layer = [m = model](size_t l, const models::WantedElements& wanted) {
      m->deferred->fill(l, *m->layers->ptr(l), wanted);
    };
  }
  return planFor(std::move(setup));
}

}  // namespace ltrain::distributed
