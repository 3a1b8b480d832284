// model.placement pipeline applied to a model from outside (pipeline.cpp): its layers split into
// contiguous stages, each on its device, run by GPipe's schedule or model.pipeline_schedule 1f1b.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ltrain::models {

struct ClassifierImpl;

class Pipeline {
 public:
  struct Stage {
    size_t begin, end;  // layers [begin, end)
    torch::Device device;
  };
  Pipeline(std::vector<Stage> stages, int64_t micro_batches, bool one_f_one_b)
      : stages_(std::move(stages)), micro_batches_(micro_batches), one_f_one_b_(one_f_one_b) {}

  // GPipe: every micro-batch forward through the stages, the outputs concatenated; one backward
  // follows.
  torch::Tensor forward(ClassifierImpl& model, const torch::Tensor& x) const;
  // The loss summed over a micro-batch's targets, from its float outputs.
  using MicroBatchLoss = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
  // One batch's forward and backward under the 1F1B schedule: stage s does stages - 1 - s warm-up
  // forwards, then alternates a forward and a backward, then the rest of its backwards, so at most
  // stages - s micro-batches' activations are alive on it. Gradients accumulate as one backward of
  // (sum of the micro-batches' losses / the batch's target count) x `scale` would give;
  // `before_last_backward(s)`, when set, runs just before stage s's last backward (DDP arms that
  // stage's reducer there). Returns the batch's mean loss, detached.
  torch::Tensor step(ClassifierImpl& model, const torch::Tensor& x, const torch::Tensor& y,
                     const MicroBatchLoss& loss_sum, const torch::Tensor& scale,
                     const std::function<void(size_t)>& before_last_backward) const;
  // The stage each op of a 1F1B schedule runs, for tests and the bubble count: per stage, its ops
  // in order, a forward of micro-batch m as m and its backward as -(m + 1).
  static std::vector<std::vector<int64_t>> oneFOneBOrder(int64_t stages, int64_t micro_batches);
  // "layers 0-2 on cpu, layers 3-5 on cpu" for the log.
  std::string summary() const;
  const std::vector<Stage>& stages() const { return stages_; }
  bool oneFOneB() const { return one_f_one_b_; }

 private:
  std::vector<Stage> stages_;
  int64_t micro_batches_;
  bool one_f_one_b_;
};

// Splits `model`'s layers into devices.size() contiguous stages of about equal parameter count,
// moves stage s to devices[s] and installs the pipeline (model->pipeline): forward() then runs
// GPipe's schedule over `micro_batches` slices of the batch, and with `one_f_one_b` training runs
// Pipeline::step instead. Parameter names do not change. UsageError for fewer than 2 stages or
// more stages than layers.
void applyPipeline(ClassifierImpl& model, const std::vector<torch::Device>& devices,
                   int64_t micro_batches, bool one_f_one_b = false);

}  // namespace ltrain::models
