// Peak resident memory of this process (VmHWM from /proc/self/status) and the peak of what the
// CUDA caching allocator handed out on a GPU, for summaries and benchmarks.
#pragma once
#include <fstream>
#include <string>

#if __has_include(<c10/cuda/CUDACachingAllocator.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define LTRAIN_CUDA_ALLOCATOR_STATS 1
#endif

namespace ltrain {

inline double peakRssMb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

// Peak bytes allocated on GPU `device` since the process started, in MiB (0 without CUDA).
inline double peakCudaMemoryMb(int device) {
#ifdef LTRAIN_CUDA_ALLOCATOR_STATS
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return static_cast<double>(
             stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
                 .peak) /
         (1024.0 * 1024.0);
#else
  (void)device;
  return 0;
#endif
}

}  // namespace ltrain
