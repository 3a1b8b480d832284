// Learning-rate schedules: warm-up, then constant, step, cosine and linear.
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/train/schedule.h"

using ltrain::train::learningRate;

TEST_CASE("warm-up rises linearly to the peak") {
  auto c = ltrain::config::defaults();
  c.optimizer.lr = 1.0;
  c.scheduler.warmup_steps = 4;
  CHECK(learningRate(c.optimizer, c.scheduler, 0, 100) == Approx(0.25));
  CHECK(learningRate(c.optimizer, c.scheduler, 3, 100) == Approx(1.0));
  CHECK(learningRate(c.optimizer, c.scheduler, 50, 100) == Approx(1.0));
}

TEST_CASE("cosine and linear reach min_lr at the last step, and step decays by gamma") {
  auto c = ltrain::config::defaults();
  c.optimizer.lr = 1.0;
  c.scheduler.min_lr = 0.1;
  c.scheduler.name = ltrain::config::SchedulerName::kCosine;
  CHECK(learningRate(c.optimizer, c.scheduler, 0, 11) == Approx(1.0));
  CHECK(learningRate(c.optimizer, c.scheduler, 5, 11) == Approx(0.55));
  CHECK(learningRate(c.optimizer, c.scheduler, 10, 11) == Approx(0.1));
  c.scheduler.name = ltrain::config::SchedulerName::kLinear;
  CHECK(learningRate(c.optimizer, c.scheduler, 5, 11) == Approx(0.55));
  CHECK(learningRate(c.optimizer, c.scheduler, 10, 11) == Approx(0.1));
  c.scheduler.name = ltrain::config::SchedulerName::kStep;
  c.scheduler.step_size = 3;
  c.scheduler.gamma = 0.5;
  CHECK(learningRate(c.optimizer, c.scheduler, 2, 100) == Approx(1.0));
  CHECK(learningRate(c.optimizer, c.scheduler, 3, 100) == Approx(0.5));
  CHECK(learningRate(c.optimizer, c.scheduler, 7, 100) == Approx(0.25));
}

TEST_CASE("wsd warms up, holds the peak, then decays linearly to min_lr over decay_fraction") {
  auto c = ltrain::config::defaults();
  c.optimizer.lr = 1.0;
  c.scheduler.name = ltrain::config::SchedulerName::kWsd;
  c.scheduler.warmup_steps = 2;
  c.scheduler.decay_fraction = 0.2;  // the last 4 of 20 steps
  c.scheduler.min_lr = 0.2;
  CHECK(learningRate(c.optimizer, c.scheduler, 0, 20) == Approx(0.5));
  CHECK(learningRate(c.optimizer, c.scheduler, 2, 20) == Approx(1.0));
  CHECK(learningRate(c.optimizer, c.scheduler, 15, 20) == Approx(1.0));
  CHECK(learningRate(c.optimizer, c.scheduler, 16, 20) == Approx(0.8));
  CHECK(learningRate(c.optimizer, c.scheduler, 18, 20) == Approx(0.4));
  CHECK(learningRate(c.optimizer, c.scheduler, 19, 20) == Approx(0.2));
}
