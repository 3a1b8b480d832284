// The trainer's parts, shared by the files that implement it: trainer.cpp (the wiring and the
// loop: start-up, epochs, steps) and trainer_report.cpp (logging windows, evaluation,
// checkpoints, summary.json, the end of a run). Only runTraining (trainer.h) is public.
#pragma once
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ltrain/checkpoint/checkpointing.h"
#include "ltrain/common/memory_phase.h"
#include "ltrain/common/rng_streams.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/data/distributed_sampler.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/train/evaluate.h"
#include "ltrain/train/faults.h"
#include "ltrain/train/grad_scaler.h"
#include "ltrain/train/loss_tally.h"
#include "ltrain/train/reporter.h"
#include "ltrain/train/step.h"
#include "ltrain/train/stop_vote.h"
#include "ltrain/train/trainer.h"

namespace ltrain::models {
struct LoraSummary;
}

namespace ltrain::train {

using Clock = std::chrono::steady_clock;
inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What one logging window accumulates between two train reports (its losses: LossTally).
struct Window {
  Clock::time_point start = Clock::now();
  double data_wait_s = 0, comm_wait_s = 0, all_to_all_s = 0;
  int64_t steps = 0, samples = 0, collectives = 0;
  torch::Tensor dpo_stats;  // finetune.method dpo: the steps' DpoTerms::stats, summed
  // Mixture-of-experts families: the steps' routers' loss and tokens per expert, summed.
  torch::Tensor aux_loss, expert_counts;
  int64_t aux_steps = 0;
};

class Trainer {
 public:
  Trainer(const config::LoadedConfig& lc, const TrainRequest& req, const distributed::Runtime& rt);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  Summary run();

 private:
  void prepare(const config::LoadedConfig& lc, const TrainRequest& req);
  // train/trainer_resume.cpp: the chosen checkpoint loaded, the model placed and spread by the
  // plan, the optimizer state into it. True when the run resumed.
  bool resumeAndSpread(const distributed::ParallelPlan::MakeOptimizer& make_optimizer);
  void adoptWorldSize();
  void checkTensorParallelRanks() const;
  void announceLora(const models::LoraSummary& s);
  double secondsToGo() const;
  void applyThreads();
  void attachRankLog();
  void announce();
  void runEpoch();
  void afterStep(const StepResult& r, Window& w);
  bool betweenSteps(bool epoch_done, Window& w);
  void logWindow(Window& w, double lr);
  void evaluateAndLog();
  void checkpoint();
  Summary finish(double wall_s, double samples_per_s);
  Summary stopOnSignal(double wall_s);
  void writeSummary(const std::string& status, double wall_s, double samples_per_s,
                    const std::string& error, bool read_device = true);
  double epochLossMean();
  std::vector<std::string> skippedImageFiles();
  void readTally();
  // What a checkpoint holds besides the model and the plan's state, each saving its own.
  checkpoint::Components parts() { return {&state_, &scaler_, tally_.get(), &rng_}; }
  void stopOnDeferredNonFinite();
  // What the plan keeps from step to step (LTRAIN_MEMORY_LOG's categories).
  KeptMemory keptMemory() const;

  const config::ExperimentConfig& cfg_;
  distributed::Runtime rt_;
  StopSignal stop_requests_;  // from the start: SIGTERM while starting ends it "interrupted"
  Faults faults_;
  Reporter reporter_;
  compute::Devices devices_;
  data::Splits splits_;
  models::Classifier model_{nullptr};
  std::unique_ptr<data::DistributedSampler> sampler_;
  // How the data is dealt: over the data-parallel replicas (dist.tensor_parallel's groups each
  // take one share, every rank of a group the same batches).
  int64_t data_world_ = 1, data_rank_ = 0;
  int64_t batches_per_epoch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  int64_t epochs_ = 0;  // train.epochs, or as many as train.max_steps takes
  double flops_per_token_ = 0, peak_flops_ = 0;  // MFU's terms; 0: not reported
  int64_t epoch_batches_ = 0;  // this rank's batches in the current epoch (a resumed one: its
                               // earlier ones plus those dealt out anew)
  std::shared_ptr<distributed::ProcessGroup> pg_;
  RunDir run_;
  checkpoint::LoopState state_;
  std::unique_ptr<distributed::ParallelPlan> plan_;
  GradScaler scaler_{cfg_.train.precision == config::Precision::kFp16};
  std::unique_ptr<Dpo> dpo_;  // finetune.method dpo: the reference, kept from the start
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<checkpoint::Checkpointer> checkpointer_;
  StopVote vote_;
  int stop_signal_ = 0;
  std::unique_ptr<LossTally> tally_;
  LossTally::Totals totals_;  // the tally as last read on the host
  RngStreams rng_{torch::kCPU};
  std::map<int64_t, StepPosition> window_positions_;  // a GPU's deferred inf/nan report names them
  EvalResult last_eval_;
  int64_t last_eval_step_ = -1, last_ckpt_step_ = -1, start_step_ = 0;
  double paused_s_ = 0, first_step_wall_time_ = 0, peak_rss_mb_ = 0, optimizer_state_mb_ = 0;
  double peak_cuda_mb_ = 0, gradient_mb_ = 0, parameter_mb_ = 0, gathered_peak_mb_ = 0;
  double last_lr_ = 0, last_window_loss_ = std::nan("");
  int64_t skipped_draws_seen_ = 0;  // data.on_bad_image skip: reported in earlier windows
  std::optional<std::vector<std::string>> skipped_image_files_;
  Clock::time_point run_start_ = Clock::now();
  // Last, so gone first (a constructor that throws too): keptMemory() reads plan_ and model_.
  struct ForgetKeptMemory {
    ~ForgetKeptMemory() { setKeptMemory(nullptr); }
  } forget_kept_memory_;
};

}  // namespace ltrain::train
