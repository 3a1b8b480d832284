// The launcher: hosts the rendezvous store (as torchrun's agent does), starts one worker per local
// device, prefixes and logs their output, and on the first failure stops the others (SIGTERM, then
// SIGKILL) and restarts all while restarts remain. SIGINT/SIGTERM are forwarded to the workers.
#pragma once
#include "ltrain/config/modes.h"
#include "ltrain/launch/launch_options.h"

namespace ltrain::launch {

// Returns the launcher's exit code: 0 when every worker succeeded; 2 when a worker reported bad
// usage (never restarted: a restart cannot fix it); 130/143 after SIGINT/SIGTERM; 1 otherwise.
int runLauncher(const LaunchOptions& opts);

// The launch options' own checks (worker count, node rank, program), and that the workers' device
// can serve the collective `backend` (nccl needs CUDA). UsageError before anything starts.
void checkLaunchable(const LaunchOptions& opts, config::Backend backend);

}  // namespace ltrain::launch
