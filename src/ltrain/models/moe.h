// A mixture-of-experts feed-forward layer (Mixtral's, Qwen3-MoE's): a router scores every token
// against each expert, the token goes to its top-k experts (SwiGLU MLPs) and its output is their
// outputs weighted by the router's probabilities. Dropless: every token reaches all k of its
// experts, whatever their load (no capacity factor). The tokens are grouped by expert so that each
// expert runs one matrix product over its own tokens.
//
// The parameters carry the names of transformers' checkpoints (the hub's files, which
// transformers 5 also writes): <block>.gate.weight [experts, n_embd] and
// <block>.experts.<e>.<gate|up|down>.weight, one matrix each, so that HF weights load and export
// as they are.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ltrain::models {

struct MoeShape {
  int64_t experts = 0;  // 0: a dense MLP instead
  int64_t top_k = 0;
  int64_t width = 0;  // each expert's SwiGLU width
  // Mixtral always renormalises the top-k probabilities to sum to 1; Qwen3-MoE where
  // norm_topk_prob is set.
  bool norm_topk = true;
  std::string block = "block_sparse_moe";  // the layer's name in the decoder layer
  // An expert's three matrices as the checkpoints name them (Mixtral's w1, w3, w2).
  std::string gate = "w1", up = "w3", down = "w2";
};

// One matrix, `weight` [out, in], applied as x W^T. Not a models::Linear: LoRA and tensor
// parallelism take over Linears, and transformers' experts are not nn.Linear either.
struct MatrixImpl : torch::nn::Module {
  MatrixImpl(int64_t in, int64_t out);
  torch::Tensor weight;
};
TORCH_MODULE(Matrix);

struct ExpertImpl : torch::nn::Module {
  ExpertImpl(int64_t n_embd, const MoeShape& shape);
  torch::Tensor forward(const torch::Tensor& x);  // [tokens, n_embd] -> [tokens, n_embd]
  Matrix gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(Expert);

// dist.expert_parallel: the all-to-all over one expert-parallel group, supplied by the parallel
// plan (models does not depend on distributed).
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // Rows of `in` go to the group's ranks, send[r] of them to rank r in rank order; returns the
  // rows received, recv[r] from rank r, in rank order.
  virtual torch::Tensor allToAll(const torch::Tensor& in, const std::vector<int64_t>& send,
                                 const std::vector<int64_t>& recv) = 0;
};

struct MoeBlockImpl : torch::nn::Module {
  MoeBlockImpl(int64_t n_embd, const MoeShape& shape);
  torch::Tensor forward(const torch::Tensor& x);  // [..., n_embd]
  MoeShape shape;
  Matrix gate{nullptr};  // the router
  // The experts this module holds: all of them, or under dist.expert_parallel this rank's run of
  // them, experts[i] being expert first + i (registered under its number in the whole model).
  std::vector<Expert> experts;
  int64_t first = 0;
  std::shared_ptr<torch::nn::Module> expert_list;
  std::shared_ptr<ExpertExchange> exchange;  // set: the other experts are on the group's ranks

 private:
  // The tokens' rows grouped by expert (counts: per expert, on the host) through the experts:
  // here, or on the ranks holding them.
  torch::Tensor runLocal(const torch::Tensor& grouped, const int64_t* counts);
  torch::Tensor runExchanged(const torch::Tensor& grouped, const torch::Tensor& counts);
};
TORCH_MODULE(MoeBlock);

// dist.expert_parallel: in every MoeBlock of `model`, keeps the experts of the exchange's rank
// (experts [rank E/size, (rank + 1) E/size)), drops the others' modules, and sends their tokens
// through `exchange`. Returns the names of the whole model's expert parameters, each with the
// rank of the group that holds it.
std::map<std::string, int64_t> splitExperts(torch::nn::Module& model,
                                            const std::shared_ptr<ExpertExchange>& exchange);
// Whether `model`'s forward exchanges tokens with other ranks (every rank of the group must then
// run as many forwards).
bool exchangesTokens(torch::nn::Module& model);

// The routers' statistics of the forward that runs on this thread while one is in scope: what
// transformers' load_balancing_loss_func computes the auxiliary loss from. Thread-local rather
// than a forward output, as data.packing's positions (packing.h): the layers' forward(x) stays
// the one every other path calls.
class RouterTally {
 public:
  RouterTally();
  ~RouterTally();
  RouterTally(const RouterTally&) = delete;
  RouterTally& operator=(const RouterTally&) = delete;

  int64_t layers() const { return static_cast<int64_t>(counts_.size()); }
  // transformers' load-balancing loss: E x sum over experts of (the share of top-k choices it got)
  // x (its mean router probability), both taken over every layer's tokens together. Differentiable
  // through the probabilities.
  torch::Tensor auxLoss() const;
  // Tokens each expert of each layer got, [layers, experts] float (top-k choices, so each row sums
  // to k x tokens).
  torch::Tensor counts() const;

 private:
  friend class MoeBlockImpl;
  void add(torch::Tensor counts, torch::Tensor prob_sums, int64_t rows);
  RouterTally* previous_;
  std::vector<torch::Tensor> counts_, prob_sums_;
  int64_t rows_ = 0;
};

// The tally in scope on this thread, or nullptr.
RouterTally* routerTally();

}  // namespace ltrain::models
