#include <dlfcn.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include "ltrain/cuda/plugin.h"

namespace ltrain::cuda {
namespace {
const Plugin* loaded = nullptr;
std::string failure;  // why a wanted load failed, for the train.device cuda error

bool wanted() {
  const char* v = std::getenv("LTRAIN_LOAD_CUDA");
  if (v && std::string(v) == "1") return true;
  if (v && std::string(v) == "0") return false;
  // The NVIDIA kernel driver's control device: without it no GPU can be used.
  return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
}

std::string pluginPath() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const auto& dir : {exe.parent_path(), exe.parent_path().parent_path()}) {
    const auto p = dir / "libltrain_cuda.so";
    if (fs::exists(p, ec)) return p.string();
  }
  return "libltrain_cuda.so";  // the loader's search path, then
}
}  // namespace

void loadIfPresent() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!wanted()) return;
    const std::string path = pluginPath();
    // RTLD_GLOBAL: LibTorch's CUDA libraries register themselves with the CPU library.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      failure = dlerror();
      // On stderr, before logging is set up: the launcher passes a worker's stderr through.
      std::fprintf(stderr,
                   "ltrain: warning: the CUDA libraries did not load (%s): no GPU can be used; "
                   "a run with train.device auto or cuda refuses to start, train.device cpu "
                   "trains on the CPU (LTRAIN_LOAD_CUDA=0 skips the attempt)\n",
                   failure.c_str());
      return;
    }
    auto get = reinterpret_cast<const Plugin* (*)()>(dlsym(h, "ltrain_cuda_plugin"));
    if (!get) {
      failure = path + " has no ltrain_cuda_plugin";
      std::fprintf(stderr, "ltrain: warning: %s: no GPU can be used\n", failure.c_str());
      return;
    }
    loaded = get();
  });
}

const Plugin* plugin() {
  return loaded;
}

const std::string& loadFailure() {
  return failure;
}

std::string status() {
  if (loaded) {
    const auto n = torch::cuda::device_count();
    return fmt::format("CUDA: libltrain_cuda.so loaded, NCCL {}, {} device(s) visible{}",
                       loaded->nccl_version(), n, n > 0 ? " (" + loaded->device_name(0) + ")" : "");
  }
  if (!failure.empty()) return "CUDA: libltrain_cuda.so did not load: " + failure;
  return "CUDA: not loaded (no NVIDIA driver here; LTRAIN_LOAD_CUDA=1 forces the load)";
}

}  // namespace ltrain::cuda
