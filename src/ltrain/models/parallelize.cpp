#include "ltrain/models/parallelize.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <set>
#include <stdexcept>

#include "ltrain/common/errors.h"
#include "ltrain/common/tensor_storage.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/layerwise.h"
#include "ltrain/models/module_paths.h"
#include "ltrain/models/parallel_modules.h"
#include "ltrain/models/tensor_parallel.h"

namespace ltrain::models {
namespace {

const char* styleName(TpStyle s) {
  switch (s) {
    case TpStyle::kColwise:
      return "column-parallel";
    case TpStyle::kRowwise:
      return "row-parallel";
    case TpStyle::kVocabEmbedding:
      return "vocabulary-parallel embedding";
    case TpStyle::kVocabHead:
      return "vocabulary-parallel head";
    case TpStyle::kSequenceSlice:
      return "sequence slice";
    case TpStyle::kPartialGradient:
      return "partial gradient";
  }
  return "?";
}

// Which of `m`'s own parameters `rule` splits, and along which dimension.
std::vector<std::pair<std::string, int64_t>> splitDims(const TpRule& rule, torch::nn::Module& m,
                                                       const std::string& path) {
  auto wrong = [&](const char* want) {
    return std::logic_error(fmt::format("tensor parallel plan: '{}' is {} as a {}, not a {}", path,
                                        styleName(rule.style), m.name(), want));
  };
  switch (rule.style) {
    case TpStyle::kColwise:
    case TpStyle::kRowwise:
      if (!dynamic_cast<LinearImpl*>(&m)) throw wrong("models::Linear");
      if (rule.style == TpStyle::kRowwise) return {{"weight", 1}};
      return {{"weight", 0}, {"bias", 0}};
    case TpStyle::kVocabEmbedding:
      if (!dynamic_cast<EmbeddingImpl*>(&m)) throw wrong("models::Embedding");
      return {{"weight", 0}};
    case TpStyle::kSequenceSlice:
      if (!dynamic_cast<EmbeddingImpl*>(&m)) throw wrong("models::Embedding");
      return {};
    case TpStyle::kVocabHead:
      if (!dynamic_cast<LmHeadImpl*>(&m)) throw wrong("models::LmHead");
      return {{"weight", 0}};  // none when tied: the embedding's rows are split already
    case TpStyle::kPartialGradient:
      return {};
  }
  return {};
}

// A deferred tensor-parallel model's values: each layer's part made from the whole layer (the
// elements ZeRO-3 wants are among them).
class PartValues final : public DeferredValues {
 public:
  explicit PartValues(std::weak_ptr<TensorParallelism> tp) : tp_(std::move(tp)) {}
  void fill(size_t layer, torch::nn::Module& target, const WantedElements&) override {
    tp_.lock()->fillLayer(layer, target);
  }

 private:
  std::weak_ptr<TensorParallelism> tp_;  // the model holds both
};

// The family's layers without memory; the constructors' draws are put back (the whole twin's
// DeferredValues make the values), so the generator is where it was.
Classifier buildWithoutValues(const Layerwise& family) {
  auto gen = at::detail::getDefaultCPUGenerator();
  const auto state = gen.get_state();
  torch::nn::Sequential seq;
  for (const auto& make : family.layers) {
    auto layer = make(seq);
    for (auto& p : layer.ptr()->parameters()) freeStorage(p);  // one whole layer at a time
    seq->push_back(std::move(layer));
  }
  gen.set_state(state);
  return family.wrap ? family.wrap(seq) : Classifier(seq);
}

}  // namespace

void parallelize(Classifier& model, const std::vector<TpRule>& plan,
                 const std::shared_ptr<TensorParallelism>& tp) {
  torch::NoGradGuard no_grad;
  std::vector<size_t> used(plan.size(), 0);
  std::set<std::string> partial;  // parameters whose gradient each rank makes in part
  forEachModule(model, [&](const std::string& path, torch::nn::Module& m) {
    std::map<std::string, TensorSplit> own;
    for (const auto& p : m.named_parameters(/*recurse=*/false))
      own[p.key()] = TensorSplit{-1, 1, p.value().sizes().vec()};
    for (size_t r = 0; r < plan.size(); ++r) {
      const auto& rule = plan[r];
      if (!pathMatches(rule.path, path)) continue;
      ++used[r];
      for (const auto& [name, dim] : splitDims(rule, m, path))
        if (own.count(name)) own[name].dim = dim, own[name].parts = rule.parts;
      if (rule.style == TpStyle::kPartialGradient)
        for (const auto& [name, s] : own) partial.insert(path + "." + name);
      else if (auto* target = dynamic_cast<Parallelizable*>(&m))
        target->style = rule.style, target->tp = tp;
    }
    for (auto& p : m.named_parameters(/*recurse=*/false)) {
      const auto& s = own.at(p.key());
      tp->splits[path + "." + p.key()] = s;
      if (s.dim < 0) continue;
      auto shape = s.whole_shape;
      if (shape[s.dim] % (s.parts * tp->size) != 0)
        throw std::logic_error(fmt::format("tensor parallel: '{}.{}' ({}) does not divide by {}",
                                           path, p.key(), shape[s.dim], s.parts * tp->size));
      shape[s.dim] /= tp->size;
      p.value().set_data(storageless(shape, p.value().options()));
    }
  });
  for (size_t r = 0; r < plan.size(); ++r)
    if (!used[r]) throw std::logic_error("tensor parallel plan: no module '" + plan[r].path + "'");
  for (auto& p : model->named_parameters())
    if (tp->split(p.key()).dim < 0 && (tp->sequence_parallel || partial.count(p.key())))
      sumGradientOverGroup(p.value(), tp);
}

Classifier buildTensorParallel(const config::ModelConfig& cfg,
                               const std::vector<int64_t>& input_shape, int64_t num_classes,
                               int64_t rank, int64_t size, bool deferred, bool sequence_parallel) {
  const auto family = modelBuilder(cfg.name).layers;
  const auto* spec = findModelSpec(cfg.name);
  if (!family || !spec || !spec->tensor_parallel_plan)  // config/validate.cpp refused it
    throw std::logic_error("tensor parallel: model " + cfg.name + " has no plan");
  auto divides = [&](const std::string& what, int64_t n) {
    if (n % size != 0)
      throw UsageError(fmt::format("dist.tensor_parallel {} must divide {} ({})", size, what, n));
  };
  if (num_classes % size != 0)  // padded, as nanoGPT pads GPT-2's 50257 to 50304
    throw UsageError(fmt::format(
        "dist.tensor_parallel {} must divide the vocabulary size ({}): set model.vocab_size to a "
        "multiple of {}, such as {} (the extra rows are never a target)",
        size, num_classes, size, (num_classes + size - 1) / size * size));
  if (sequence_parallel && !input_shape.empty())
    divides("the sequence length under dist.sequence_parallel", input_shape[0]);

  auto tp = std::make_shared<TensorParallelism>();
  tp->rank = rank, tp->size = size, tp->sequence_parallel = sequence_parallel;
  tp->whole = buildDeferred(family(cfg, input_shape, num_classes));
  Classifier model = buildWithoutValues(family(cfg, input_shape, num_classes));
  parallelize(model, spec->tensor_parallel_plan(cfg), tp);
  model->tp = tp;
  if (deferred)
    model->deferred = std::make_shared<PartValues>(tp);
  else
    for (auto& p : model->parameters()) allocateStorage(p);
  return model;
}

}  // namespace ltrain::models
