// The Linear, Embedding and head modules the transformer families are built of: plain, each is
// torch's (same parameter names, same values), and dist.tensor_parallel takes them over from
// outside: parallelize() (models/parallelize.h) slices their parameters and sets their style, as
// PyTorch's parallelize_module gives an nn.Linear a ParallelStyle. The models never name tensor
// parallelism; a module whose heads are split infers how many it holds from its inputs' widths.
#pragma once
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "ltrain/models/model.h"
#include "ltrain/models/spec.h"

namespace ltrain::models {

struct TensorParallelism;

// What parallelize() sets on a module of its plan; no tp: the module is plain.
struct Parallelizable {
  virtual ~Parallelizable() = default;
  TpStyle style = TpStyle::kColwise;
  std::shared_ptr<TensorParallelism> tp;
};

// y = x W^T + b (torch::nn::Linear's, with its initialisation). finetune.method lora
// (models/lora.h) adds a low-rank update from outside: y + lora_B(lora_A(dropout(x))) * scaling,
// as PEFT's lora.Linear, under the names PEFT saves (q_proj.lora_A.weight). With lora.use_dora,
// PEFT's DoRA: a magnitude m per output (q_proj.lora_magnitude_vector) scales the direction of
// W + scaling B A, whose row norms are held constant in backward. lora.base_dtype bf16 holds the
// frozen weight in bf16.
struct LinearImpl : torch::nn::Cloneable<LinearImpl>, Parallelizable {
  LinearImpl(int64_t in, int64_t out, bool bias = true);
  void reset() override;  // registers parameters of the current shapes again (clone)
  torch::Tensor forward(const torch::Tensor& x);
  // A (Kaiming-uniform, as torch's Linear and PEFT draw it) and B (zero): the update starts at 0.
  // `dora`: the magnitude too, starting at W's row norms (the update's direction unchanged).
  void addLora(int64_t rank, double alpha, double dropout, bool dora);
  // weight += scaling * B A (DoRA: then each row scaled to its magnitude), and the adapters gone:
  // the plain linear the update trained.
  void mergeLora();
  torch::Tensor weight, bias;
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  torch::nn::Dropout lora_dropout{nullptr};
  double lora_scaling = 0;
  torch::Tensor lora_magnitude;  // DoRA's m, [out]; undefined: plain LoRA

 private:
  // DoRA's m / ||W + scaling B A|| per row, the norm detached (DoRA's section 4.3, as PEFT).
  torch::Tensor doraScale() const;
  // x W^T (+ b): a frozen weight held in bf16 (lora.base_dtype) multiplies in x's dtype.
  torch::Tensor base(const torch::Tensor& x, bool with_bias) const;
};
TORCH_MODULE(Linear);

// A lookup table: `weight` [rows, dim], as made by the family (torch::nn::Embedding draws N(0, 1);
// llama leaves it to its initialisation).
struct EmbeddingImpl : torch::nn::Cloneable<EmbeddingImpl>, Parallelizable {
  explicit EmbeddingImpl(torch::Tensor weight);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

// Logits from the final hidden states, by the head's own matrix [vocab, dim], or by the token
// embedding's (tied: GPT-2's and Llama's tie_word_embeddings), which it then does not register:
// the parameter is counted, optimised, reduced and saved once, as transformers saves a tied
// lm_head once. On another pipeline stage's device the tied matrix is copied there and autograd
// carries the gradient back; a dp replica's head keeps the original's, copied to its device.
struct LmHeadImpl : torch::nn::Cloneable<LmHeadImpl>, Parallelizable, UsesSharedParameters {
  LmHeadImpl(int64_t dim, int64_t vocab, Embedding tied);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  std::vector<torch::Tensor> sharedParameters() const override;
  int64_t dim, vocab;
  Embedding tied{nullptr};
  torch::Tensor weight;
};
TORCH_MODULE(LmHead);

// Several linears of one input (q, k and v; gate and up). Column-parallel, the input enters the
// group once for all of them (one all-reduce of its gradient, or one all-gather of the sequence).
std::vector<torch::Tensor> linearsOf(const torch::Tensor& x, std::vector<Linear> linears);

}  // namespace ltrain::models
