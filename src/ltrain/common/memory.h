// Peak resident memory of this process (VmHWM from /proc/self/status), for summaries and
// benchmarks. (A GPU's peak is the CUDA plugin's: cuda/plugin.h.)
#pragma once
#include <fstream>
#include <string>

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

}  // namespace ltrain
