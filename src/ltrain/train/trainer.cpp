#include "ltrain/train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdlib>

#include "ltrain/common/errors.h"
#include "ltrain/data/dataset.h"
#include "ltrain/data/distributed_sampler.h"
#include "ltrain/data/loader.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/models/model.h"
#include "ltrain/train/checkpoint.h"
#include "ltrain/train/metrics.h"
#include "ltrain/train/optimizer.h"
#include "ltrain/train/precision.h"
#include "ltrain/train/run_dir.h"
#include "ltrain/train/schedule.h"

namespace ltrain::train {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

EvalResult evaluate(models::Classifier& model, const data::Dataset& ds, int64_t batch_size,
                    const std::string& precision) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> order(ds.size());
  std::iota(order.begin(), order.end(), 0);
  data::Loader loader(ds, std::move(order), batch_size, false, 0, 1);
  double loss_sum = 0;
  int64_t correct = 0;
  data::Batch b;
  while (loader.next(b)) {
    AutocastScope autocast(precision, c10::DeviceType::CPU);
    auto out = model->forward(b.inputs).to(torch::kFloat);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            out, b.targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += out.argmax(1).eq(b.targets).sum().item<int64_t>();
  }
  model->train();
  return {loss_sum / ds.size(), static_cast<double>(correct) / ds.size()};
}

// Test hook for crash-and-resume tests: LTRAIN_FAULT_KILL_AT_STEP=STEP[:RANK] kills this process
// with SIGKILL right after that step, on the first attempt only (a restarted job runs through).
bool faultAt(int64_t step, const dist::Runtime& rt) {
  static const char* spec = std::getenv("LTRAIN_FAULT_KILL_AT_STEP");
  if (!spec || rt.restart_count > 0) return false;
  int64_t at_step = std::atoll(spec), rank = 0;
  if (const char* colon = std::strchr(spec, ':')) rank = std::atoll(colon + 1);
  return step == at_step && rank == rt.rank;
}

class Loop {
 public:
  Loop(const config::LoadedConfig& lc, const TrainRequest& req, const dist::Runtime& rt)
      : cfg_(lc.cfg), rt_(rt) {
    if (cfg_.train.threads > 0) at::set_num_threads(static_cast<int>(cfg_.train.threads));
    // Everything that can be wrong with data or shapes fails here, before the run directory is
    // touched.
    splits_ = data::loadDataset(cfg_.data, static_cast<uint64_t>(cfg_.seed));
    torch::manual_seed(static_cast<uint64_t>(cfg_.seed));
    model_ = models::build(cfg_.model, splits_.train.exampleShape(), splits_.train.num_classes);
    optimizer_ = makeOptimizer(cfg_.optimizer, model_->parameters());
    sampler_ = std::make_unique<data::DistributedSampler>(
        splits_.train.size(), rt_.world_size, rt_.rank, cfg_.data.shuffle, cfg_.seed, false);
    batches_per_epoch_ =
        data::batchesPerEpoch(sampler_->numSamples(), cfg_.data.batch_size, cfg_.data.drop_last);
    if (batches_per_epoch_ == 0)
      throw UsageError(
          fmt::format("data.batch_size {} with data.drop_last leaves no batch from the {} "
                      "training examples per process",
                      cfg_.data.batch_size, sampler_->numSamples()));
    steps_per_epoch_ = (batches_per_epoch_ + cfg_.train.grad_accum - 1) / cfg_.train.grad_accum;
    total_steps_ = cfg_.train.epochs * steps_per_epoch_;
    if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);

