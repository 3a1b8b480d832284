// glibc malloc settings for training. Each step frees and reallocates the same multi-MiB
// activation buffers; by default glibc returns them to the OS (munmap) and faults them back in,
// which perf showed as 14% of a CNN worker's time. Keeping them for reuse measured +25% samples/s
// at the same peak RSS (bench/RESULTS.md). A user's own glibc malloc settings win.
#pragma once
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace ltrain {

inline bool userTunedMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return (tunables && std::strstr(tunables, "glibc.malloc.")) ||
         std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_");
}

inline void tuneAllocatorForTraining() {
  if (userTunedMalloc()) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: blocks below 32 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // and freed heap memory stays for the next step
}

// While a model is built (until its plan has spread it): blocks of 1 MiB and more are mapped on
// their own, and unmapped when freed. The build makes and drops each layer's tensors among small
// allocations that stay (the module tree, generator states); taken from the heap, the small ones
// land in the big freed blocks, which then fit no later layer's tensors, and the heap grew by 850
// MiB in the 302M GPT's 4-rank ZeRO-3 build, most of the model, before anything trained
// (bench/RESULTS.md). tuneAllocatorForTraining() goes back to the steps' settings.
inline void tuneAllocatorForBuilding() {
  if (userTunedMalloc()) return;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

// At the end of a memory phase (common/memory_phase.h: the build, a checkpoint's save, ...): the
// heap's free pages go back to the system, wherever they lie (malloc_trim gives back the middle
// of the heap too, where the trim threshold above only ever gives back its top). Kept, what the
// build freed (each ZeRO-3 unit made whole, then sharded) stayed resident through training: a
// 302M GPT on 4 ranks peaked at 2308 MiB a rank, 1810 MiB with this (bench/RESULTS.md), at the
// same tokens/s. The steps' own buffers are reused as before.
inline void giveBackFreedMemory() {
  if (!userTunedMalloc()) malloc_trim(0);
}

}  // namespace ltrain
