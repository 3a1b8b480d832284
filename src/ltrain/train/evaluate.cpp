#include "ltrain/train/evaluate.h"

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "ltrain/common/errors.h"
#include "ltrain/compute/precision.h"
#include "ltrain/data/loader.h"
#include "ltrain/distributed/mesh.h"
#include "ltrain/inference/trained_model.h"
#include "ltrain/models/moe.h"
#include "ltrain/models/tensor_parallel.h"
#include "ltrain/train/dpo.h"
#include "ltrain/train/loss.h"

namespace ltrain::train {

const char* heldOutName(const data::Dataset& ds) {
  return ds.tokens ? "val" : "test";
}

// Each rank evaluates a contiguous shard of the split (no padding, so nothing counts twice); the
// sums are reduced over ranks.
EvalResult evaluate(models::Classifier& model, const data::Dataset& ds, int64_t batch_size,
                    config::Precision precision, const compute::Devices& devices,
                    distributed::ProcessGroup* pg, Dpo* dpo) {
  torch::NoGradGuard no_grad;
  model->eval();
  const auto& rt = pg ? pg->runtime() : distributed::Runtime{};
  // The ranks of a tensor-parallel group run one forward together: they take the same shard (and
  // its sums count once per rank of the group, in the numerator and the count alike).
  const distributed::Mesh mesh{rt.rank, rt.world_size, model->tp ? model->tp->size : 1};
  const int64_t shard = mesh.dpRank(), shards = mesh.dp();
  const int64_t begin = ds.size() * shard / shards;
  const int64_t end = ds.size() * (shard + 1) / shards;
  std::vector<int64_t> order(end - begin);
  std::iota(order.begin(), order.end(), begin);
  data::Loader loader(ds, std::move(order), batch_size, false, 0, 1);
  // Summed on the device and read once at the end: no host synchronisation per batch.
  // loss, correct, and targets counted (an image skipped under data.on_bad_image has none).
  auto sums = torch::zeros({3}, torch::TensorOptions().dtype(torch::kDouble).device(devices.main));
  data::Batch b, last;
  int64_t batches = 0;
  // One batch's forward(s) and, when it counts, its sums.
  auto score = [&](const data::Batch& batch, bool counts) {
    compute::AutocastScope autocast(precision, devices.main.type());
    if (dpo) {  // pairs: DPO's loss per pair, and the pairs ranked right
      const auto t =
          dpo->loss(batch.inputs.to(devices.main), batch.targets.to(devices.main), devices);
      if (!counts) return;
      const auto pairs = t.stats[3];
      sums[0] += (t.loss * pairs).to(sums.device(), torch::kDouble);
      sums[1] += t.stats[2].to(sums.device(), torch::kDouble);
      sums[2] += pairs.to(sums.device(), torch::kDouble);
      return;
    }
    auto out = compute::forward(model, batch.inputs.to(devices.main), devices).to(torch::kFloat);
    if (!counts) return;
    const auto yt = batch.targets.to(devices.main).to(out.device());
    sums[0] += crossEntropy(out, yt, torch::kSum).to(sums.device(), torch::kDouble);
    sums[1] += out.argmax(-1).eq(yt).sum().to(sums.device(), torch::kDouble);
    sums[2] += yt.ge(0).sum().to(sums.device(), torch::kDouble);
  };
  while (loader.next(b)) {
    score(b, true);
    ++batches;
    last = b;
  }
  // dist.zero 3's layer hooks gather parameters with collectives, and dist.expert_parallel's
  // experts exchange tokens: every rank runs as many forwards as the largest shard needs, a
  // shorter shard repeating a batch it does not count.
  const bool collective =
      (model->runner && model->runner->hooks) || models::exchangesTokens(*model);
  if (collective && pg && shards > 1) {
    const int64_t most = (ds.size() + shards - 1) / shards;
    const int64_t needed = (most + batch_size - 1) / batch_size;
    if (batches == 0 && needed > 0) {
      data::Loader one(ds, {0}, 1, false, 0, 1);
      one.next(last);
    }
    for (; batches < needed; ++batches) score(last, false);
  }
  model->train();
  const auto cpu = sums.cpu();
  const double* v = cpu.data_ptr<double>();
  std::vector<double> host(v, v + 3);
  if (pg) host = pg->allreduceSum(host);
  const double n = std::max(host[2], 1.0);  // examples, or tokens
  return {host[0] / n, host[1] / n};
}

EvalSummary evaluateWeights(const config::LoadedConfig& lc, const std::string& weights) {
  const auto& cfg = lc.cfg;
  // DPO scores against its reference, the model as the run started (model.init_from and its
  // starting adapter), made again here as the trainer made it.
  std::unique_ptr<Dpo> dpo;
  auto t = inference::loadTrainedClassifier(
      lc, weights,
      cfg.finetune.method != "dpo"
          ? std::function<void(models::Classifier&)>{}
          : [&](models::Classifier& m) { dpo = std::make_unique<Dpo>(cfg.dpo.beta, m); });
  if (dpo) dpo->place();
  auto r = evaluate(t.model, t.splits.test, cfg.data.eval_batch_size, cfg.train.precision,
                    t.devices, nullptr, dpo.get());
  return {r.accuracy, r.loss, t.splits.test.size(), languageModel(t.splits.test),
          t.splits.test.pairs};
}

}  // namespace ltrain::train