    run_ = prepareRunDir(lc, req.output_dir, req.overwrite, rt_.isMain());
    if (run_.resume_from) {
      state_ = loadCheckpoint(*run_.resume_from, *model_, *optimizer_);
      spdlog::info("resuming from {} (step {}, epoch {})", *run_.resume_from, state_.step,
                   state_.epoch + 1);
    }
    if (rt_.isMain()) metrics_.open(run_.metrics(), run_.resume_from ? state_.step : -1);
    spdlog::info("{}: {} with {} parameters, {} training / {} test examples, {} steps", cfg_.name,
                 cfg_.model.name, models::parameterCount(*model_), splits_.train.size(),
                 splits_.test.size(), total_steps_);
  }

  Summary run() {
    const auto start = Clock::now();
    double train_seconds = 0;
    int64_t samples_this_run = 0;
    try {
      while (state_.step < total_steps_ && state_.epoch < cfg_.train.epochs) {
        auto t0 = Clock::now();
        const int64_t before = state_.samples;
        runEpoch();
        train_seconds += secondsSince(t0) - paused_s_;
        samples_this_run += state_.samples - before;
        paused_s_ = 0;
      }
      if (last_eval_step_ != state_.step) evaluateAndLog();
      if (last_ckpt_step_ != state_.step) checkpoint();
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      writeSummary("failed", secondsSince(start), 0, e.what());
      throw;
    }
    Summary s;
    s.status = "completed";
    s.test_accuracy = last_eval_.accuracy;
    s.test_loss = last_eval_.loss;
    s.train_loss = epoch_loss_count_ ? epoch_loss_sum_ / epoch_loss_count_ : 0;
    s.steps = state_.step;
    s.epochs = state_.epoch;
    s.wall_s = secondsSince(start);
    s.samples_per_s = train_seconds > 0 ? samples_this_run / train_seconds : 0;
    s.world_size = rt_.world_size;
    s.run_dir = run_.path;
    writeSummary(s.status, s.wall_s, s.samples_per_s, "");
    return s;
  }

 private:
  void runEpoch() {
    sampler_->setEpoch(state_.epoch);
    data::Loader loader(splits_.train, sampler_->indices(), cfg_.data.batch_size,
                        cfg_.data.drop_last, cfg_.data.num_workers, cfg_.data.prefetch,
                        state_.batch_in_epoch);
    if (state_.batch_in_epoch == 0) epoch_loss_sum_ = 0, epoch_loss_count_ = 0;
    model_->train();
    auto window_start = Clock::now();
    int64_t window_samples = 0;
    double window_loss = 0;
    int64_t window_steps = 0;
    data::Batch b;
    while (state_.step < total_steps_) {
      const int64_t k = std::min(cfg_.train.grad_accum, batches_per_epoch_ - state_.batch_in_epoch);
      if (k <= 0) break;
      const double lr = learningRate(cfg_.optimizer, cfg_.scheduler, state_.step, total_steps_);
      setLearningRate(*optimizer_, lr);
      optimizer_->zero_grad();
      torch::Tensor step_loss = torch::zeros({});
      int64_t step_samples = 0;
      for (int64_t i = 0; i < k; ++i) {
        if (!loader.next(b)) throw std::runtime_error("loader ended before the epoch's last batch");
        torch::Tensor loss;
        {
          AutocastScope autocast(cfg_.train.precision, c10::DeviceType::CPU);
          loss = torch::nn::functional::cross_entropy(model_->forward(b.inputs).to(torch::kFloat),
                                                      b.targets);
        }
        (loss / k).backward();
        step_loss += loss.detach() / k;
        step_samples += b.targets.size(0);
      }
      if (cfg_.train.clip_grad_norm > 0)
        torch::nn::utils::clip_grad_norm_(model_->parameters(), cfg_.train.clip_grad_norm);
      optimizer_->step();
      ++state_.step;
      state_.batch_in_epoch += k;
      state_.samples += step_samples * rt_.world_size;
      const double loss_value = step_loss.item<double>();
      if (!std::isfinite(loss_value))
        throw std::runtime_error(
            fmt::format("training loss is {} at step {}", loss_value, state_.step));
      window_loss += loss_value, ++window_steps, window_samples += step_samples * rt_.world_size;
      epoch_loss_sum_ += loss_value, ++epoch_loss_count_;

      if (state_.step % cfg_.train.log_every == 0 || state_.step == total_steps_) {
        const double secs = secondsSince(window_start);
        logTrain(window_loss / window_steps, lr, secs > 0 ? window_samples / secs : 0);
        window_loss = 0, window_steps = 0, window_samples = 0;
        window_start = Clock::now();
      }
      const bool epoch_done = state_.batch_in_epoch >= batches_per_epoch_;
      if (epoch_done) ++state_.epoch, state_.batch_in_epoch = 0;
      auto t_pause = Clock::now();
      if ((cfg_.train.eval_every > 0 && state_.step % cfg_.train.eval_every == 0) ||
          (cfg_.train.eval_every == 0 && epoch_done))
        evaluateAndLog();
      if ((cfg_.train.checkpoint_every > 0 && state_.step % cfg_.train.checkpoint_every == 0) ||
          (cfg_.train.checkpoint_every == 0 && epoch_done))
        checkpoint();
      const double paused = secondsSince(t_pause);
      paused_s_ += paused;
      window_start +=
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(paused));
      if (faultAt(state_.step, rt_)) std::raise(SIGKILL);
      if (epoch_done) break;
    }
  }

  void logTrain(double loss, double lr, double samples_per_s) {
    if (!rt_.isMain()) return;
    spdlog::info("ep {}/{} step {}/{} | loss {:.4f} | lr {:.3g} | {:.0f} samples/s",
                 state_.epoch + 1, cfg_.train.epochs, state_.step, total_steps_, loss, lr,
                 samples_per_s);
    metrics_.write(io::JsonObject()
                       .add("step", state_.step)
                       .add("epoch", state_.epoch)
                       .add("split", "train")
                       .add("loss", loss)
                       .add("lr", lr)
                       .add("samples_per_s", samples_per_s)
                       .add("wall_time", wallTime()));
  }

  void evaluateAndLog() {
    last_eval_ = evaluate(model_, splits_.test, cfg_.data.eval_batch_size, cfg_.train.precision);
    last_eval_step_ = state_.step;
    if (!rt_.isMain()) return;
    spdlog::info("eval step {} | test loss {:.4f} | test accuracy {:.4f}", state_.step,
                 last_eval_.loss, last_eval_.accuracy);
    metrics_.write(io::JsonObject()
                       .add("step", state_.step)
                       .add("epoch", state_.epoch)
                       .add("split", "test")
                       .add("loss", last_eval_.loss)
                       .add("accuracy", last_eval_.accuracy)
                       .add("wall_time", wallTime()));
  }

  void checkpoint() {
    last_ckpt_step_ = state_.step;
    if (!rt_.isMain()) return;
    saveCheckpoint(checkpointPath(run_.checkpoints(), state_.step), *model_, *optimizer_, state_);
  }

  void writeSummary(const std::string& status, double wall_s, double samples_per_s,
                    const std::string& error) {
    if (!rt_.isMain() || run_.path.empty()) return;
    io::JsonObject j;
    j.add("status", status)
        .add("test_accuracy", last_eval_.accuracy)
        .add("test_loss", last_eval_.loss)
        .add("train_loss", epoch_loss_count_ ? epoch_loss_sum_ / epoch_loss_count_ : 0.0)
        .add("steps", state_.step)
        .add("epochs", state_.epoch)
        .add("wall_s", wall_s)
        .add("samples_per_s", samples_per_s)
        .add("world_size", rt_.world_size);
    if (!error.empty()) j.add("error", error);
    io::writeFileAtomic(run_.summary(), j.str() + "\n");
  }

  static double wallTime() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  const config::ExperimentConfig& cfg_;
  dist::Runtime rt_;
  data::Splits splits_;
  models::Classifier model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<data::DistributedSampler> sampler_;
  int64_t batches_per_epoch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  RunDir run_;
  LoopState state_;
  MetricsLog metrics_;
  EvalResult last_eval_;
  int64_t last_eval_step_ = -1, last_ckpt_step_ = -1;
  double epoch_loss_sum_ = 0;
  int64_t epoch_loss_count_ = 0;
  double paused_s_ = 0;
};

}  // namespace

Summary runTraining(const config::LoadedConfig& lc, const TrainRequest& req,
                    const dist::Runtime& rt) {
  Loop loop(lc, req, rt);
  return loop.run();
}

}  // namespace ltrain::train
