// The loader: every index once, in order, normalised, from any worker count and start batch.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <numeric>

#include "ltrain/data/loader.h"

TEST_CASE("batches come in sampler order with any number of workers and from any start") {
  ltrain::data::Dataset ds;
  ds.inputs = torch::arange(0, 50, torch::kFloat).reshape({50, 1, 1, 1});
  ds.targets = torch::arange(0, 50, torch::kLong);
  std::vector<int64_t> order(50);
  std::iota(order.rbegin(), order.rend(), 0);  // 49, 48, ..., 0
  for (int64_t workers : {0, 1, 3}) {
    for (int64_t start : {0, 2, 5}) {
      for (bool drop_last : {false, true}) {
        ltrain::data::Loader loader(ds, order, 7, drop_last, workers, 2, start);
        CHECK(loader.numBatches() == (drop_last ? 7 : 8));
        std::vector<int64_t> seen;
        ltrain::data::Batch b;
        while (loader.next(b)) {
          CHECK(torch::equal(b.inputs.flatten().to(torch::kLong), b.targets));
          for (int64_t i = 0; i < b.targets.size(0); ++i)
            seen.push_back(b.targets[i].item<int64_t>());
        }
        std::vector<int64_t> expected(order.begin() + start * 7,
                                      order.begin() + (drop_last ? 49 : 50));
        INFO("workers " << workers << " start " << start);
        CHECK(seen == expected);
      }
    }
  }
}

TEST_CASE("uint8 images are scaled to [0,1] then normalised") {
  ltrain::data::Dataset ds;
  ds.inputs = torch::tensor({0, 255}, torch::kUInt8).reshape({2, 1, 1, 1});
  ds.targets = torch::zeros({2}, torch::kLong);
  ds.mean = 0.5f;
  ds.std = 0.25f;
  int64_t idx[2] = {0, 1};
  auto b = ltrain::data::makeBatch(ds, idx, 2);
  CHECK(b.inputs.dtype() == torch::kFloat);
  CHECK(b.inputs[0].item<float>() == Approx(-2.0));
  CHECK(b.inputs[1].item<float>() == Approx(2.0));
}
