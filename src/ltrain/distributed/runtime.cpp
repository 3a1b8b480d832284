#include "ltrain/distributed/runtime.h"

#include <fmt/format.h>
#include <sched.h>

#include <cstdlib>
#include <sstream>
#include <thread>

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

// The first of `names` that is set, as an integer; `fallback` when none is.
int64_t firstInt(const GetEnv& env, std::initializer_list<const char*> names, int64_t fallback) {
  for (const char* n : names)
    if (has(env, n)) return intVar(env, n);
  return fallback;
}

bool fromTorchrun(const GetEnv& env, Runtime& r) {
  if (!has(env, "RANK") || !has(env, "WORLD_SIZE")) return false;
  r.source = "torchrun";
  r.rank = intVar(env, "RANK");
  r.world_size = intVar(env, "WORLD_SIZE");
  r.local_rank = firstInt(env, {"LOCAL_RANK"}, r.rank);
  r.local_world_size = firstInt(env, {"LOCAL_WORLD_SIZE"}, r.world_size);
  r.agent_store = has(env, "TORCHELASTIC_USE_AGENT_STORE") &&
                  std::string(env("TORCHELASTIC_USE_AGENT_STORE")) == "True";
  r.restart_count = firstInt(env, {"TORCHELASTIC_RESTART_COUNT"}, 0);
  return true;
}

bool fromSlurm(const GetEnv& env, Runtime& r) {
  if (!has(env, "SLURM_PROCID") || !has(env, "SLURM_NTASKS")) return false;
  r.source = "slurm";
  r.rank = intVar(env, "SLURM_PROCID");
  r.world_size = intVar(env, "SLURM_NTASKS");
  r.local_rank = firstInt(env, {"SLURM_LOCALID"}, 0);
  // The step's tasks on this node: srun sets SLURM_STEP_TASKS_PER_NODE (and the allocation's
  // SLURM_TASKS_PER_NODE) in every mode, "2" or "2(x3),1" one entry per node; the
  // SLURM_NTASKS_PER_NODE of --ntasks-per-node alone is not always there.
  const int64_t node = firstInt(env, {"SLURM_NODEID"}, 0);
  for (const char* name :
       {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}) {
    if (!has(env, name)) continue;
    const int64_t n = slurmTasksOnNode(env(name), node);
    if (n < 1)
      throw UsageError(fmt::format("environment variable {}='{}': no task count for node {}", name,
                                   env(name), node));
    r.local_world_size = n;
    break;
  }
  if (has(env, "SLURM_JOB_NODELIST")) r.master_addr = firstSlurmHost(env("SLURM_JOB_NODELIST"));
  // One port per job (as Lightning does), so that jobs sharing a node do not collide.
  if (has(env, "SLURM_JOB_ID")) r.master_port = 10000 + intVar(env, "SLURM_JOB_ID") % 20000;
  r.cpus_per_task = firstInt(env, {"SLURM_CPUS_PER_TASK"}, 0);
  return true;
}

bool fromMpi(const GetEnv& env, Runtime& r) {
  if (has(env, "OMPI_COMM_WORLD_RANK") && has(env, "OMPI_COMM_WORLD_SIZE")) {
    r.source = "openmpi";
    r.rank = intVar(env, "OMPI_COMM_WORLD_RANK");
    r.world_size = intVar(env, "OMPI_COMM_WORLD_SIZE");
    r.local_rank = firstInt(env, {"OMPI_COMM_WORLD_LOCAL_RANK"}, 0);
    r.local_world_size = firstInt(env, {"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1);
    return true;
  }
  if (has(env, "MV2_COMM_WORLD_RANK") && has(env, "MV2_COMM_WORLD_SIZE")) {
    r.source = "mvapich";
    r.rank = intVar(env, "MV2_COMM_WORLD_RANK");
    r.world_size = intVar(env, "MV2_COMM_WORLD_SIZE");
    r.local_rank = firstInt(env, {"MV2_COMM_WORLD_LOCAL_RANK"}, 0);
    r.local_world_size = firstInt(env, {"MV2_COMM_WORLD_LOCAL_SIZE"}, 1);
    return true;
  }
  if (has(env, "PMI_RANK") && has(env, "PMI_SIZE")) {
    // MPICH's Hydra and Intel MPI: the node-local rank is MPI_LOCALRANKID (PMI_LOCAL_RANK under
    // some process managers, PALS_LOCAL_RANKID on Cray's); without one, every rank would take
    // GPU 0.
    r.source = "pmi";
    r.rank = intVar(env, "PMI_RANK");
    r.world_size = intVar(env, "PMI_SIZE");
    r.local_rank = firstInt(env, {"MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID"}, 0);
    r.local_world_size = firstInt(env, {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE"}, 1);
    return true;
  }
  return false;
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

int64_t slurmTasksOnNode(const std::string& tasks_per_node, int64_t node) {
  // "2(x3),1": nodes 0..2 run 2 tasks, node 3 runs 1.
  std::istringstream in(tasks_per_node);
  int64_t seen = 0;
  for (std::string entry; std::getline(in, entry, ',');) {
    char* end = nullptr;
    const long long count = std::strtoll(entry.c_str(), &end, 10);
    if (end == entry.c_str() || count < 0) return -1;
    long long repeat = 1;
    if (*end == '(') {
      if (end[1] != 'x') return -1;
      char* close = nullptr;
      repeat = std::strtoll(end + 2, &close, 10);
      if (close == end + 2 || *close != ')' || repeat < 1) return -1;
    } else if (*end != '\0') {
      return -1;
    }
    if (node < seen + repeat) return count;
    seen += repeat;
  }
  return -1;
}

int64_t cpusAvailable() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
}

int64_t Runtime::intraOpThreads() const {
  if (cpus_per_task > 0) return cpus_per_task;
  // The CPUs this rank may use, shared with the other ranks of its node that see the same ones
  // (srun without --cpus-per-task, mpirun without binding).
  return std::max<int64_t>(1, cpusAvailable() / std::max<int64_t>(1, local_world_size));
}

Runtime runtimeFromEnv(const GetEnv& env) {
  Runtime r;
  if (!fromTorchrun(env, r) && !fromSlurm(env, r)) fromMpi(env, r);
  if (has(env, "MASTER_ADDR")) r.master_addr = env("MASTER_ADDR");
  if (has(env, "MASTER_PORT")) {
    int64_t p = intVar(env, "MASTER_PORT");
    if (p > 65535)
      throw UsageError(fmt::format("environment variable MASTER_PORT={}: expected 0..65535", p));
    r.master_port = static_cast<int>(p);
  }
  r.launched_by_ltrain = has(env, "LTRAIN_LAUNCHER");
  if (r.world_size < 1 || r.rank >= r.world_size)
    throw UsageError(fmt::format("rank {} from the {} environment is outside world size {}", r.rank,
                                 r.source, r.world_size));
  if (r.local_rank >= r.local_world_size && r.source != "none")
    r.local_world_size = r.local_rank + 1;  // a launcher that did not say: at least this many
  return r;
}

Runtime runtimeFromEnv() {
  return runtimeFromEnv([](const char* n) { return std::getenv(n); });
}

}  // namespace ltrain::distributed
