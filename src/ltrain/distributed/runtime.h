// Where this process stands in the job: rank, local rank and world size, read from the launcher's
// environment (torchrun / ltrain launch, Slurm, OpenMPI, MVAPICH, MPICH and Intel MPI), one
// process when none is set.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace ltrain::distributed {

struct Runtime {
  int64_t rank = 0, local_rank = 0, world_size = 1, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: every rank is a store client
  int64_t restart_count = 0;
  std::string source = "none";  // none | torchrun | slurm | openmpi | mvapich | pmi
  bool distributed() const { return world_size > 1; }
  bool isMain() const { return rank == 0; }
};

using GetEnv = std::function<const char*(const char*)>;

// Throws UsageError when the variables contradict each other (rank >= world size, say).
Runtime runtimeFromEnv(const GetEnv& getenv);
Runtime runtimeFromEnv();

// First host of a Slurm node list: "gpu[05-09,12],cpu1" -> "gpu05".
std::string firstSlurmHost(const std::string& nodelist);

}  // namespace ltrain::distributed
