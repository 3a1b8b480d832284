// fp16 loss scaling: unscale, skip on inf/nan with back-off, growth after a run of good steps.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/distributed/gradients.h"
#include "ltrain/train/grad_scaler.h"

namespace {
// What the training step does with the scaler: unscale and test, then update the scale.
bool unscaleAndUpdate(ltrain::train::GradScaler& s, torch::Tensor& p) {
  auto found = ltrain::distributed::unscaleAndFindInf({p.grad()}, s.inverse());
  s.update(found);
  return found.item<float>() == 0.f;
}
}  // namespace

TEST_CASE("the scaler unscales, skips steps with inf or nan and adapts its scale") {
  ltrain::train::GradScaler s(true, 1024.0, 2.0, 0.5, 3);
  auto p = torch::zeros({2}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({2048.0f, 1024.0f});
  CHECK(unscaleAndUpdate(s, p));
  CHECK(torch::allclose(p.grad(), torch::tensor({2.0f, 1.0f})));
  CHECK(s.growthTracker() == 1);
  p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity()});
  CHECK(!unscaleAndUpdate(s, p));
  CHECK(s.scale() == 512.0);
  CHECK(s.growthTracker() == 0);
  p.mutable_grad() = torch::tensor({std::nanf(""), 0.f});
  CHECK(!unscaleAndUpdate(s, p));
  CHECK(s.scale() == 256.0);
  for (int i = 0; i < 3; ++i) {
    p.mutable_grad() = torch::ones({2});
    CHECK(unscaleAndUpdate(s, p));
  }
  CHECK(s.scale() == 512.0);  // three good steps in a row double it
  CHECK(s.growthTracker() == 0);
  s.restore(128.0, 2);
  CHECK(s.scale() == 128.0);
  CHECK(s.growthTracker() == 2);
}
