// The readers under fuzzing take paths, as in the product: each input goes through a scratch
// file (in memory where /dev/shm exists).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

namespace ltrain::fuzz {

inline std::string writeScratch(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  const std::string path = dir + "/ltrain-fuzz-" + std::to_string(getpid()) + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  // Removed when the fuzzer exits: /dev/shm is memory, and CI's machine runs every target.
  struct Scratch {
    std::set<std::string> paths;
    ~Scratch() {
      for (const auto& p : paths) std::remove(p.c_str());
    }
  };
  static Scratch scratch;
  scratch.paths.insert(path);
  return path;
}

}  // namespace ltrain::fuzz
