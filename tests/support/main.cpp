#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "ltrain/cuda/plugin.h"

int main(int argc, char** argv) {
  // As ltrain's main(): LibTorch's CUDA libraries where a GPU driver is, before any test asks
  // LibTorch about CUDA (it decides once).
  ltrain::cuda::loadIfPresent();
  return Catch::Session().run(argc, argv);
}
