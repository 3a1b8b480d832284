#include "ltrain/distributed/sharded_parameters.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "ltrain/common/allocator.h"
#include "ltrain/common/mapped_memory.h"
#include "ltrain/common/tensor_memory.h"
#include "ltrain/common/tensor_storage.h"
#include "ltrain/distributed/process_group.h"

namespace ltrain::distributed {
namespace {

// Identity forward; its backward runs before the backward of what produced its input: the unit
// is gathered there.
struct GatherBeforeBackward : torch::autograd::Function<GatherBeforeBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               ShardedParameters* owner, int64_t unit) {
    ctx->saved_data["owner"] = reinterpret_cast<int64_t>(owner);
    ctx->saved_data["unit"] = unit;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* owner = reinterpret_cast<ShardedParameters*>(ctx->saved_data["owner"].toInt());
    owner->beforeBackward(static_cast<size_t>(ctx->saved_data["unit"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::vector<int64_t> unitsOfLayers(const std::vector<std::vector<torch::Tensor>>& layer_params,
                                   config::FsdpUnit unit) {
  const size_t n = layer_params.size();
  std::vector<size_t> parent(n);
  std::iota(parent.begin(), parent.end(), size_t{0});
  auto find = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  auto join = [&](size_t a, size_t b) { parent[find(a)] = find(b); };
  std::map<const c10::TensorImpl*, size_t> owner;  // a parameter's first layer
  int64_t first_with_params = -1;
  for (size_t i = 0; i < n; ++i) {
    if (layer_params[i].empty()) continue;
    if (first_with_params < 0) first_with_params = static_cast<int64_t>(i);
    if (unit == config::FsdpUnit::kModel) join(i, static_cast<size_t>(first_with_params));
    for (const auto& p : layer_params[i]) {
      auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), i);
      if (!fresh) join(i, it->second);
    }
  }
  std::vector<int64_t> out(n, -1);
  std::map<size_t, int64_t> id;  // root -> unit, numbered by first layer
  for (size_t i = 0; i < n; ++i) {
    if (layer_params[i].empty()) continue;
    auto [it, fresh] = id.emplace(find(i), static_cast<int64_t>(id.size()));
    out[i] = it->second;
  }
  return out;
}

ShardedParameters::ShardedParameters(ProcessGroup& pg, std::vector<UnitInit> units,
                                     std::vector<int64_t> unit_of_layer, bool prefetch,
                                     torch::ScalarType gathered_dtype)
    : pg_(pg), unit_of_layer_(std::move(unit_of_layer)), prefetch_(prefetch) {
  torch::NoGradGuard no_grad;
  for (auto& init : units) {
    Unit u;
    u.frozen = init.frozen;
    for (auto& piece : init.pieces) {
      Part part;
      part.layout = std::move(piece.layout);
      part.shard = std::move(piece.shard);
      // Parameters held in bf16 (a frozen base under lora.base_dtype) are gathered as they are.
      const auto held = part.layout.params.front().scalar_type();
      part.full =
          mappedZeros(part.layout.padded, part.layout.params.front().options().dtype(
                                              held == torch::kBFloat16 ? held : gathered_dtype));
      viewParameters(part);
      freeStorage(part.full);
      u.parts.push_back(std::move(part));
    }
    units_.push_back(std::move(u));
  }
  for (auto& u : units_) u.first_layer = unit_of_layer_.size(), u.last_layer = 0;
  for (size_t i = 0; i < unit_of_layer_.size(); ++i) {
    if (unit_of_layer_[i] < 0) continue;
    Unit& u = units_.at(static_cast<size_t>(unit_of_layer_[i]));
    u.first_layer = std::min(u.first_layer, i), u.last_layer = std::max(u.last_layer, i);
  }
  backward_order_.resize(units_.size());
  std::iota(backward_order_.begin(), backward_order_.end(), size_t{0});
  std::sort(backward_order_.begin(), backward_order_.end(),
            [&](size_t a, size_t b) { return units_[a].last_layer > units_[b].last_layer; });
}

ShardedParameters::~ShardedParameters() {
  for (auto& u : units_)
    for (auto& part : u.parts)
      if (part.gathering) part.gathering->wait();
}

// The parameters become views of the part's buffer (their values are copied in first).
void ShardedParameters::viewParameters(Part& part) {
  torch::NoGradGuard no_grad;
  const auto& l = part.layout;
  for (size_t i = 0; i < l.params.size(); ++i) {
    auto p = l.params[i];
    auto view = part.full.narrow(0, l.offsets[i], p.numel()).view(p.sizes());
    if (hasStorage(p) && p.data_ptr() != view.data_ptr()) view.copy_(p.detach());
    p.set_data(view);
  }
}

void ShardedParameters::gather(size_t i, bool wait) {
  Unit& u = units_[i];
  if (!u.gathered && !u.parts.front().gathering) {
    for (auto& part : u.parts) {
      allocateStorage(part.full, Transient::kGatheredUnits);
      // Cast before the all-gather (bf16 units): half the traffic, and the cast is each rank's.
      part.cast = part.shard.detach().to(part.full.scalar_type());
      part.gathering = pg_.allgatherInto(part.full, part.cast);
    }
    peak_gathered_ = std::max(peak_gathered_, gatheredBytes());
  }
  if (wait && u.parts.front().gathering) {
    for (auto& part : u.parts) {
      pg_.wait(part.gathering);
      part.gathering.reset();
      part.cast = torch::Tensor();
    }
    u.gathered = true;
  }
}

void ShardedParameters::release(size_t i) {
  Unit& u = units_[i];
  for (auto& part : u.parts) {
    if (part.gathering) pg_.wait(part.gathering), part.gathering.reset();  // not under a collective
    part.cast = torch::Tensor();
    freeStorage(part.full, Transient::kGatheredUnits);
  }
  u.gathered = false;
}

void ShardedParameters::gradientsIn(size_t u) {
  if (!units_[u].frozen) release(u);
  // The activations this unit's backward freed leave the heap here: the memory the reduced
  // slices and the next units take is mapped of its own (mapped_memory.h), so what the heap kept
  // would only add to the peak, which comes late in backward (110 MiB of the 302M GPT's
  // 4-rank peak, bench/RESULTS.md).
  giveBackFreedMemory();
}

void ShardedParameters::releaseAll() {
  for (size_t i = 0; i < units_.size(); ++i) release(i);
}

void ShardedParameters::beforeLayer(size_t layer) {
  const int64_t u = unit_of_layer_.at(layer);
  if (u < 0) return;
  const auto i = static_cast<size_t>(u);
  gather(i, /*wait=*/true);
  // Units are numbered in forward order: the next one travels while this one computes.
  if (prefetch_ && layer == units_[i].first_layer && i + 1 < units_.size()) gather(i + 1, false);
}

torch::Tensor ShardedParameters::afterLayer(size_t layer, torch::Tensor out) {
  const int64_t u = unit_of_layer_.at(layer);
  if (u < 0 || layer != units_[static_cast<size_t>(u)].last_layer) return out;
  release(static_cast<size_t>(u));
  if (!torch::GradMode::is_enabled() || !out.requires_grad()) return out;
  return GatherBeforeBackward::apply(out, this, u);
}

void ShardedParameters::beforeBackward(size_t u) {
  // The later units' backward is over: every use of their frozen parameters lies between this
  // output and the loss.
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].frozen && units_[i].gathered && units_[i].first_layer > units_[u].last_layer)
      release(i);
  gather(u, /*wait=*/true);
  if (!prefetch_) return;
  auto at = std::find(backward_order_.begin(), backward_order_.end(), u);
  if (at != backward_order_.end() && at + 1 != backward_order_.end()) gather(*(at + 1), false);
}

void ShardedParameters::forEachUnitOnHost(
    bool main, const std::vector<size_t>& order,
    const std::function<void(size_t, const std::vector<torch::Tensor>&)>& fn) {
  torch::NoGradGuard no_grad;
  size_t k = 0;
  for (size_t u : order)
    for (auto& part : units_[u].parts) {
      const auto& l = part.layout;
      // The slices' own values (fp32 where the units are gathered in bf16), into a buffer of
      // their own: the parameters' gathered memory is not touched.
      auto full = torch::empty({l.padded}, part.shard.options());
      const auto bytes = static_cast<int64_t>(full.nbytes());
      addTransientBytes(Transient::kGatheredUnits, bytes);
      auto in = part.shard.detach();
      pg_.wait(pg_.allgatherInto(full, in));
      std::vector<torch::Tensor> host;
      if (main)
        for (size_t j = 0; j < l.params.size(); ++j) {
          const auto& p = l.params[j];
          host.push_back(full.narrow(0, l.offsets[j], p.numel())
                             .view(p.sizes())
                             .to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
        }
      full = torch::Tensor();
      addTransientBytes(Transient::kGatheredUnits, -bytes);
      if (main) fn(k, host);
      host.clear();
      giveBackFreedMemory();  // the host copies, from the heap: one unit's at a time
      ++k;
    }
}

void ShardedParameters::withWholeOnHost(bool main, const std::function<void()>& fn) {
  std::vector<const Part*> parts;
  std::vector<size_t> order(units_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (const auto& u : units_)
    for (const auto& part : u.parts) parts.push_back(&part);
  std::vector<std::vector<torch::Tensor>> host(parts.size());
  forEachUnitOnHost(main, order,
                    [&](size_t k, const std::vector<torch::Tensor>& t) { host[k] = t; });
  if (!main) return;
  auto restore = [&] {  // views are made over the memory, so it is there for a moment
    for (auto& u : units_)
      for (auto& part : u.parts)
        allocateStorage(part.full), viewParameters(part), freeStorage(part.full);
  };
  for (size_t k = 0; k < parts.size(); ++k)
    for (size_t j = 0; j < host[k].size(); ++j) {
      auto p = parts[k]->layout.params[j];
      p.set_data(host[k][j]);
    }
  try {
    fn();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

int64_t ShardedParameters::shardBytes() const {
  int64_t b = 0;
  for (const auto& u : units_)
    for (const auto& part : u.parts)
      b += part.shard.numel() * static_cast<int64_t>(part.shard.element_size());
  return b;
}

int64_t ShardedParameters::gatheredBytes() const {
  int64_t b = 0;
  for (const auto& u : units_)
    for (const auto& part : u.parts) b += static_cast<int64_t>(part.full.storage().nbytes());
  return b;
}

}  // namespace ltrain::distributed
