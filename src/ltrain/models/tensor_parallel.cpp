#include "ltrain/models/tensor_parallel.h"

#include <torch/torch.h>

#include <stdexcept>

#include "ltrain/common/tensor_storage.h"
#include "ltrain/models/layerwise.h"

namespace ltrain::models {

namespace {
constexpr int64_t kIgnoredTarget = -100;  // data::kIgnoredTarget (models do not include data/)
}  // namespace
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels through autograd's saved data as an address: the model owns it and outlives
// every graph it builds.
int64_t address(TensorParallelism& tp) {
  return reinterpret_cast<int64_t>(&tp);
}
TensorParallelism& from(AutogradContext* ctx) {
  return *reinterpret_cast<TensorParallelism*>(ctx->saved_data["tp"].toInt());
}
TensorParallelGroup& groupOf(const TensorParallelism& tp) {
  if (!tp.group) throw std::logic_error("tensor parallel: the group is not connected yet");
  return *tp.group;
}

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].contiguous().clone();
    groupOf(from(ctx)).allreduceSum(g);
    return {g, torch::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t tp) {
    auto y = x.contiguous().clone();
    groupOf(*reinterpret_cast<TensorParallelism*>(tp)).allreduceSum(y);
    return y;
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

struct GatherLastDim : torch::autograd::Function<GatherLastDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    auto all = groupOf(*reinterpret_cast<TensorParallelism*>(tp)).allgather(x.contiguous());
    return torch::cat(all.unbind(0), -1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& tp = from(ctx);
    const int64_t n = grads[0].size(-1) / tp.size;
    return {grads[0].narrow(-1, tp.rank * n, n).contiguous(), torch::Tensor()};
  }
};

// [B, T, C] <-> [T, B, C] contiguous, so that the group's collectives split T (dimension 0).
torch::Tensor sequenceFirst(const torch::Tensor& x) {
  return x.transpose(0, 1).contiguous();
}

torch::Tensor allgatherSequence(const torch::Tensor& x, TensorParallelism& tp) {
  auto all = groupOf(tp).allgather(sequenceFirst(x));  // [size, T/size, B, C]
  return all.flatten(0, 1).transpose(0, 1);
}

torch::Tensor reduceScatterSequenceOf(const torch::Tensor& x, TensorParallelism& tp) {
  return groupOf(tp).reduceScatter(sequenceFirst(x)).transpose(0, 1);
}

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return reduceScatterSequenceOf(x, *reinterpret_cast<TensorParallelism*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {allgatherSequence(grads[0], from(ctx)), torch::Tensor()};
  }
};

struct GatheredLinears : torch::autograd::Function<GatheredLinears> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList weights,
                               int64_t tp) {
    ctx->saved_data["tp"] = tp;
    variable_list saved{x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    const auto full = allgatherSequence(x, *reinterpret_cast<TensorParallelism*>(tp));
    variable_list out;
    for (const auto& w : weights) out.push_back(torch::nn::functional::linear(full, w));
    return out;
  }
  // Backward runs outside autocast: each product in the gradients' dtype, as forward's was.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& tp = from(ctx);
    const auto saved = ctx->get_saved_variables();
    const auto full = allgatherSequence(saved[0], tp);
    torch::Tensor gx;
    variable_list out{torch::Tensor()};
    for (size_t i = 0; i < grads.size(); ++i) {
      const auto& g = grads[i];
      const auto& w = saved[i + 1];
      if (!g.defined()) {
        out.emplace_back();
        continue;
      }
      const auto dt = g.scalar_type();
      out.push_back(g.flatten(0, -2).t().mm(full.flatten(0, -2).to(dt)).to(w.scalar_type()));
      auto part = g.matmul(w.to(dt));
      gx = gx.defined() ? gx + part : part;
    }
    out[0] = reduceScatterSequenceOf(gx, tp);
    out.emplace_back();  // tp
    return out;
  }
};

// Per token: log(sum over the whole vocabulary of exp(logit - max)) - (target's logit - max), each
// sum taken over the group; backward is softmax - onehot on this rank's slice, no communication
// (the head's input gradient is summed over the group by its columnParallel).
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, int64_t tp_address) {
    auto& tp = *reinterpret_cast<TensorParallelism*>(tp_address);
    auto& group = groupOf(tp);
    const int64_t n = logits.size(-1), first = tp.rank * n;
    auto max = std::get<0>(group.allgather(std::get<0>(logits.max(-1)).contiguous()).max(0));
    auto z = logits - max.unsqueeze(-1);
    auto exp = z.exp();
    auto sum = exp.sum(-1);
    group.allreduceSum(sum);
    const auto outside = targets.lt(first).logical_or(targets.ge(first + n));
    const auto local = (targets - first).masked_fill(outside, 0);
    auto target_z = z.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0);
    group.allreduceSum(target_z);
    exp.div_(sum.unsqueeze(-1));  // this slice of the softmax
    ctx->save_for_backward({exp, local, outside});
    return sum.log() - target_z;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto g = saved[0].clone();
    const auto hit = saved[2].logical_not().to(g.scalar_type()).unsqueeze(-1);
    g.scatter_add_(-1, saved[1].unsqueeze(-1), -hit);
    g.mul_(grads[0].unsqueeze(-1));
    return {g, torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor copyToTensorParallel(const torch::Tensor& x, TensorParallelism& tp) {
  return CopyToGroup::apply(x, address(tp));
}

torch::Tensor reduceFromTensorParallel(const torch::Tensor& x, TensorParallelism& tp) {
  return ReduceFromGroup::apply(x, address(tp));
}

torch::Tensor reduceScatterSequence(const torch::Tensor& x, TensorParallelism& tp) {
  return ReduceScatterSequence::apply(x, address(tp));
}

torch::Tensor gatherLastDim(const torch::Tensor& x, TensorParallelism& tp) {
  return GatherLastDim::apply(x, address(tp));
}

}  // namespace

