// Test support for the [cuda] cases: whether a CUDA device is here. Where none is, a case says
// so (a warning) and checks nothing: not coverage on a CPU-only machine. scripts/gpu_check.sh sets
// LTRAIN_EXPECT_CUDA=1 on the GPU machine, where a missing GPU (a plugin that did not load, say)
// then fails the case instead of skipping it.
#pragma once
#include <torch/cuda.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace ltrain::test {

inline bool haveCuda() {
  if (torch::cuda::is_available()) return true;
  const char* expect = std::getenv("LTRAIN_EXPECT_CUDA");
  if (expect && std::string(expect) == "1") FAIL("LTRAIN_EXPECT_CUDA=1 but LibTorch sees no GPU");
  WARN("no CUDA device here: this check runs in scripts/gpu_check.sh on a GPU machine");
  return false;
}

}  // namespace ltrain::test
