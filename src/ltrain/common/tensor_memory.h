// Tensor memory on the CPU counted as LibTorch's allocator hands it out and gets it back: what
// LTRAIN_MEMORY_LOG splits each phase's peak resident memory by (memory_phase.h). Installed in
// front of LibTorch's CPU allocator only when the log is asked for; each allocation then costs
// two atomic additions and a malloc_usable_size.
// Besides the total, the kinds of transient memory whose owners say when they take and drop it
// (ZeRO-3's gathered units, the reducer's gradient buckets, ZeRO's reduced gradient slices) are
// kept as they were at the peak, so that a phase's peak splits into what was gathered, what was
// being reduced, and the rest (activations and the operators' temporaries).
#pragma once
#include <cstdint>

namespace ltrain {

// Once, before the tensors that are to be counted exist. False where LibTorch's CPU allocator is
// not one this can stand in front of (then nothing is counted).
bool trackTensorMemory();
bool tensorMemoryTracked();

// kGradientSlices: a sharded optimizer's reduced gradient slices, whose memory exists only from
// their bucket's reduction to the optimizer's step.
enum class Transient { kGatheredUnits, kGradientBuckets, kGradientSlices, kCount };

// Their owners report their transient memory as it comes and goes (a no-op when not tracked).
void addTransientBytes(Transient kind, int64_t delta);
// Tensor memory from an allocator of ltrain's own (mapped_memory.h), counted with the rest.
void addTensorBytes(int64_t delta);

struct TensorMemory {
  int64_t live = 0;  // tensor bytes allocated now
  int64_t peak = 0;  // the most since resetTensorPeak()
  // At that peak: each Transient's bytes.
  int64_t transient_at_peak[static_cast<int>(Transient::kCount)] = {};
};
TensorMemory tensorMemory();
// The peak becomes what is live now (a memory phase starts).
void resetTensorPeak();

}  // namespace ltrain