std::vector<torch::Tensor> columnParallel(const torch::Tensor& x,
                                          const std::vector<torch::Tensor>& weights,
                                          TensorParallelism& tp) {
  if (tp.sequence_parallel) return GatheredLinears::apply(x, at::TensorList(weights), address(tp));
  const auto in = copyToTensorParallel(x, tp);
  std::vector<torch::Tensor> out;
  for (const auto& w : weights) out.push_back(torch::nn::functional::linear(in, w));
  return out;
}

torch::Tensor leaveTensorParallel(const torch::Tensor& x, TensorParallelism& tp) {
  return tp.sequence_parallel ? reduceScatterSequence(x, tp) : reduceFromTensorParallel(x, tp);
}

torch::Tensor vocabParallelEmbedding(const torch::Tensor& ids, const torch::Tensor& weight,
                                     TensorParallelism& tp) {
  const int64_t n = weight.size(0), first = tp.rank * n;
  const auto outside = ids.lt(first).logical_or(ids.ge(first + n));
  auto e = torch::nn::functional::embedding((ids - first).masked_fill(outside, 0), weight)
               .masked_fill(outside.unsqueeze(-1), 0.0);
  return leaveTensorParallel(e, tp);
}

torch::Tensor vocabParallelLogits(const torch::Tensor& x, const torch::Tensor& weight,
                                  TensorParallelism& tp) {
  auto logits = columnParallel(x, {weight}, tp)[0];
  return tp.local_logits ? logits : gatherLastDim(logits, tp);
}

torch::Tensor vocabParallelCrossEntropy(const torch::Tensor& local_logits,
                                        const torch::Tensor& targets, TensorParallelism& tp) {
  const auto t = targets.to(local_logits.device()).flatten();
  const auto losses = VocabParallelCrossEntropy::apply(local_logits.flatten(0, -2), t, address(tp));
  // Targets of -100 (chat data's prompts and padding) count for nothing, as cross-entropy's
  // ignore_index: the mean is over the others.
  const auto learned = t.ne(kIgnoredTarget);
  return losses.masked_fill(learned.logical_not(), 0.0).sum() / learned.sum();
}

const TensorSplit& TensorParallelism::split(const std::string& name) const {
  auto it = splits.find(name);
  if (it == splits.end()) throw std::logic_error("tensor parallel: no parameter '" + name + "'");
  return it->second;
}

torch::Tensor TensorParallelism::slice(const std::string& name,
                                       const torch::Tensor& whole_value) const {
  const auto& s = split(name);
  if (s.dim < 0) return whole_value;
  const int64_t part = whole_value.size(s.dim) / s.parts, mine = part / size;
  std::vector<torch::Tensor> pieces;
  for (int64_t j = 0; j < s.parts; ++j)
    pieces.push_back(whole_value.narrow(s.dim, j * part + rank * mine, mine));
  return torch::cat(pieces, s.dim);
}

torch::Tensor TensorParallelism::gather(const std::string& name, const torch::Tensor& local) const {
  const auto& s = split(name);
  if (s.dim < 0) return local;
  auto all = groupOf(*this).allgather(local.contiguous());
  const int64_t run = local.size(s.dim) / s.parts;
  std::vector<torch::Tensor> pieces;
  for (int64_t j = 0; j < s.parts; ++j)
    for (int64_t r = 0; r < size; ++r) pieces.push_back(all[r].narrow(s.dim, j * run, run));
  return torch::cat(pieces, s.dim);
}

void TensorParallelism::fill(Classifier& local) const {
  for (size_t i = 0; i < whole->layers->size(); ++i) fillLayer(i, *local->layers->ptr(i));
}

void TensorParallelism::fillLayer(size_t i, torch::nn::Module& target) const {
  torch::NoGradGuard no_grad;
  const WantedElements all = [](const torch::Tensor& p) {
    return std::pair<int64_t, int64_t>{0, p.numel()};
  };
  auto& layer = *whole->layers->ptr(i);
  auto params = layer.named_parameters();
  if (params.is_empty()) return;  // a tied head: its weight is the embedding's
  for (auto& p : params) p.value().set_data(torch::empty(p.value().sizes(), p.value().options()));
  whole->deferred->fill(i, layer, all);
  auto mine = target.named_parameters();
  for (auto& p : params) mine[p.key()].copy_(slice(whole->layerPrefix(i) + p.key(), p.value()));
  for (auto& p : params) freeStorage(p.value());
}

Classifier wholeModel(const Classifier& model) {
  return model->tp ? model->tp->whole : model;
}

void sumGradientOverGroup(torch::Tensor& param, const std::shared_ptr<TensorParallelism>& tp) {
  param.register_hook([weak = std::weak_ptr<TensorParallelism>(tp)](torch::Tensor g) {
    auto sum = g.contiguous().clone();
    groupOf(*weak.lock()).allreduceSum(sum);
    return sum;
  });
}

}  // namespace ltrain::models
