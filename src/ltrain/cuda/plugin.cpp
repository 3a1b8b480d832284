// libltrain_cuda.so: ltrain's calls into LibTorch's CUDA libraries, which this library links
// (see plugin.h for why they are not linked into ltrain itself).
#include "ltrain/cuda/plugin.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace {

double peakAllocatedMb(int device) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return static_cast<double>(
             stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
                 .peak) /
         (1024.0 * 1024.0);
}

std::string deviceName(int device) {
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device))->name;
}

void setSyncDebugMode(int level) {
  c10::cuda::warning_state().set_sync_debug_mode(level == 2 ? c10::cuda::SyncDebugMode::L_ERROR
                                                 : level == 1
                                                     ? c10::cuda::SyncDebugMode::L_WARN
                                                     : c10::cuda::SyncDebugMode::L_DISABLED);
}

c10::intrusive_ptr<c10d::Backend> makeNccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int world_size, std::chrono::milliseconds timeout,
                                           c10::Device device) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts);
  // NCCL then never guesses the device, and a broken peer fails here rather than mid-step.
  nccl->setBoundDeviceId(device);
  nccl->eagerConnectSingleDevice(device);
  return nccl;
}

std::string ncclVersion() {
  return c10d::getNcclVersion();
}

const ltrain::cuda::Plugin kPlugin{peakAllocatedMb, deviceName, setSyncDebugMode, makeNccl,
                                   ncclVersion};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ltrain::cuda::Plugin* ltrain_cuda_plugin() {
  return &kPlugin;
}
