// What ltrain calls in LibTorch's CUDA libraries. Those (libtorch_cuda, cuBLAS, cuDNN, NCCL...)
// take about 360 MiB of resident memory once loaded, GPU or not (bench/RESULTS.md), so ltrain
// itself links only LibTorch's CPU library and loads libltrain_cuda.so, which links the rest,
// where a GPU can be used. Loading it registers LibTorch's CUDA backend (torch::cuda::* then
// see the GPUs); the functions below are the few CUDA-only calls ltrain makes directly.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace ltrain::cuda {

struct Plugin {
  // Peak bytes the caching allocator handed out on `device`, in MiB.
  double (*peak_allocated_mb)(int device);
  std::string (*device_name)(int device);
  // CUDA's sync debug mode: 0 off, 1 warn, 2 error on a host synchronisation.
  void (*set_sync_debug_mode)(int level);
  // A ProcessGroupNCCL bound and connected to `device` (as init_process_group(device_id=...)).
  c10::intrusive_ptr<c10d::Backend> (*make_nccl)(const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int world_size,
                                                 std::chrono::milliseconds timeout,
                                                 c10::Device device);
  // NCCL's version as LibTorch's NCCL library reports it ("2.27.5").
  std::string (*nccl_version)();
};

// Loads libltrain_cuda.so (found next to the executable, or one directory up) where this
// machine has an NVIDIA driver, or always with LTRAIN_LOAD_CUDA=1 (never with 0). Call it first
// in main(): LibTorch decides once, at its first CUDA query, whether CUDA is there. Idempotent;
// a failed load is a warning here; a run that may use the GPU then refuses to start
// (train/devices.cpp).
void loadIfPresent();

// The plugin's functions; nullptr where it is not loaded (no GPU can be in use then).
const Plugin* plugin();

// Why the load was attempted and failed (dlerror's text); empty where it loaded or was not tried.
const std::string& loadFailure();

// Peak MiB the CUDA caching allocator handed out on GPU `device` since the start (0 without CUDA).
inline double peakAllocatedMb(int device) {
  const auto* p = plugin();
  return p ? p->peak_allocated_mb(device) : 0;
}

// One line for `ltrain --version`: loaded (NCCL's version, the devices visible), not loaded and
// why, or not tried (no NVIDIA driver).
std::string status();

}  // namespace ltrain::cuda

// The one symbol libltrain_cuda.so exports.
extern "C" const ltrain::cuda::Plugin* ltrain_cuda_plugin();
