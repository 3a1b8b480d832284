#include "ltrain/train/sync_debug.h"

#include <cstdlib>
#include <cstring>

#include "ltrain/cuda/plugin.h"

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
  return askedLevel() > 0 && cuda::plugin();
}

NoHostSyncScope::NoHostSyncScope(bool active) {
  if (!active || !requested()) return;
  cuda::plugin()->set_sync_debug_mode(askedLevel());
  on_ = true;
}

NoHostSyncScope::~NoHostSyncScope() {
  if (on_) cuda::plugin()->set_sync_debug_mode(0);
}

}  // namespace ltrain::train
