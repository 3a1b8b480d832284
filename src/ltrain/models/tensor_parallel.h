// dist.tensor_parallel: Megatron-LM's tensor parallelism, the collectives and the bookkeeping
// of split parameters; models/parallelize.h applies it to a family by its spec's plan. Each rank of
// a tensor-parallel group holds 1/tp of every attention and MLP matrix and of the vocabulary:
//   column-parallel (split along the output): q/k/v (GPT-2's fused c_attn, llama's q_proj,
//     k_proj, v_proj: whole heads), the MLP's up projections (c_fc; gate_proj, up_proj), the
//     token embedding and the head (rows of the vocabulary);
//   row-parallel (split along the input): the attention's output and the MLP's down projection
//     (c_proj; o_proj, down_proj), whose partial products are summed by one all-reduce;
//   replicated: norms, biases added after that all-reduce, GPT-2's position embedding.
// A block then costs one all-reduce in forward after attention and one after the MLP, and one
// each in backward where their inputs' gradients meet (Megatron's f and g). The loss is the
// vocabulary-parallel cross-entropy: no rank makes the whole [tokens, vocab] logits in training.
//
// Values: the model also keeps a "whole" twin built deferred (models/layerwise.h: the full shapes,
// no memory), whose DeferredValues are the random initialisation, model.init_from's file or a
// checkpoint. fill() makes each whole layer in turn, keeps this rank's part and lets it go: the
// rank's values are the one-process model's, sliced, and it never holds more than one whole layer.
#pragma once
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/models/model.h"

namespace ltrain::models {

// The collectives over one tensor-parallel group, supplied by the parallel plan once the group
// exists (models does not depend on distributed).
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual void allreduceSum(torch::Tensor& t) = 0;  // in place
  // Every rank's `t` (all the same shape), stacked in rank order: [size, ...].
  virtual torch::Tensor allgather(const torch::Tensor& t) = 0;
  // This rank's 1/size of the sum of every rank's `t` (dimension 0 divided): [t.size(0)/size, ...].
  virtual torch::Tensor reduceScatter(const torch::Tensor& t) = 0;
};

// How a parameter is split: along `dim`, into `parts` equal runs (GPT-2's c_attn holds q, k and v
// one after another: each is split), of which this rank holds the `rank`-th 1/size of each. dim
// -1: replicated.
struct TensorSplit {
  int64_t dim = -1;
  int64_t parts = 1;
  std::vector<int64_t> whole_shape;
};

struct TensorParallelism {
  int64_t rank = 0, size = 1;
  std::shared_ptr<TensorParallelGroup> group;  // set by the plan before the first forward
  Classifier whole{nullptr};                   // full shapes, no memory; whole->deferred: values
  std::map<std::string, TensorSplit> splits;   // by parameter name
  // Set while the training step computes its loss (LocalLogits): the head then gives this rank's
  // vocabulary slice of the logits (vocabParallelCrossEntropy), else the gathered logits. (Not the
  // head's is_training(): a tied llama head is in no registered tree, so eval() never reaches it.)
  bool local_logits = false;
  // dist.sequence_parallel (Megatron's sequence parallelism): outside the attention and the MLP
  // (norms, residual stream, position embedding) each rank holds 1/size of the sequence, not a
  // copy of all of it; entering a split layer all-gathers it, leaving one reduce-scatters. The
  // parameters used there (norms, biases added after the reduce-scatter, GPT-2's position
  // embedding) see part of the sequence: their gradients are summed over the group.
  bool sequence_parallel = false;

  const TensorSplit& split(const std::string& name) const;
  // This rank's part of parameter `name`'s whole value, and the whole value from every rank's
  // part (collective over the group).
  torch::Tensor slice(const std::string& name, const torch::Tensor& whole_value) const;
  torch::Tensor gather(const std::string& name, const torch::Tensor& local) const;
  // Writes every parameter of `local` (this rank's model) from whole->deferred, a whole layer at a
  // time; or those of its layer `layer` alone (`target`, its parameters with memory).
  void fill(Classifier& local) const;
  void fillLayer(size_t layer, torch::nn::Module& target) const;
};

// The whole model a tensor-parallel one is a rank's part of (its deferred twin: names, shapes,
// values by layer), or the model itself: what checkpoints, init_from and counts read.
Classifier wholeModel(const Classifier& model);

// Column-parallel layers on one input: x (Megatron's f: identity forward, gradient summed over the
// group in backward; or all-gathered along T under sequence parallelism)
// times each of `weights` ([out/size, in]). Under sequence parallelism only this rank's part of the
// sequence is kept for backward, which gathers it again (Megatron-LM): the gathered input is not
// held between forward and backward.
std::vector<torch::Tensor> columnParallel(const torch::Tensor& x,
                                          const std::vector<torch::Tensor>& weights,
                                          TensorParallelism& tp);
// Out of a row-parallel layer (Megatron's g: summed over the group in forward, identity backward;
// under sequence parallelism reduce-scattered along T, all-gathered in backward).
torch::Tensor leaveTensorParallel(const torch::Tensor& x, TensorParallelism& tp);
// An embedding whose rows [rank * V/size, ...) are `weight`: out-of-range ids give zeros, and the
// sum over the group is the whole table's lookup (leaveTensorParallel: under sequence parallelism
// this rank's part of the sequence).
torch::Tensor vocabParallelEmbedding(const torch::Tensor& ids, const torch::Tensor& weight,
                                     TensorParallelism& tp);
// The head's logits: this rank's vocabulary slice while tp.local_logits, else all of them.
torch::Tensor vocabParallelLogits(const torch::Tensor& x, const torch::Tensor& weight,
                                  TensorParallelism& tp);
// While it lives, tp.local_logits is set.
class LocalLogits {
 public:
  explicit LocalLogits(TensorParallelism& tp) : tp_(tp) { tp_.local_logits = true; }
  ~LocalLogits() { tp_.local_logits = false; }
  LocalLogits(const LocalLogits&) = delete;
  LocalLogits& operator=(const LocalLogits&) = delete;

 private:
  TensorParallelism& tp_;
};
// Mean cross-entropy of logits split over the vocabulary ([B, T, V/size] here) against whole
// token ids [B, T]: max, sum of exponentials and the target's logit each summed over the group.
torch::Tensor vocabParallelCrossEntropy(const torch::Tensor& local_logits,
                                        const torch::Tensor& targets, TensorParallelism& tp);

// Sums `param`'s gradient over the group as it is made, before any data-parallel reduction sees
// it: a replicated parameter that each rank's part of the sequence, or of the heads, reaches.
void sumGradientOverGroup(torch::Tensor& param, const std::shared_ptr<TensorParallelism>& tp);

}  // namespace ltrain::models
