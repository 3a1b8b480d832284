#include "ltrain/common/tensor_memory.h"

#include <c10/core/CPUAllocator.h>
#include <malloc.h>

#include <atomic>
#include <mutex>

namespace ltrain {
namespace {

constexpr int kKinds = static_cast<int>(Transient::kCount);

struct Counts {
  std::atomic<int64_t> live{0}, peak{0};
  std::atomic<int64_t> transient[kKinds] = {};
  std::mutex mu;  // taken only when the total passes its peak
  int64_t transient_at_peak[kKinds] = {};
};

Counts& counts() {
  static Counts c;
  return c;
}

std::atomic<bool> tracked{false};

void grew(int64_t now) {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  if (now <= c.peak.load()) return;
  c.peak.store(now);
  for (int k = 0; k < kKinds; ++k) c.transient_at_peak[k] = c.transient[k].load();
}

// LibTorch's own CPU allocator, which does the allocating; its deleter frees.
c10::Allocator* inner = nullptr;
c10::DeleterFnPtr inner_delete = nullptr;

// The same pointers as the inner allocator's, its data its context (raw_allocate, which oneDNN
// uses, needs that), so the size freed is the allocation's usable size, as it was counted.
void countedDelete(void* p) {
  if (p) counts().live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
  inner_delete(p);
}

struct CountingAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr d = inner->allocate(n);
    void* p = d.release_context();
    if (p) addTensorBytes(static_cast<int64_t>(malloc_usable_size(p)));
    return {p, p, &countedDelete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &countedDelete; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    inner->copy_data(dest, src, count);
  }
};

}  // namespace

bool trackTensorMemory() {
  if (tracked.load()) return true;
  c10::Allocator* current = c10::GetCPUAllocator();
  // Only an allocator whose data is its context and that names its deleter can be stood in front
  // of this way (LibTorch's default CPU allocator is one).
  if (!current || !current->raw_deleter()) return false;
  static CountingAllocator counting;
  inner = current, inner_delete = current->raw_deleter();
  c10::SetCPUAllocator(&counting, /*priority=*/1);
  tracked = c10::GetCPUAllocator() == &counting;
  return tracked.load();
}

bool tensorMemoryTracked() {
  return tracked.load();
}

void addTensorBytes(int64_t delta) {
  if (!tracked.load()) return;
  const int64_t now = counts().live.fetch_add(delta) + delta;
  if (now > counts().peak.load(std::memory_order_relaxed)) grew(now);
}

void addTransientBytes(Transient kind, int64_t delta) {
  if (tracked.load()) counts().transient[static_cast<int>(kind)].fetch_add(delta);
}

TensorMemory tensorMemory() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  TensorMemory m;
  m.live = c.live.load(), m.peak = c.peak.load();
  for (int k = 0; k < kKinds; ++k) m.transient_at_peak[k] = c.transient_at_peak[k];
  return m;
}

void resetTensorPeak() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  c.peak.store(c.live.load());
  for (int k = 0; k < kKinds; ++k) c.transient_at_peak[k] = c.transient[k].load();
}

}  // namespace ltrain
