#include "ltrain/models/parallel_modules.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "ltrain/models/tensor_parallel.h"

namespace ltrain::models {

namespace F = torch::nn::functional;

LinearImpl::LinearImpl(int64_t in, int64_t out, bool has_bias) {
  // torch's own constructor, for its initialisation's draws.
  torch::nn::LinearImpl made(torch::nn::LinearOptions(in, out).bias(has_bias));
  weight = register_parameter("weight", made.weight);
  if (has_bias) bias = register_parameter("bias", made.bias);
}

void LinearImpl::reset() {
  weight = register_parameter("weight", torch::empty(weight.sizes(), weight.options()));
  if (bias.defined()) bias = register_parameter("bias", torch::empty(bias.sizes(), bias.options()));
}

namespace {

// A frozen weight held in bf16 (lora.base_dtype) and an fp32 input outside autocast: the product
// runs in the input's dtype, and only the weight itself is kept for backward, where the input's
// gradient is the gradient times it. No fp32 copy of the weight, and no input, outlives the
// forward. (Under autocast the plain product casts both sides itself, as for an fp32 weight.)
struct FrozenLinear : torch::autograd::Function<FrozenLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->save_for_backward({w});
    return F::linear(x, w.to(x.scalar_type()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto w = ctx->get_saved_variables()[0];
    const auto& dy = grads[0];
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {torch::matmul(dy, w.to(dy.scalar_type())).to(dtype), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LinearImpl::base(const torch::Tensor& x, bool with_bias) const {
  const auto& b = with_bias ? bias : torch::Tensor();
  if (weight.scalar_type() == x.scalar_type() || weight.requires_grad() ||
      at::autocast::is_autocast_enabled(x.device().type()))
    return F::linear(x, weight, b);
  const auto y = FrozenLinear::apply(x, weight);  // a frozen base held in bf16
  return b.defined() ? y + b : y;
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(!(tp && lora_A), "LoRA adapters on a tensor-parallel linear");  // validate refuses
  if (lora_A && !lora_magnitude.defined())
    return base(x, true) + lora_B(lora_A(lora_dropout(x))) * lora_scaling;
  if (lora_A) {  // PEFT's DoraLinearLayer.forward, on top of the base output
    const auto y = base(x, true);
    const auto scale = doraScale();
    // With dropout in training the base's part is recomputed on the dropped input, as PEFT does.
    const bool dropped = is_training() && lora_dropout->options.p() > 0;
    const auto xd = dropped ? lora_dropout(x) : x;
    const auto without_bias = dropped ? base(xd, false) : bias.defined() ? y - bias : y;
    return y + (scale - 1) * without_bias + scale * lora_B(lora_A(xd)) * lora_scaling;
  }
  if (!tp) return base(x, true);
  auto y = style == TpStyle::kRowwise ? leaveTensorParallel(F::linear(x, weight), *tp)
                                      : columnParallel(x, {weight}, *tp)[0];
  return bias.defined() ? y + bias : y;
}

torch::Tensor LinearImpl::doraScale() const {
  const auto update = torch::matmul(lora_B->weight, lora_A->weight).detach();
  const auto norm = at::linalg_vector_norm(weight + lora_scaling * update, 2, {1}).detach();
  return lora_magnitude / norm;
}

void LinearImpl::addLora(int64_t rank, double alpha, double dropout, bool dora) {
  const int64_t in = weight.size(1), out = weight.size(0);
  lora_dropout = register_module("lora_dropout", torch::nn::Dropout(dropout));
  lora_A =
      register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, rank).bias(false)));
  lora_B =
      register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(rank, out).bias(false)));
  torch::NoGradGuard no_grad;
  lora_A->weight.set_data(lora_A->weight.to(weight.options()));
  lora_B->weight.set_data(torch::zeros({out, rank}, weight.options()));
  lora_scaling = alpha / static_cast<double>(rank);
  if (dora)  // B is zero: the norms are W's own
    lora_magnitude = register_parameter("lora_magnitude_vector",
                                        at::linalg_vector_norm(weight.detach(), 2, {1}));
}

void LinearImpl::mergeLora() {
  if (!lora_A) return;
  torch::NoGradGuard no_grad;
  const auto scale = lora_magnitude.defined() ? doraScale() : torch::Tensor();
  weight.add_(torch::matmul(lora_B->weight, lora_A->weight).to(weight.dtype()), lora_scaling);
  if (scale.defined()) {  // PEFT's merge: each row of W + scaling B A to its magnitude
    weight.mul_(scale.unsqueeze(1).to(weight.dtype()));
    parameters_.erase("lora_magnitude_vector");
    lora_magnitude = torch::Tensor();
  }
  for (const char* name : {"lora_A", "lora_B", "lora_dropout"}) unregister_module(name);
  lora_A = nullptr, lora_B = nullptr, lora_dropout = nullptr;
}

EmbeddingImpl::EmbeddingImpl(torch::Tensor w) {
  weight = register_parameter("weight", std::move(w));
}

void EmbeddingImpl::reset() {
  weight = register_parameter("weight", torch::empty(weight.sizes(), weight.options()));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  if (tp && style == TpStyle::kVocabEmbedding) return vocabParallelEmbedding(ids, weight, *tp);
  auto e = F::embedding(ids, weight);
  if (tp && style == TpStyle::kSequenceSlice && tp->sequence_parallel) {
    const int64_t n = e.size(-2) / tp->size;  // positions along the second-to-last dimension
    return e.narrow(-2, tp->rank * n, n);
  }
  return e;
}

LmHeadImpl::LmHeadImpl(int64_t dim, int64_t vocab, Embedding tied)
    : dim(dim), vocab(vocab), tied(std::move(tied)) {
  reset();
}

void LmHeadImpl::reset() {
  if (!tied)
    weight = register_parameter("weight", weight.defined()
                                              ? torch::empty(weight.sizes(), weight.options())
                                              : torch::empty({vocab, dim}));
}

torch::Tensor LmHeadImpl::forward(const torch::Tensor& x) {
  const auto& w = tied ? tied->weight : weight;
  if (tp) return vocabParallelLogits(x, w, *tp);
  return F::linear(x, w.device() == x.device() ? w : w.to(x.device()));
}

std::vector<torch::Tensor> LmHeadImpl::sharedParameters() const {
  if (!tied) return {};
  return {tied->weight};
}

std::vector<torch::Tensor> linearsOf(const torch::Tensor& x, std::vector<Linear> linears) {
  std::vector<torch::Tensor> out;
  const auto& tp = linears.front()->tp;
  bool together = tp != nullptr;
  for (const auto& l : linears) together = together && l->tp == tp && l->style == TpStyle::kColwise;
  if (!together) {
    for (auto& l : linears) out.push_back(l->forward(x));
    return out;
  }
  std::vector<torch::Tensor> weights;
  for (const auto& l : linears) weights.push_back(l->weight);
  out = columnParallel(x, weights, *tp);
  for (size_t i = 0; i < out.size(); ++i)
    if (linears[i]->bias.defined()) out[i] = out[i] + linears[i]->bias;
  return out;
}

}  // namespace ltrain::models
