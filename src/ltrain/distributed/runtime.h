// Where this process stands in the job: rank, local rank and world size, read from the launcher's
// environment (torchrun / ltrain launch, Slurm, OpenMPI, MVAPICH, MPICH and Intel MPI), one
// process when none is set.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

namespace ltrain::distributed {

struct Runtime {
  int64_t rank = 0, local_rank = 0, world_size = 1, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: every rank is a store client
  int64_t restart_count = 0;
  std::string source = "none";      // none | torchrun | slurm | openmpi | mvapich | pmi
  int64_t cpus_per_task = 0;        // Slurm's SLURM_CPUS_PER_TASK, 0 when not given
  bool launched_by_ltrain = false;  // `ltrain launch` started it (and prefixes and logs its output)
  bool distributed() const { return world_size > 1; }
  bool isMain() const { return rank == 0; }
  // Intra-op threads for a rank that no one told (no OMP_NUM_THREADS, no train.threads): Slurm's
  // CPUs per task, else the CPUs it may run on shared among its node's ranks.
  int64_t intraOpThreads() const;
};

using GetEnv = std::function<const char*(const char*)>;

// Throws UsageError when the variables contradict each other (rank >= world size, say).
Runtime runtimeFromEnv(const GetEnv& getenv);
Runtime runtimeFromEnv();

// First host of a Slurm node list: "gpu[05-09,12],cpu1" -> "gpu05".
std::string firstSlurmHost(const std::string& nodelist);
// Tasks on node `node` of a Slurm tasks-per-node list ("2(x3),1": 2 on nodes 0-2, 1 on node 3);
// -1 when the list is malformed or does not reach that node.
int64_t slurmTasksOnNode(const std::string& tasks_per_node, int64_t node);
// CPUs this process may run on (its affinity mask).
int64_t cpusAvailable();

}  // namespace ltrain::distributed
