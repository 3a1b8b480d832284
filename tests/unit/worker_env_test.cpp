// The launcher's worker environment matches torchrun's contract.
#include <catch2/catch.hpp>

#include "ltrain/common/errors.h"
#include "ltrain/launch/launch_options.h"

using namespace ltrain::launch;

TEST_CASE("workers get torchrun's variables") {
  LaunchOptions o;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.1.2.3";
  o.max_restarts = 3;
  o.run_id = "job7";
  auto env = workerEnv(o, 4, 2, 29600, 1, "/tmp/err.json", false);
  CHECK(env["RANK"] == "6");
  CHECK(env["LOCAL_RANK"] == "2");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["ROLE_RANK"] == "6");
  CHECK(env["ROLE_WORLD_SIZE"] == "8");
  CHECK(env["ROLE_NAME"] == "default");
  CHECK(env["MASTER_ADDR"] == "10.1.2.3");
  CHECK(env["MASTER_PORT"] == "29600");
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "3");
  CHECK(env["TORCHELASTIC_RUN_ID"] == "job7");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");
  CHECK(env["TORCHELASTIC_ERROR_FILE"] == "/tmp/err.json");
  CHECK(env["OMP_NUM_THREADS"] == "1");
  CHECK(workerEnv(o, 4, 0, 1, 0, "e", true).count("OMP_NUM_THREADS") ==
        0);  // the user's choice stands
  CHECK(workerEnv(o, 1, 0, 1, 0, "e", false).count("OMP_NUM_THREADS") == 0);  // one worker per node
}

TEST_CASE("nproc-per-node accepts N, auto, cpu and gpu") {
  CHECK(resolveNproc("3", 0, 16) == 3);
  CHECK(resolveNproc("auto", 0, 16) == 16);
  CHECK(resolveNproc("auto", 8, 16) == 8);
  CHECK(resolveNproc("cpu", 8, 16) == 16);
  CHECK(resolveNproc("gpu", 8, 16) == 8);
  // Pipeline workers of 2 stages each: half as many workers as GPUs.
  CHECK(resolveNproc("gpu", 8, 16, 2) == 4);
  CHECK(resolveNproc("auto", 8, 16, 3) == 2);
  CHECK(resolveNproc("auto", 0, 16, 2) == 16);  // CPU: stages share the process's cores
  CHECK_THROWS_WITH(resolveNproc("gpu", 1, 16, 2),
                    Catch::Matchers::Contains("each worker drives 2 GPUs"));
  CHECK_THROWS_AS(resolveNproc("gpu", 0, 16), ltrain::UsageError);
  CHECK_THROWS_WITH(resolveNproc("two", 0, 16), Catch::Matchers::Contains("expected a number"));
  CHECK_THROWS_AS(resolveNproc("0", 0, 16), ltrain::UsageError);
}
