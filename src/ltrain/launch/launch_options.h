// What `ltrain launch` (and `ltrain train --nproc-per-node`) is asked to run.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ltrain::launch {

struct LaunchOptions {
  std::string nproc_per_node = "1";  // N | auto | cpu | gpu
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: a free port (single node)
  int max_restarts = 0;
  std::string log_dir;    // per-rank logs; empty: none
  double grace_s = 30.0;  // SIGTERM, then SIGKILL after this long (torchrun's default)
  std::string run_id = "none";
  // How long a restart waits for every node's agent to come back (a node cut off from the
  // network rejoins when it is back): torchrun's rendezvous join_timeout.
  int join_timeout_s = 600;
  double job_start_unix = 0;  // when this agent started: summary.json's job_wall_s counts from it
  std::vector<std::string> program;  // PROGRAM ARGS...
  // GPUs each worker drives (a pipeline's stages): auto and gpu start GPUs / this many workers.
  int gpus_per_worker = 1;
};

// Workers per node for --nproc-per-node (auto: GPUs if any, else CPU cores; as torchrun), each
// worker driving `gpus_per_worker` GPUs.
int resolveNproc(const std::string& spec, int gpus, int cpus, int gpus_per_worker = 1);

// torchrun's environment for local worker `local_rank` (added to the launcher's own).
std::map<std::string, std::string> workerEnv(const LaunchOptions& o, int nproc, int local_rank,
                                             int port, int restart_count,
                                             const std::string& error_file,
                                             bool omp_num_threads_set);

}  // namespace ltrain::launch
