#include "ltrain/models/moe.h"

#include <fmt/format.h>
#include <torch/torch.h>

namespace ltrain::models {
namespace {

namespace F = torch::nn::functional;

thread_local RouterTally* current = nullptr;

}  // namespace

MatrixImpl::MatrixImpl(int64_t in, int64_t out) {
  weight = register_parameter("weight", torch::empty({out, in}));
}

ExpertImpl::ExpertImpl(int64_t n_embd, const MoeShape& shape) {
  gate = register_module(shape.gate, Matrix(n_embd, shape.width));
  up = register_module(shape.up, Matrix(n_embd, shape.width));
  down = register_module(shape.down, Matrix(shape.width, n_embd));
}

torch::Tensor ExpertImpl::forward(const torch::Tensor& x) {
  return F::linear(F::silu(F::linear(x, gate->weight)) * F::linear(x, up->weight), down->weight);
}

MoeBlockImpl::MoeBlockImpl(int64_t n_embd, const MoeShape& s) : shape(s) {
  gate = register_module("gate", Matrix(n_embd, s.experts));
  expert_list = std::make_shared<torch::nn::Module>();
  for (int64_t e = 0; e < s.experts; ++e)
    experts.push_back(expert_list->register_module(std::to_string(e), Expert(n_embd, s)));
  register_module("experts", expert_list);
}

// transformers' MixtralTopKRouter / Qwen3MoeTopKRouter, then MixtralExperts' sum, with the
// tokens grouped by expert instead of looked for expert by expert.
torch::Tensor MoeBlockImpl::forward(const torch::Tensor& input) {
  const int64_t n_embd = input.size(-1), k = shape.top_k;
  const auto x = input.reshape({-1, n_embd});  // [N, n_embd]
  const auto logits = F::linear(x, gate->weight);
  const auto probs = torch::softmax(logits.to(torch::kFloat), -1);  // [N, E], in float32
  auto [weights, chosen] = probs.topk(k, -1);                       // [N, k]
  if (shape.norm_topk) weights = weights / weights.sum(-1, /*keepdim=*/true);

  // Each (token, choice) pair, grouped by expert; the stable sort keeps the tokens in order
  // within an expert.
  const auto flat = chosen.reshape({-1});
  const auto order = flat.argsort(/*stable=*/true);
  const auto token = order.div(k, "floor");
  const auto counts = torch::bincount(flat, {}, shape.experts);
  const auto grouped = x.index_select(0, token);
  const auto ran = exchange ? runExchanged(grouped, counts)
                            : runLocal(grouped, counts.cpu().data_ptr<int64_t>());
  const auto y = ran * weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  // Summed into each token in expert order, as transformers adds expert by expert.
  auto out = torch::zeros_like(x).index_add(0, token, y.to(x.scalar_type()));

  if (current && is_training()) current->add(counts.to(torch::kFloat), probs.sum(0), x.size(0));
  return out.view(input.sizes());
}

// An expert without tokens runs on none: its gradient is then zeros rather than none, as for
// transformers' experts, which are one [experts, ...] tensor (AdamW then moves it by its moments
// and weight decay; and DDP finds every parameter used).
torch::Tensor MoeBlockImpl::runLocal(const torch::Tensor& grouped, const int64_t* counts) {
  std::vector<torch::Tensor> outs;
  int64_t at = 0;
  for (size_t e = 0; e < experts.size(); at += counts[e], ++e)
    outs.push_back(experts[e](grouped.narrow(0, at, counts[e])));
  return torch::cat(outs);
}

namespace {

// The all-to-all as an autograd step: backward sends the gradients back the way the rows came.
struct ExchangeRows : torch::autograd::Function<ExchangeRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in,
                               std::vector<int64_t> send, std::vector<int64_t> recv,
                               ExpertExchange* exchange) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    // The group outlives every step's graph (the plan holds it for the run).
    ctx->saved_data["exchange"] = reinterpret_cast<int64_t>(exchange);
    return exchange->allToAll(in, send, recv);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* exchange = reinterpret_cast<ExpertExchange*>(ctx->saved_data["exchange"].toInt());
    const auto send = ctx->saved_data["send"].toIntVector();
    const auto recv = ctx->saved_data["recv"].toIntVector();
    return {exchange->allToAll(grads[0].contiguous(), recv, send), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

// Rank r of the group holds experts [r L, (r + 1) L). The rows go to their experts' ranks (they
// are grouped by expert, so by rank too), each rank runs its experts over what it received from
// every rank, and the outputs go back in the order they came.
torch::Tensor MoeBlockImpl::runExchanged(const torch::Tensor& grouped,
                                         const torch::Tensor& counts) {
  const int64_t n = exchange->size(), local = static_cast<int64_t>(experts.size());
  const auto mine = counts.cpu();
  const auto* c = mine.data_ptr<int64_t>();
  std::vector<int64_t> send(static_cast<size_t>(n), 0), each(static_cast<size_t>(n), local);
  for (int64_t e = 0; e < shape.experts; ++e) send[static_cast<size_t>(e / local)] += c[e];
  // What every rank sends this rank's experts: from[s][j], rows of expert j from rank s.
  const auto from = exchange->allToAll(counts.view({-1, 1}), each, each).view({n, local}).cpu();
  const auto* f = from.data_ptr<int64_t>();
  std::vector<int64_t> recv(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < local; ++j) recv[static_cast<size_t>(r)] += f[r * local + j];
  const auto got = ExchangeRows::apply(grouped, send, recv, exchange.get());

  // Received by sender, then expert: regrouped by expert, then sender.
  std::vector<int64_t> by_expert, expert_rows(static_cast<size_t>(local), 0);
  for (int64_t j = 0; j < local; ++j)
    for (int64_t r = 0, start = 0; r < n; ++r) {
      int64_t at = start;
      for (int64_t i = 0; i < j; ++i) at += f[r * local + i];
      for (int64_t i = 0; i < f[r * local + j]; ++i) by_expert.push_back(at + i);
      expert_rows[static_cast<size_t>(j)] += f[r * local + j];
      start += recv[static_cast<size_t>(r)];
    }
  const auto perm = torch::tensor(by_expert, torch::kLong).to(grouped.device());
  const auto ran = runLocal(got.index_select(0, perm), expert_rows.data());
  const auto back =
      torch::empty_like(perm).scatter_(0, perm, torch::arange(perm.numel(), perm.options()));
  return ExchangeRows::apply(ran.index_select(0, back), recv, send, exchange.get());
}

std::map<std::string, int64_t> splitExperts(torch::nn::Module& model,
                                            const std::shared_ptr<ExpertExchange>& exchange) {
  std::map<std::string, int64_t> owners;
  for (const auto& named : model.named_modules()) {
    auto* moe = dynamic_cast<MoeBlockImpl*>(named.value().get());
    if (!moe) continue;
    const int64_t local = moe->shape.experts / exchange->size();
    const int64_t first = exchange->rank() * local;
    const std::string prefix = named.key().empty() ? "" : named.key() + ".";
    for (int64_t e = 0; e < moe->shape.experts; ++e)
      for (const auto& p : moe->experts[static_cast<size_t>(e)]->named_parameters())
        owners[fmt::format("{}experts.{}.{}", prefix, e, p.key())] = e / local;
    std::vector<Expert> kept;
    for (int64_t e = 0; e < moe->shape.experts; ++e)
      if (e >= first && e < first + local)
        kept.push_back(moe->experts[static_cast<size_t>(e)]);
      else
        moe->expert_list->unregister_module(std::to_string(e));
    moe->experts = std::move(kept);
    moe->first = first;
    moe->exchange = exchange;
  }
  return owners;
}

bool exchangesTokens(torch::nn::Module& model) {
  for (const auto& m : model.modules())
    if (auto* moe = dynamic_cast<MoeBlockImpl*>(m.get()); moe && moe->exchange) return true;
  return false;
}

RouterTally::RouterTally() : previous_(current) {
  current = this;
}

RouterTally::~RouterTally() {
  current = previous_;
}

void RouterTally::add(torch::Tensor counts, torch::Tensor prob_sums, int64_t rows) {
  counts_.push_back(std::move(counts));
  prob_sums_.push_back(std::move(prob_sums));
  rows_ += rows;
}

torch::Tensor RouterTally::auxLoss() const {
  const auto rows = static_cast<double>(rows_);
  const auto share = torch::stack(counts_).sum(0) / rows;    // top-k choices per row
  const auto prob = torch::stack(prob_sums_).sum(0) / rows;  // mean router probability
  return (share * prob).sum() * static_cast<double>(share.size(0));
}

torch::Tensor RouterTally::counts() const {
  return torch::stack(counts_);
}

RouterTally* routerTally() {
  return current;
}

}  // namespace ltrain::models
