// Peak resident memory of this process (VmHWM from /proc/self/status) and the peak of what the
// CUDA caching allocator handed out on a GPU, for summaries and benchmarks.
#pragma once
#include <fstream>
#include <string>

#include "ltrain/cuda/plugin.h"

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
  const auto* cuda = cuda::plugin();
  return cuda ? cuda->peak_allocated_mb(device) : 0;
}

}  // namespace ltrain
