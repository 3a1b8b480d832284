#include <fmt/format.h>

#include "ltrain/common/errors.h"
#include "ltrain/launch/launch_options.h"

namespace ltrain::launch {

int resolveNproc(const std::string& spec, int gpus, int cpus, int gpus_per_worker) {
  if (spec == "cpu") return cpus;
  if (spec == "gpu" && gpus == 0)
    throw UsageError("--nproc-per-node gpu: no CUDA device is available here");
  if (spec == "auto" || spec == "gpu") {
    if (gpus == 0) return cpus;
    if (gpus < gpus_per_worker)
      throw UsageError(fmt::format(
          "--nproc-per-node {}: each worker drives {} GPUs (model.pipeline_stages), but {} are "
          "visible",
          spec, gpus_per_worker, gpus));
    return gpus / gpus_per_worker;
  }
  char* end = nullptr;
  long n = std::strtol(spec.c_str(), &end, 10);
  if (spec.empty() || *end != '\0' || n < 1 || n > 1024)
    throw UsageError(
        fmt::format("--nproc-per-node '{}': expected a number 1..1024, auto, cpu or gpu", spec));
  return static_cast<int>(n);
}

std::map<std::string, std::string> workerEnv(const LaunchOptions& o, int nproc, int local_rank,
                                             int port, int restart_count,
                                             const std::string& error_file,
                                             bool omp_num_threads_set) {
  const int rank = o.node_rank * nproc + local_rank, world = o.nnodes * nproc;
  std::map<std::string, std::string> env{
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(world)},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_ERROR_FILE", error_file},
      {"LTRAIN_LAUNCHER", "1"},  // the launcher prefixes and logs the output: the worker need not
      // The whole job's wall time, restarts and waits for lost nodes included (summary.json).
      {"LTRAIN_JOB_START", fmt::format("{:.3f}", o.job_start_unix)},
  };
  // As torchrun: one intra-op thread per worker unless the user chose, when workers share a node.
  if (!omp_num_threads_set && nproc > 1) env["OMP_NUM_THREADS"] = "1";
  return env;
}

}  // namespace ltrain::launch
