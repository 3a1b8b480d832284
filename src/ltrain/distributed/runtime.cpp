#include "ltrain/distributed/runtime.h"

#include <fmt/format.h>

#include <cstdlib>

#include "ltrain/common/errors.h"

namespace ltrain::distributed {
namespace {

int64_t intVar(const GetEnv& env, const char* name) {
  const char* v = env(name);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < 0)
    throw UsageError(
        fmt::format("environment variable {}='{}': expected a non-negative integer", name, v));
  return x;
}

bool has(const GetEnv& env, const char* name) {
  const char* v = env(name);
  return v && *v;
}

}  // namespace

std::string firstSlurmHost(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets; a bracket range expands to its first value.
  size_t depth = 0, end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[')
      ++depth;
    else if (nodelist[i] == ']')
      --depth;
    else if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  std::string first = nodelist.substr(0, end);
  auto open = first.find('[');
  if (open == std::string::npos) return first;
  std::string range = first.substr(open + 1, first.find(']') - open - 1);
  std::string lo = range.substr(0, range.find_first_of(",-"));
  return first.substr(0, open) + lo;
}

Runtime runtimeFromEnv(const GetEnv& env) {
  Runtime r;
  if (has(env, "RANK") && has(env, "WORLD_SIZE")) {
    r.source = "torchrun";
    r.rank = intVar(env, "RANK");
    r.world_size = intVar(env, "WORLD_SIZE");
    r.local_rank = has(env, "LOCAL_RANK") ? intVar(env, "LOCAL_RANK") : r.rank;
    r.local_world_size =
        has(env, "LOCAL_WORLD_SIZE") ? intVar(env, "LOCAL_WORLD_SIZE") : r.world_size;
    r.agent_store = has(env, "TORCHELASTIC_USE_AGENT_STORE") &&
                    std::string(env("TORCHELASTIC_USE_AGENT_STORE")) == "True";
    if (has(env, "TORCHELASTIC_RESTART_COUNT"))
      r.restart_count = intVar(env, "TORCHELASTIC_RESTART_COUNT");
  } else if (has(env, "SLURM_PROCID") && has(env, "SLURM_NTASKS")) {
    r.source = "slurm";
    r.rank = intVar(env, "SLURM_PROCID");
    r.world_size = intVar(env, "SLURM_NTASKS");
    r.local_rank = has(env, "SLURM_LOCALID") ? intVar(env, "SLURM_LOCALID") : 0;
    // "4" or, for uneven layouts, "4(x2),3": this node's count comes first in the usual case.
    r.local_world_size =
        has(env, "SLURM_NTASKS_PER_NODE") ? std::atoll(env("SLURM_NTASKS_PER_NODE")) : 1;
    if (r.local_world_size < 1) r.local_world_size = 1;
    if (has(env, "SLURM_JOB_NODELIST")) r.master_addr = firstSlurmHost(env("SLURM_JOB_NODELIST"));
    // One port per job (as Lightning does), so that jobs sharing a node do not collide.
    if (has(env, "SLURM_JOB_ID")) r.master_port = 10000 + intVar(env, "SLURM_JOB_ID") % 20000;
  } else if (has(env, "OMPI_COMM_WORLD_RANK") && has(env, "OMPI_COMM_WORLD_SIZE")) {
    r.source = "openmpi";
    r.rank = intVar(env, "OMPI_COMM_WORLD_RANK");
    r.world_size = intVar(env, "OMPI_COMM_WORLD_SIZE");
    r.local_rank =
        has(env, "OMPI_COMM_WORLD_LOCAL_RANK") ? intVar(env, "OMPI_COMM_WORLD_LOCAL_RANK") : 0;
    r.local_world_size =
        has(env, "OMPI_COMM_WORLD_LOCAL_SIZE") ? intVar(env, "OMPI_COMM_WORLD_LOCAL_SIZE") : 1;
  } else if (has(env, "MV2_COMM_WORLD_RANK") && has(env, "MV2_COMM_WORLD_SIZE")) {
    r.source = "mvapich";
    r.rank = intVar(env, "MV2_COMM_WORLD_RANK");
    r.world_size = intVar(env, "MV2_COMM_WORLD_SIZE");
    r.local_rank =
        has(env, "MV2_COMM_WORLD_LOCAL_RANK") ? intVar(env, "MV2_COMM_WORLD_LOCAL_RANK") : 0;
    r.local_world_size =
        has(env, "MV2_COMM_WORLD_LOCAL_SIZE") ? intVar(env, "MV2_COMM_WORLD_LOCAL_SIZE") : 1;
  } else if (has(env, "PMI_RANK") && has(env, "PMI_SIZE")) {
    // MPICH's Hydra and Intel MPI: the node-local rank is MPI_LOCALRANKID (PMI_LOCAL_RANK under
    // some process managers, PALS_LOCAL_RANKID on Cray's); without one, every rank would take
    // GPU 0.
    r.source = "pmi";
    r.rank = intVar(env, "PMI_RANK");
    r.world_size = intVar(env, "PMI_SIZE");
    for (const char* name : {"MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID"})
      if (has(env, name)) {
        r.local_rank = intVar(env, name);
        break;
      }
    for (const char* name : {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE"})
      if (has(env, name)) {
        r.local_world_size = intVar(env, name);
        break;
      }
  }
  if (has(env, "MASTER_ADDR")) r.master_addr = env("MASTER_ADDR");
  if (has(env, "MASTER_PORT")) {
    int64_t p = intVar(env, "MASTER_PORT");
    if (p > 65535)
      throw UsageError(fmt::format("environment variable MASTER_PORT={}: expected 0..65535", p));
    r.master_port = static_cast<int>(p);
  }
  if (r.world_size < 1 || r.rank >= r.world_size)
    throw UsageError(fmt::format("rank {} from the {} environment is outside world size {}", r.rank,
                                 r.source, r.world_size));
  return r;
}

Runtime runtimeFromEnv() {
  return runtimeFromEnv([](const char* n) { return std::getenv(n); });
}

}  // namespace ltrain::distributed
