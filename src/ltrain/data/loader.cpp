#include "ltrain/data/loader.h"

#include <c10/util/ParallelGuard.h>
#include <torch/torch.h>

namespace ltrain::data {

Batch makeBatch(const Dataset& ds, const int64_t* indices, int64_t count, bool pin,
                const Augment& augment, int64_t batch_index) {
  torch::NoGradGuard no_grad;
  Batch b;
  if (ds.source) {
    // Allocated here, written once by the source: pinned blocks come back from the CUDA caching
    // host allocator's pool, so a steady run allocates no new page-locked memory.
    const auto opts = torch::TensorOptions().pinned_memory(pin);
    auto shape = ds.source->exampleShape(), tshape = ds.source->targetShape();
    shape.insert(shape.begin(), count), tshape.insert(tshape.begin(), count);
    b.inputs = torch::empty(shape, opts.dtype(ds.source->inputType()));
    b.targets = torch::empty(tshape, opts.dtype(torch::kLong));
    ds.source->gather(indices, count, b.inputs, b.targets);
    return b;
  }
  auto idx = torch::from_blob(const_cast<int64_t*>(indices), {count}, torch::kLong);
  b.targets = ds.targets.index_select(0, idx);
  // Cropped and flipped before normalising, so that the padding is black, as torchvision's
  // RandomCrop before Normalize pads.
  auto x = augmentBatch(ds.inputs.index_select(0, idx), augment, batch_index);
  if (!ds.channel_mean.empty()) {
    const auto c = static_cast<int64_t>(ds.channel_mean.size());
    auto mean = torch::from_blob(const_cast<float*>(ds.channel_mean.data()), {1, c, 1, 1});
    auto std = torch::from_blob(const_cast<float*>(ds.channel_std.data()), {1, c, 1, 1});
    x = x.to(torch::kFloat);
    if (ds.inputs.scalar_type() == torch::kUInt8) x.div_(255.f);
    x.sub_(mean).div_(std);
  } else if (x.scalar_type() == torch::kUInt8) {
    // (x/255 - mean)/std folded into one multiply-add, in one pass that reads the bytes and
    // writes the floats: add(shift, x, alpha=scale) with a 0-d float `shift` computes in float.
    // (A gather through a 256-entry table measured 3x slower: bench/RESULTS.md.)
    const float scale = 1.f / (255.f * ds.std), shift = -ds.mean / ds.std;
    x = torch::add(torch::scalar_tensor(shift, torch::kFloat), x, scale);
  } else if (ds.mean != 0.f || ds.std != 1.f) {
    x = (x - ds.mean) / ds.std;
  }
  b.inputs = pin ? x.pin_memory() : x;
  if (pin) b.targets = b.targets.pin_memory();
  return b;
}

Loader::Loader(const Dataset& ds, std::vector<int64_t> indices, int64_t batch_size, bool drop_last,
               int64_t num_workers, int64_t prefetch, int64_t first_batch, bool pin_memory,
               Augment augment, int64_t epoch_batch_offset)
    : ds_(ds),
      indices_(std::move(indices)),
      batch_size_(batch_size),
      num_batches_(batchesPerEpoch(static_cast<int64_t>(indices_.size()), batch_size, drop_last)),
      prefetch_(prefetch),
      next_batch_(first_batch),
      epoch_batch_offset_(epoch_batch_offset),
      pin_(pin_memory),
      augment_(augment) {
  for (int64_t w = 0; w < num_workers; ++w) workers_.push_back(std::make_unique<Worker>());
  for (size_t w = 0; w < workers_.size(); ++w)
    workers_[w]->thread = std::thread([this, w] { work(w); });
}

Loader::~Loader() {
  for (auto& w : workers_) {
    std::lock_guard<std::mutex> lk(w->mu);
    stop_ = true;
  }
  for (auto& w : workers_) {
    w->cv.notify_all();
    w->thread.join();
  }
}

Batch Loader::build(int64_t b) const {
  const int64_t start = b * batch_size_;
  const int64_t count =
      std::min<int64_t>(batch_size_, static_cast<int64_t>(indices_.size()) - start);
  return makeBatch(ds_, indices_.data() + start, count, pin_, augment_, epoch_batch_offset_ + b);
}

void Loader::work(size_t w) {
  // Intra-op threads belong to the training step: ATen ops on this thread run serially
  // (at::set_num_threads would change the whole process; this guard is per thread).
  c10::ParallelGuard serial(true);
  const int64_t stride = static_cast<int64_t>(workers_.size());
  int64_t first = next_batch_;
  int64_t b = first + ((static_cast<int64_t>(w) - first % stride) % stride + stride) % stride;
  Worker& me = *workers_[w];
  for (; b < num_batches_; b += stride) {
    {
      std::unique_lock<std::mutex> lk(me.mu);
      me.cv.wait(lk, [&] { return stop_ || static_cast<int64_t>(me.ready.size()) < prefetch_; });
      if (stop_) return;
    }
    Batch batch;
    try {
      batch = build(b);
    } catch (...) {  // handed to the training thread, which reports it in the batch's turn
      std::lock_guard<std::mutex> lk(me.mu);
      me.error = std::current_exception();
      me.cv.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lk(me.mu);
      me.ready.push_back(std::move(batch));
    }
    me.cv.notify_all();
  }
}

bool Loader::next(Batch& out) {
  if (next_batch_ >= num_batches_) return false;
  if (workers_.empty()) {
    out = build(next_batch_++);
    return true;
  }
  Worker& w = *workers_[next_batch_ % static_cast<int64_t>(workers_.size())];
  {
    std::unique_lock<std::mutex> lk(w.mu);
    w.cv.wait(lk, [&] { return !w.ready.empty() || w.error; });
    if (w.ready.empty()) std::rethrow_exception(w.error);
    out = std::move(w.ready.front());
    w.ready.pop_front();
  }
  w.cv.notify_all();
  ++next_batch_;
  return true;
}

}  // namespace ltrain::data
