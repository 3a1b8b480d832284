#include "ltrain/train/sync_debug.h"

#include <cstdlib>
#include <cstring>

#if __has_include(<c10/cuda/CUDAFunctions.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDAFunctions.h>
#define LTRAIN_SYNC_DEBUG 1
#endif

namespace ltrain::train {
namespace {
// 0: not asked for, 1: warn, 2: error.
int askedLevel() {
  static const int level = [] {
    const char* v = std::getenv("LTRAIN_CUDA_SYNC_DEBUG");
    if (!v) return 0;
    if (std::strcmp(v, "error") == 0) return 2;
    if (std::strcmp(v, "warn") == 0) return 1;
    return 0;
  }();
  return level;
}
}  // namespace

bool NoHostSyncScope::requested() {
#ifdef LTRAIN_SYNC_DEBUG
  return askedLevel() > 0;
#else
  return false;
#endif
}

NoHostSyncScope::NoHostSyncScope(bool active) {
#ifdef LTRAIN_SYNC_DEBUG
  if (!active || !requested()) return;
  c10::cuda::warning_state().set_sync_debug_mode(
      askedLevel() == 2 ? c10::cuda::SyncDebugMode::L_ERROR : c10::cuda::SyncDebugMode::L_WARN);
  on_ = true;
#else
  (void)active;
#endif
}

NoHostSyncScope::~NoHostSyncScope() {
#ifdef LTRAIN_SYNC_DEBUG
  if (on_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
#endif
}

}  // namespace ltrain::train
