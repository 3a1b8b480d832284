#include "ltrain/distributed/bucket_reducer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <set>
#include <tuple>

#include "ltrain/common/mapped_memory.h"
#include "ltrain/common/tensor_memory.h"
#include "ltrain/common/tensor_storage.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/io/json.h"

namespace ltrain::distributed {
namespace {

// A bucket's buffer, which lives only while it is filled and reduced (release_after_reduce).
void releaseBuffer(torch::Tensor& buffer) {
  if (buffer.defined())
    addTransientBytes(Transient::kGradientBuckets, -static_cast<int64_t>(buffer.nbytes()));
  buffer = torch::Tensor();
}

}  // namespace

// Runs after autograd has accumulated a parameter's gradient into .grad.
struct GradReadyHook : torch::autograd::PostAccumulateGradHook {
  GradReadyHook(BucketReducer* reducer, size_t slot) : reducer(reducer), slot(slot) {}
  void operator()(const torch::autograd::Variable&) override { reducer->markReady(slot); }
  BucketReducer* reducer;
  size_t slot;
};

ReducedTensors ReducedTensors::of(const torch::nn::Module& module) {
  ReducedTensors t;
  for (const auto& item : module.named_parameters())
    t.params.emplace_back(item.key(), item.value());
  t.buffers = module.buffers();
  return t;
}

BucketReducer::BucketReducer(ReducedTensors tensors, ProcessGroup& pg, ReducerOptions opts)
    : buffers_(std::move(tensors.buffers)),
      pg_(pg),
      world_(pg.runtime().world_size),
      opts_(std::move(opts)) {
  // Every rank builds its reducers in the same order, so the count names the same one on each.
  static std::atomic<size_t> made{0};
  id_ = made++;
  if (!opts_.collective) opts_.collective = allReduceBuckets(pg_);
  if (scatters() && opts_.extras.count > 0)
    throw std::logic_error("BucketReducer: extra scalars ride on all-reduce buckets only");
  if (opts_.release_after_reduce && !scatters())
    throw std::logic_error("BucketReducer: only reduce-scattered buckets can be released");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> state;
  if (opts_.broadcast_parameters)
    for (auto& [name, p] : tensors.params) state.push_back(p);
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcastCoalesced(state);

  // Buckets: parameters in reverse registration order (roughly the order backward produces their
  // gradients), a bucket per (dtype, device) open at a time, closed when it reaches its limit.
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::vector<int64_t> group_of;          // the caller's group of each, when it chose them
  std::set<const c10::TensorImpl*> seen;  // a tied weight appears under each of its names: keep one
  for (size_t i = 0; i < tensors.params.size(); ++i) {
    const auto& [name, p] = tensors.params[i];
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    params.emplace_back(name, p);
    group_of.push_back(opts_.groups.empty() ? -1 : opts_.groups.at(i));
  }
  std::reverse(params.begin(), params.end());
  std::reverse(group_of.begin(), group_of.end());
  std::vector<size_t> order;
  for (size_t i = 0; i < params.size(); ++i) {
    slots_.push_back({params[i].second, params[i].first, 0, 0, params[i].second.numel()});
    order.push_back(i);
  }
  group_of_ = std::move(group_of);
  layOutBuckets(order);
  ready_.assign(slots_.size(), 0);
  seen_.assign(slots_.size(), 0);
  seen_per_bucket_.assign(buckets_.size(), 0);
  for (size_t s = 0; s < slots_.size(); ++s)
    torch::autograd::impl::set_post_acc_grad_hooks(slots_[s].param,
                                                   std::make_unique<GradReadyHook>(this, s));
}

void BucketReducer::layOutBuckets(const std::vector<size_t>& order) {
  // A bucket per (dtype, device) open at a time, closed when it reaches its limit (the first at
  // first_bucket_mb), over the slots in the given order; or the caller's groups.
  std::map<std::string, std::vector<size_t>> open;  // key -> slots of the open bucket
  std::map<std::string, int64_t> open_bytes, closed_count;
  std::map<int64_t, std::vector<size_t>> chosen;  // the caller's groups
  std::vector<std::vector<size_t>> groups;
  auto close = [&](const std::string& key) {
    if (open[key].empty()) return;
    groups.push_back(open[key]);
    open[key].clear();
    open_bytes[key] = 0;
    ++closed_count[key];
  };
  std::vector<size_t> position(slots_.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  for (size_t s : order) {
    const auto& p = slots_[s].param;
    if (!opts_.groups.empty()) {
      chosen[group_of_[s]].push_back(s);
      continue;
    }
    const std::string key = fmt::format("{}/{}", c10::toString(p.scalar_type()), p.device().str());
    open[key].push_back(s);
    open_bytes[key] += p.numel() * static_cast<int64_t>(p.element_size());
    const double limit_mb = closed_count[key] == 0 ? opts_.first_bucket_mb : opts_.bucket_cap_mb;
    if (open_bytes[key] >= static_cast<int64_t>(limit_mb * 1024 * 1024)) close(key);
  }
  for (auto& [key, s] : open) close(key);
  for (auto& [group, s] : chosen) groups.push_back(s);
  // Same order on every rank: by the position of each bucket's first parameter.
  std::sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  buckets_.clear();
  extras_offset_ = -1;
  for (auto& g : groups) {
    Bucket b;
    int64_t offset = 0;
    for (size_t s : g) {
      slots_[s].bucket = buckets_.size();
      slots_[s].offset = offset;
      offset += slots_[s].numel;
    }
    const auto& first = slots_[g.front()].param;
    const bool last = &g == &groups.back();
    if (last && opts_.extras.count > 0) extras_offset_ = offset;
    const int64_t length = opts_.collective->bufferLength(
        offset + (extras_offset_ >= 0 && last ? static_cast<int64_t>(opts_.extras.count) : 0));
    const auto wire = first.options().dtype(opts_.collective->wireType(first.scalar_type()));
    b.length = length, b.wire = wire;
    if (!opts_.release_after_reduce) b.buffer = torch::zeros({length}, wire);
    if (scatters()) b.shard = mappedZeros(length / world_, wire, Transient::kGradientSlices);
    b.slots = g;
    buckets_.push_back(std::move(b));
  }
  seen_per_bucket_.assign(buckets_.size(), 0);
}

void BucketReducer::rebuildFromReadyOrder() {
  // PyTorch's reducer does this once, after the first step: the buckets are laid out again in
  // the order the gradients became ready, rank 0's order, so that all agree. The parameters left
  // unready (unused) keep their place after the rest.
  std::vector<size_t> order(ready_order_.begin(), ready_order_.end());
  std::vector<char> in(slots_.size(), 0);
  for (size_t s : ready_order_) in[s] = 1;
  for (const auto& b : buckets_)
    for (size_t s : b.slots)
      if (!in[s]) order.push_back(s);
  if (world_ > 1) {
    // Through the store, on the host: a broadcast of a device tensor would copy to the GPU and
    // back, a host synchronisation inside the first step.
    const auto next = io::Json::parse(pg_.broadcastString(fmt::format("bucket_order/{}", id_),
                                                          io::Json(order).dump()))
                          .get<std::vector<size_t>>();
    if (next.size() != order.size())
      throw std::runtime_error(fmt::format(
          "rank 0 laid out {} gradients in its buckets, this rank has {}: the ranks do not train "
          "the same model",
          next.size(), order.size()));
    order = std::move(next);
  }
  layOutBuckets(order);
}

BucketReducer::~BucketReducer() {
  for (auto& s : slots_) torch::autograd::impl::set_post_acc_grad_hooks(s.param, nullptr);
}

double BucketReducer::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
}

void BucketReducer::broadcastCoalesced(const std::vector<torch::Tensor>& tensors) {
  // One broadcast per dtype and device (a pipeline's stages live on several): a flat copy out,
  // broadcast from rank 0, copied back in.
  // Keyed by numbers, so that every rank walks the groups in the same order (as strings,
  // "cuda:10" would sort before "cuda:8").
  std::map<std::tuple<int, int, int>, std::vector<torch::Tensor>> by_type;
  for (const auto& t : tensors)
    by_type[{static_cast<int>(t.scalar_type()), static_cast<int>(t.device().type()),
             static_cast<int>(t.device().index())}]
        .push_back(t);
  for (auto& [type, ts] : by_type) {
    std::vector<torch::Tensor> flat;
    for (auto& t : ts) flat.push_back(t.detach().reshape(-1));
    std::vector<at::Tensor> io{torch::cat(flat)};
    pg_.wait(pg_.broadcast(io));
    int64_t off = 0;
    for (auto& t : ts) {
      t.detach().copy_(io[0].narrow(0, off, t.numel()).view_as(t));
      off += t.numel();
    }
  }
}

void BucketReducer::broadcastBuffers() {
  if (world_ < 2) return;
  torch::NoGradGuard no_grad;
  if (!buffers_.empty()) broadcastCoalesced(buffers_);
}

void BucketReducer::prepareBackward(bool sync) {
  std::lock_guard<std::mutex> lk(mu_);
  armed_ = sync;
  std::fill(seen_.begin(), seen_.end(), 0);
  std::fill(seen_per_bucket_.begin(), seen_per_bucket_.end(), 0);
  if (!sync) return;
  std::fill(ready_.begin(), ready_.end(), 0);
  // Work left from a step that threw must finish before its buffers are written again.
  for (auto& b : buckets_) {
    if (b.work && !b.work->isCompleted()) pg_.wait(b.work);
    b.pending = b.slots.size(), b.work.reset();
  }
  next_launch_ = 0;
  stats_ = ReducerStats{};
  step_start_ = std::chrono::steady_clock::now();
}

void BucketReducer::markReady(size_t s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (opts_.on_bucket_grads && !seen_[s]) {
    seen_[s] = 1;
    const size_t b = slots_[s].bucket;
    if (++seen_per_bucket_[b] == buckets_[b].slots.size()) opts_.on_bucket_grads(b);
  }
  if (!armed_ || ready_[s]) return;
  ready_[s] = 1;
  if (opts_.rebuild_buckets && !rebuilt_) ready_order_.push_back(s);
  Slot& slot = slots_[s];
  Bucket& b = buckets_[slot.bucket];
  torch::NoGradGuard no_grad;
  if (!b.buffer.defined()) {
    if (opts_.release_after_reduce) releaseLaunched();
    b.buffer = opts_.release_after_reduce  // zeros: the padding
                   ? mappedZeros(b.length, b.wire, Transient::kGradientBuckets)
                   : mappedZeros(b.length, b.wire);
  }
  auto view = b.buffer.narrow(0, slot.offset, slot.numel);
  const auto& grad = slot.param.grad();
  if (viewsGrad(slot) && grad.defined() && grad.data_ptr() == view.data_ptr()) {
    view.div_(world_);  // backward accumulated into the bucket itself
  } else if (grad.defined()) {
    // Divide before the sum, as PyTorch does, so low-precision sums do not overflow; with
    // compression, divide before the cast too, so a large gradient is not inf in fp16 already.
    // A wider bucket than the gradient (bf16 units reduced in fp32) casts first, as FSDP2 does.
    const bool widens = c10::elementSize(view.scalar_type()) > c10::elementSize(grad.scalar_type());
    if (view.scalar_type() != grad.scalar_type() && !widens) {
      view.copy_(grad.reshape(-1) / static_cast<double>(world_));
    } else {
      view.copy_(grad.reshape(-1));
      view.div_(world_);
    }
  } else {
    view.zero_();
  }
  if (opts_.release_after_reduce) slot.param.mutable_grad().reset();
  // PyTorch's gradient_as_bucket_view: .grad becomes the bucket's slice (what backward wrote is
  // freed), so the averaged gradient needs no copy back and is held once.
  if (viewsGrad(slot)) slot.param.mutable_grad() = view.view(slot.param.sizes());
  if (--b.pending == 0) launchReady();
}

void BucketReducer::launchReady() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    if (extras_offset_ >= 0 && next_launch_ == buckets_.size()) {
      opts_.extras.writeInto(
          b.buffer.narrow(0, extras_offset_, static_cast<int64_t>(opts_.extras.count)));
    }
    // A sharded optimizer frees it between steps.
    if (scatters()) allocateStorage(b.shard, Transient::kGradientSlices);
    b.work = opts_.collective->launch(b.buffer, b.shard);
    ++stats_.collectives;
    if (stats_.first_launch_s < 0) stats_.first_launch_s = now();
  }
}

