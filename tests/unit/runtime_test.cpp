// Rank, world size and master from torchrun's, Slurm's and MPI's environment variables.
#include <catch2/catch.hpp>

#include <map>

#include "ltrain/common/errors.h"
#include "ltrain/distributed/runtime.h"

using ltrain::distributed::runtimeFromEnv;

namespace {
ltrain::distributed::Runtime from(std::map<std::string, std::string> vars) {
  return runtimeFromEnv([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("no launcher variables: one process") {
  auto r = from({});
  CHECK(r.world_size == 1);
  CHECK(r.rank == 0);
  CHECK(!r.distributed());
  CHECK(r.source == "none");
}

TEST_CASE("torchrun's variables, agent store included") {
  auto r = from({{"RANK", "3"},
                 {"WORLD_SIZE", "4"},
                 {"LOCAL_RANK", "1"},
                 {"LOCAL_WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "node7"},
                 {"MASTER_PORT", "1234"},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"}});
  CHECK(r.source == "torchrun");
  CHECK(r.rank == 3);
  CHECK(r.world_size == 4);
  CHECK(r.local_rank == 1);
  CHECK(r.local_world_size == 2);
  CHECK(r.master_addr == "node7");
  CHECK(r.master_port == 1234);
  CHECK(r.agent_store);
  CHECK(r.restart_count == 2);
  CHECK(!from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}})
             .agent_store);
}

TEST_CASE("Slurm, OpenMPI and PMI variables") {
  auto s = from({{"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "8"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_JOB_NODELIST", "gpu[05-09,12],cpu1"},
                 {"SLURM_NTASKS_PER_NODE", "4(x2)"},
                 {"SLURM_JOB_ID", "123456"}});
  CHECK(s.source == "slurm");
  CHECK(s.local_world_size == 4);
  CHECK(s.master_port == 13456);  // 10000 + job id % 20000: jobs sharing a node differ
  CHECK(s.rank == 5);
  CHECK(s.world_size == 8);
  CHECK(s.local_rank == 1);
  CHECK(s.master_addr == "gpu05");
  CHECK(ltrain::distributed::firstSlurmHost("host[5-9]") == "host5");
  CHECK(ltrain::distributed::firstSlurmHost("a,b") == "a");
  auto o = from({{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  CHECK(o.source == "openmpi");
  CHECK(o.local_rank == 1);
  auto p = from({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}});
  CHECK(p.source == "pmi");
  CHECK(p.world_size == 3);
}

TEST_CASE("MPICH, Intel MPI and MVAPICH ranks get their node-local rank, not all 0") {
  // mpiexec (Hydra) and Intel MPI: PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/MPI_LOCALNRANKS.
  auto h = from(
      {{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"}});
  CHECK(h.rank == 5);
  CHECK(h.local_rank == 1);
  CHECK(h.local_world_size == 4);
  auto pals = from({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"PALS_LOCAL_RANKID", "3"}});
  CHECK(pals.local_rank == 3);
  auto mv = from({{"MV2_COMM_WORLD_RANK", "3"},
                  {"MV2_COMM_WORLD_SIZE", "4"},
                  {"MV2_COMM_WORLD_LOCAL_RANK", "1"},
                  {"MV2_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK(mv.source == "mvapich");
  CHECK(mv.local_rank == 1);
  CHECK(mv.local_world_size == 2);
  CHECK_THROWS_WITH(from({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "a"}}),
                    Catch::Matchers::Contains("MPI_LOCALRANKID='a'"));
}

TEST_CASE("contradictory or malformed variables are usage errors") {
  CHECK_THROWS_AS(from({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), ltrain::UsageError);
  CHECK_THROWS_WITH(from({{"RANK", "x"}, {"WORLD_SIZE", "4"}}),
                    Catch::Matchers::Contains("RANK='x'"));
  CHECK_THROWS_AS(from({{"MASTER_PORT", "70000"}}), ltrain::UsageError);
}

TEST_CASE("Slurm's tasks per node as srun really sets them, and threads per rank") {
  using ltrain::distributed::slurmTasksOnNode;
  CHECK(slurmTasksOnNode("2", 0) == 2);
  CHECK(slurmTasksOnNode("2(x3),1", 0) == 2);
  CHECK(slurmTasksOnNode("2(x3),1", 2) == 2);
  CHECK(slurmTasksOnNode("2(x3),1", 3) == 1);
  CHECK(slurmTasksOnNode("2(x3),1", 4) == -1);
  CHECK(slurmTasksOnNode("2(3)", 0) == -1);
  CHECK(slurmTasksOnNode("x", 0) == -1);
  // srun --ntasks=2 on one node: no SLURM_NTASKS_PER_NODE, but the step's tasks per node.
  auto one = from({{"SLURM_PROCID", "1"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_NODEID", "0"},
                   {"SLURM_STEP_TASKS_PER_NODE", "2"},
                   {"SLURM_TASKS_PER_NODE", "2"},
                   {"SLURM_JOB_NODELIST", "localhost"}});
  CHECK(one.local_world_size == 2);
  CHECK(one.world_size == one.local_world_size);  // one node: nothing listens beyond it
  // Three nodes of two, then one of one: the last node's rank sees one local task.
  auto last = from({{"SLURM_PROCID", "6"},
                    {"SLURM_NTASKS", "7"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NODEID", "3"},
                    {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}});
  CHECK(last.local_world_size == 1);
  CHECK_THROWS_WITH(from({{"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "2"},
                          {"SLURM_NODEID", "5"},
                          {"SLURM_STEP_TASKS_PER_NODE", "2"}}),
                    Catch::Matchers::Contains("no task count for node 5"));
  // Threads: Slurm's CPUs per task, else the CPUs this rank may use over its node's ranks.
  auto with_cpus =
      from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_CPUS_PER_TASK", "3"}});
  CHECK(with_cpus.intraOpThreads() == 3);
  one.cpus_per_task = 0;
  CHECK(one.intraOpThreads() == std::max<int64_t>(1, ltrain::distributed::cpusAvailable() / 2));
}
