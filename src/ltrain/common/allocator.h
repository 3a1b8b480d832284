// glibc malloc settings for training: each step frees and reallocates the same multi-MiB
// activation buffers; by default glibc returns them to the OS (munmap) and faults them back in,
// which perf showed as 14% of a CNN worker's time. Keeping them for reuse measured +25% samples/s
// at the same peak RSS (bench/RESULTS.md). A user's own glibc malloc settings win.
#pragma once
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace ltrain {

inline void tuneAllocatorForTraining() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: blocks below 32 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // and freed heap memory stays for the next step
}

}  // namespace ltrain
