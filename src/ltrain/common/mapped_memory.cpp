#include "ltrain/common/mapped_memory.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <sys/mman.h>

#include "ltrain/common/tensor_memory.h"
#include "ltrain/common/tensor_storage.h"

namespace ltrain {
namespace {

struct Mapping {
  void* data;
  size_t bytes;
};

void unmap(void* ctx) {
  auto* m = static_cast<Mapping*>(ctx);
  munmap(m->data, m->bytes);
  addTensorBytes(-static_cast<int64_t>(m->bytes));
  delete m;
}

struct MappingAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, cpu};
    // Every page is written at once (a gather, a reduction), so they are all faulted in by one
    // call, not one fault each.
    void* p =
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    // In LibTorch's CPU allocator's words, which the out-of-memory message reads.
    TORCH_CHECK_WITH(OutOfMemoryError, p != MAP_FAILED,
                     "DefaultCPUAllocator: can't allocate memory: you tried to allocate ", n,
                     " bytes. Error code 12 (Cannot allocate memory)");
    addTensorBytes(static_cast<int64_t>(n));
    return {p, new Mapping{p, n}, &unmap, cpu};
  }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

torch::Tensor mappedZeros(int64_t numel, const torch::TensorOptions& options) {
  if (!options.device().is_cpu()) return torch::zeros({numel}, options);
  static MappingAllocator allocator;
  return at::detail::empty_generic({numel}, &allocator, c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   c10::typeMetaToScalarType(options.dtype()), std::nullopt);
}

torch::Tensor mappedZeros(int64_t numel, const torch::TensorOptions& options, Transient kind) {
  auto t = mappedZeros(numel, options);
  addTransientBytes(kind, bytesOf(t));
  return t;
}

}  // namespace ltrain
