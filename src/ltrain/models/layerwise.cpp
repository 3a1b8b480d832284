#include "ltrain/models/layerwise.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>
#include <stdexcept>

#include "ltrain/common/tensor_storage.h"

namespace ltrain::models {
namespace {

// The default CPU generator's state, read and put back (every initialisation here draws from it).
torch::Tensor generatorState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setGeneratorState(const torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

Classifier wrapped(const Layerwise& family, torch::nn::Sequential seq) {
  return family.wrap ? family.wrap(std::move(seq)) : Classifier(std::move(seq));
}

// Layer i's values, made again: its constructor from where the whole build ran it, then its
// initialisation from where the whole build ran that; the generator is left as it was.
class ReplayedValues final : public DeferredValues {
 public:
  ReplayedValues(Layerwise family, torch::nn::Sequential built,
                 std::vector<torch::Tensor> before_ctor, std::vector<torch::Tensor> before_init)
      : family_(std::move(family)),
        built_(std::move(built)),
        before_ctor_(std::move(before_ctor)),
        before_init_(std::move(before_init)) {}

  void fill(size_t layer, torch::nn::Module& target, const WantedElements&) override {
    auto params = target.parameters();
    if (params.empty()) return;  // a tied head: its weight is the embedding's
    torch::NoGradGuard no_grad;
    const auto now = generatorState();
    setGeneratorState(before_ctor_.at(layer));
    auto fresh = family_.layers.at(layer)(built_);
    if (family_.init) {
      setGeneratorState(before_init_.at(layer));
      family_.init(layer, *fresh.ptr());
    }
    setGeneratorState(now);
    // By name: parameters added after the build (LoRA's adapters) are not the family's to make.
    const auto mine = target.named_parameters();
    for (const auto& v : fresh.ptr()->named_parameters()) {
      const auto* p = mine.find(v.key());
      if (!p)
        throw std::logic_error("deferred build: layer " + std::to_string(layer) +
                               " was made without parameter " + v.key());
      p->copy_(v.value());
    }
  }

 private:
  Layerwise family_;
  torch::nn::Sequential built_;
  std::vector<torch::Tensor> before_ctor_, before_init_;
};

}  // namespace

Classifier buildWhole(const Layerwise& family) {
  torch::nn::Sequential seq;
  for (const auto& make : family.layers) seq->push_back(make(seq));
  if (family.init) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < seq->size(); ++i) family.init(i, *seq->ptr(i));
  }
  return wrapped(family, seq);
}

Classifier buildDeferred(Layerwise family) {
  torch::nn::Sequential seq;
  std::vector<torch::Tensor> before_ctor, before_init;
  for (const auto& make : family.layers) {
    before_ctor.push_back(generatorState());
    auto layer = make(seq);
    for (auto& p : layer.ptr()->parameters()) freeStorage(p);
    seq->push_back(std::move(layer));
  }
  if (family.init) {
    // The initialisation's draws, made on a copy of each layer that is dropped at once, so that the
    // generator goes on from where the whole build leaves it.
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < family.layers.size(); ++i) {
      before_init.push_back(generatorState());
      if (seq->ptr(i)->parameters().empty()) continue;
      setGeneratorState(before_ctor[i]);
      auto scratch = family.layers[i](seq);
      setGeneratorState(before_init.back());
      family.init(i, *scratch.ptr());
    }
  }
  auto model = wrapped(family, seq);
  model->deferred = std::make_shared<ReplayedValues>(std::move(family), seq, std::move(before_ctor),
                                                     std::move(before_init));
  return model;
}

void placeDeferred(Classifier& model, torch::Device device) {
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters())
    if (p.device() != device) p.set_data(storageless(p.sizes(), p.options().device(device)));
  for (auto& b : model->buffers())
    if (b.device() != device) b.set_data(b.to(device));
}

}  // namespace ltrain::models
