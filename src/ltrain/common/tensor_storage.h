// A tensor's memory taken away and given back in place, its shape and dtype kept: every tensor
// viewing the storage (a parameter, what autograd saved of it) sees the memory come and go. How
// dist.zero 3 keeps parameters that exist, by shape, on every rank while their values live in
// shards (as FSDP's _free_storage).
#pragma once
#include <c10/core/Allocator.h>
#include <torch/types.h>

#include "ltrain/common/tensor_memory.h"

namespace ltrain {

inline bool hasStorage(const torch::Tensor& t) {
  return t.storage().nbytes() > 0;
}

inline void freeStorage(const torch::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

// Memory for the tensor's elements again (uninitialised) where it has none.
inline void allocateStorage(const torch::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == bytes) return;
  c10::Allocator* a = s->allocator() ? s->allocator() : c10::GetAllocator(t.device().type());
  s->set_data_ptr_noswap(a->allocate(bytes));
  s->set_nbytes(bytes);
}

// The bytes of its elements, whether it has memory now or not.
inline int64_t bytesOf(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

// The same for memory taken and given back within steps, counted as `kind` (LTRAIN_MEMORY_LOG):
// each does nothing where the tensor already has memory, or has none.
inline void allocateStorage(const torch::Tensor& t, Transient kind) {
  if (hasStorage(t)) return;
  allocateStorage(t);
  addTransientBytes(kind, bytesOf(t));
}

inline void freeStorage(const torch::Tensor& t, Transient kind) {
  if (!hasStorage(t)) return;
  addTransientBytes(kind, -bytesOf(t));
  freeStorage(t);
}

// A tensor of `sizes` and `options` that has no memory (as a freed one).
inline torch::Tensor storageless(c10::IntArrayRef sizes, const torch::TensorOptions& options) {
  auto t = torch::empty({0}, options);
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

}  // namespace ltrain