// The buckets launched so far give their buffers back, once reduced: called before the next
// bucket's buffer is made, so that one buffer is alive at a time and a bucket's reduction still
// runs while backward computes the next bucket's first gradients.
void BucketReducer::releaseLaunched() {
  for (size_t k = 0; k < next_launch_; ++k) {
    Bucket& b = buckets_[k];
    if (!b.buffer.defined() || !b.work) continue;
    const auto t0 = std::chrono::steady_clock::now();
    pg_.wait(b.work);
    stats_.bucket_wait_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    b.work.reset();
    releaseBuffer(b.buffer);
  }
}

void BucketReducer::finishBackward() {
  std::unique_lock<std::mutex> lk(mu_);
  if (!armed_) return;
  stats_.backward_end_s = now();
  std::vector<std::string> unused;
  std::vector<int32_t> used(slots_.size(), 1);
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!ready_[s]) unused.push_back(slots_[s].name), used[s] = 0;
  if (!unused.empty()) {
    if (!opts_.find_unused_parameters) {
      armed_ = false;
      std::string names;
      for (size_t i = 0; i < unused.size() && i < 8; ++i) names += (i ? ", " : "") + unused[i];
      if (unused.size() > 8) names += fmt::format(" and {} more", unused.size() - 8);
      throw std::runtime_error(
          fmt::format("{} parameter(s) got no gradient in this step ({}) while "
                      "dist.find_unused_parameters is false; set "
                      "dist.find_unused_parameters=true, or make the forward use them",
                      unused.size(), names));
    }
    lk.unlock();
    for (size_t s = 0; s < slots_.size(); ++s)
      if (!ready_[s]) markReady(s);  // zeros, or what no_sync steps accumulated
    lk.lock();
  }
  torch::NoGradGuard no_grad;
  // With find_unused_parameters, which parameters any rank used: as in PyTorch, a parameter no rank
  // used keeps no gradient (the optimizer leaves it alone). Issued after every bucket, so the
  // collectives come in the same order on every rank whatever each one left unused.
  // The map lives on the buckets' device from step to step; where this rank used every parameter
  // (the usual step) it is filled there, with no copy from the host.
  c10::intrusive_ptr<c10d::Work> used_work;
  if (opts_.find_unused_parameters) {
    const auto device = buckets_.empty() ? torch::Device(torch::kCPU) : buckets_[0].wire.device();
    if (!used_dev_.defined())
      used_dev_ = torch::empty({static_cast<int64_t>(slots_.size())},
                               torch::TensorOptions().dtype(torch::kInt).device(device));
    if (unused.empty())
      used_dev_.fill_(1);
    else
      used_dev_.copy_(torch::tensor(used, torch::kInt));
    std::vector<at::Tensor> io{used_dev_};
    used_work = pg_.allreduce(io);
  }
  for (auto& b : buckets_) {
    auto t0 = std::chrono::steady_clock::now();
    if (b.work) pg_.wait(b.work);  // released buckets were waited for during backward
    stats_.bucket_wait_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    // Done with: Gloo's reduce-scatter copies into the slice again on every wait(), and a
    // sharded optimizer frees the slice before the next step's prepareBackward looks.
    b.work.reset();
    if (opts_.release_after_reduce) releaseBuffer(b.buffer);
    if (scatters()) continue;  // the shard is the result, for the sharded optimizer
    for (size_t s : b.slots) {
      auto& p = slots_[s].param;
      auto reduced = b.buffer.narrow(0, slots_[s].offset, slots_[s].numel).view(p.sizes());
      if (p.grad().defined() && p.grad().data_ptr() == reduced.data_ptr()) continue;  // a view
      if (p.grad().defined())
        p.mutable_grad().copy_(reduced);
      else
        p.mutable_grad() = reduced.to(p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
  // Read before a rebuild replaces the buffers: the extras (the stop vote) are in this step's.
  if (extras_offset_ >= 0)
    extras_ =
        buckets_.back().buffer.narrow(0, extras_offset_, static_cast<int64_t>(opts_.extras.count));
  // (The gradients written above keep the old buffers alive until the next step replaces them.)
  if (opts_.rebuild_buckets && !rebuilt_) rebuilt_ = true, rebuildFromReadyOrder();
  if (used_work) {
    pg_.wait(used_work);    // before the map is written again; stream-ordered on NCCL
    if (!unused.empty()) {  // where this rank used every parameter, so did the sum: nothing to read
      const auto counts_cpu = used_dev_.cpu();
      const auto counts = counts_cpu.accessor<int32_t, 1>();
      for (size_t s = 0; s < slots_.size(); ++s)
        if (counts[static_cast<int64_t>(s)] == 0) slots_[s].param.mutable_grad().reset();
    }
  }
  armed_ = false;
}

bool BucketReducer::viewsGrad(const Slot& slot) const {
  // Not where the wire dtype differs (compression), a slice is all a rank keeps (reduce-scatter),
  // or the parameter's layout is not the flat slice's (channels-last weights).
  const Bucket& b = buckets_[slot.bucket];
  return !scatters() && b.buffer.scalar_type() == slot.param.scalar_type() &&
         slot.param.is_contiguous();
}

std::vector<torch::Tensor> BucketReducer::bufferTensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : buckets_) out.push_back(b.buffer), out.push_back(b.shard);
  return out;
}

BucketLayout BucketReducer::layout(size_t i) const {
  const Bucket& b = buckets_.at(i);
  BucketLayout v;
  for (size_t s : b.slots)
    v.params.push_back(slots_[s].param), v.offsets.push_back(slots_[s].offset);
  v.padded = b.length;
  v.shard = b.shard;
  return v;
}

std::vector<std::vector<std::string>> BucketReducer::bucketParameterNames() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t s : b.slots) out.back().push_back(slots_[s].name);
  }
  return out;
}

}  // namespace ltrain::distributed
