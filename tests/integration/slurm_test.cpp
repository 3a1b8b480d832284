// scripts/slurm/train.sbatch run under stand-ins for srun (one agent per node, here two processes
// on this machine) and scontrol (the node list's first host is this machine): the script's
// plumbing of node rank, master and port gives a job of two nodes that trains to completion.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::TempDir;
using ltrain::test::writeText;

TEST_CASE("the example sbatch script starts one agent per node and they train together", "[dist]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "bin");
  writeText(dir / "bin/srun",
            "#!/bin/sh\n"
            "while [ \"${1#--}\" != \"$1\" ]; do shift; done  # srun's own options\n"
            "pids=\n"
            "for i in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$i \"$@\" & pids=\"$pids "
            "$!\"; done\n"
            "rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc\n");
  writeText(dir / "bin/scontrol", "#!/bin/sh\necho 127.0.0.1\necho 127.0.0.2\n");
  std::filesystem::permissions(dir / "bin/srun", std::filesystem::perms::owner_all);
  std::filesystem::permissions(dir / "bin/scontrol", std::filesystem::perms::owner_all);
  writeText(dir / "c.yaml",
            "data: {dataset: synthetic, synthetic_shape: [1, 6, 6], synthetic_train_samples: 320, "
            "synthetic_test_samples: 64, batch_size: 16}\nmodel: {hidden: [16]}\n");
  // The script derives the port from the job id (10000 + id % 20000): pick an id whose port is
  // free, or a port left in use by an earlier test fails the rendezvous at once.
  int job = 40000 + getpid() % 20000;
  while (!ltrain::test::portFree(10000 + job % 20000)) ++job;
  auto r = ltrain::test::runProcess(
      {"bash", std::string(LTRAIN_SOURCE_DIR) + "/scripts/slurm/train.sbatch", dir / "c.yaml",
       "train.epochs=1", "model.hidden=[16, 8]"},
      {{"PATH", dir / "bin:" + std::string(std::getenv("PATH"))},
       {"SLURM_JOB_NODELIST", "node[1-2]"},
       {"SLURM_NNODES", "2"},
       {"SLURM_JOB_ID", std::to_string(job)},
       {"LTRAIN_BIN", LTRAIN_BINARY},
       {"LTRAIN_NPROC", "1"},
       {"LTRAIN_OUTPUT_DIR", dir / "run"}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["world_size"] == 2);
  CHECK(std::filesystem::exists(dir / "run/logs/rank_1.log"));
}
