#include "ltrain/models/generate.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "ltrain/models/decoding.h"

namespace ltrain::models {
namespace {

// One call of the model over `ids` ([1, T], positions [pos, pos + T)): the logits of the last.
torch::Tensor step(Classifier& model, std::vector<KvCache>& caches, const torch::Tensor& ids,
                   int64_t pos) {
  torch::Tensor x = ids;
  auto& layers = model->layers;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (auto cached = std::dynamic_pointer_cast<CachedLayer>(layers->ptr(i)))
      x = cached->forwardCached(x, pos, caches[i]);
    else
      x = (layers->begin() + static_cast<std::ptrdiff_t>(i))->forward(x);
  }
  return x.select(1, x.size(1) - 1).squeeze(0).to(torch::kCPU, torch::kFloat);  // [V]
}

int64_t sample(torch::Tensor logits, const SamplingOptions& o, at::Generator& gen) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const auto kth = std::get<0>(logits.topk(o.top_k)).min();
    logits.masked_fill_(logits < kth, neg_inf);
  }
  if (o.top_p < 1.0) {
    // The smallest set of most likely tokens whose probability reaches top_p (transformers'
    // TopPLogitsWarper): a token goes when those before it already reach top_p.
    auto [sorted, order] = logits.sort(/*dim=*/0, /*descending=*/true);
    auto probs = sorted.softmax(0);
    auto before = probs.cumsum(0) - probs;
    auto drop = before >= o.top_p;
    drop[0] = false;
    logits.index_put_({order.masked_select(drop)}, neg_inf);
  }
  return logits.softmax(0).multinomial(1, /*replacement=*/false, gen).item<int64_t>();
}

}  // namespace

std::vector<int64_t> generate(Classifier& model, int64_t block_size,
                              const std::vector<int64_t>& prompt, const SamplingOptions& o,
                              const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto gen = at::detail::createCPUGenerator(o.seed);
  std::vector<int64_t> context = prompt;
  if (static_cast<int64_t>(context.size()) > block_size)
    context.erase(context.begin(), context.end() - block_size);
  auto ids = [&](std::vector<int64_t>::const_iterator begin,
                 std::vector<int64_t>::const_iterator end) {
    std::vector<int64_t> v(begin, end);
    return torch::tensor(v, torch::kLong).view({1, -1}).to(device);
  };
  std::vector<KvCache> caches(model->layers->size());
  auto logits = step(model, caches, ids(context.begin(), context.end()), 0);
  int64_t pos = static_cast<int64_t>(context.size());
  std::vector<int64_t> out;
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int64_t next = sample(logits, o, gen);
    out.push_back(next);
    context.push_back(next);
    if (n + 1 == o.max_new_tokens) break;
    if (pos + 1 > block_size) {  // the window is full: rebuild from its newer half
      const int64_t keep = std::max<int64_t>(1, block_size / 2);
      caches.assign(caches.size(), KvCache{});
      logits = step(model, caches, ids(context.end() - keep, context.end()), 0);
      pos = keep;
      continue;
    }
    logits = step(model, caches, ids(context.end() - 1, context.end()), pos);
    ++pos;
  }
  return out;
}

}  // namespace ltrain::models
