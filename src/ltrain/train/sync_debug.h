// LTRAIN_CUDA_SYNC_DEBUG=error|warn: torch.cuda.set_sync_debug_mode for the stretches of the
// loop that must not synchronise the host with the GPU (every step but those that log, evaluate
// or checkpoint), so that a synchronising call there raises (error) or warns. For
// scripts/gpu_check.sh, which proves that a training step never stalls the host.
#pragma once

namespace ltrain::train {

class NoHostSyncScope {
 public:
  // `active` false: the scope does nothing (a log step, or the variable unset, or no CUDA).
  explicit NoHostSyncScope(bool active);
  ~NoHostSyncScope();
  NoHostSyncScope(const NoHostSyncScope&) = delete;
  NoHostSyncScope& operator=(const NoHostSyncScope&) = delete;

  // Whether LTRAIN_CUDA_SYNC_DEBUG asks for it and this build can set the mode.
  static bool requested();

 private:
  bool on_ = false;
};

}  // namespace ltrain::train
