#include "ltrain/train/trainer.h"
#include "ltrain/train/trainer_parts.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <map>
#include <memory>
#include <optional>

#include "ltrain/checkpoint/checkpointing.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/memory.h"
#include "ltrain/common/memory_phase.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/cuda/plugin.h"
#include "ltrain/data/distributed_sampler.h"
#include "ltrain/data/loader.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/io/error_report.h"
#include "ltrain/train/evaluate.h"
#include "ltrain/train/faults.h"
#include "ltrain/train/grad_scaler.h"
#include "ltrain/train/loss_tally.h"
#include "ltrain/train/mfu.h"
#include "ltrain/train/reporter.h"
#include "ltrain/train/step.h"
#include "ltrain/train/stop_vote.h"
#include "ltrain/train/sync_debug.h"

namespace ltrain::train {
namespace {

// Seconds since ltrain's launcher started the job (LTRAIN_JOB_START, Unix time), restarts and
// waits included; this attempt's `wall_s` when another launcher (or none) started it.
double jobWallSeconds(double wall_s) {
  const char* start = std::getenv("LTRAIN_JOB_START");
  char* end = nullptr;
  const double t0 = start ? std::strtod(start, &end) : 0;
  if (!start || end == start || t0 <= 0) return wall_s;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return std::max(wall_s, now - t0);
}

// metrics.jsonl's aux_loss (the routers' load-balancing loss, unweighted, averaged over the
// window's steps and the ranks) and expert_load_max_over_mean: over the window's tokens, the
// busiest expert's share against an even one, in the least even layer (1: perfectly balanced).
std::vector<std::pair<std::string, double>> routerMetrics(const std::vector<double>& sums,
                                                          int64_t experts, int64_t steps) {
  double worst = 0;
  for (size_t at = 1; at + static_cast<size_t>(experts) <= sums.size(); at += experts) {
    double most = 0, total = 0;
    for (int64_t e = 0; e < experts; ++e)
      most = std::max(most, sums[at + e]), total += sums[at + e];
    if (total > 0) worst = std::max(worst, most * static_cast<double>(experts) / total);
  }
  return {{"aux_loss", sums[0] / static_cast<double>(std::max<int64_t>(steps, 1))},
          {"expert_load_max_over_mean", worst}};
}

}  // namespace

void Trainer::logWindow(Window& w, double lr) {
  const double secs = secondsSince(w.start);
  stopOnDeferredNonFinite();
  readTally();
  double loss = tally_->takeWindowMean();
  const bool skip_bad = cfg_.data.on_bad_image == config::BadImage::kSkip && splits_.train.source;
  double skipped = 0;
  if (skip_bad) {
    const int64_t draws = splits_.train.source->skippedDraws();
    skipped = static_cast<double>(draws - skipped_draws_seen_);
    skipped_draws_seen_ = draws;
  }
  std::vector<double> dpo_sums;  // finetune.method dpo: the window's reward sums
  if (w.dpo_stats.defined()) {
    const auto host = w.dpo_stats.to(torch::kCPU, torch::kDouble).contiguous();
    dpo_sums.assign(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
  }
  // Mixture of experts: the routers' loss, then the tokens each layer's experts got.
  std::vector<double> router_sums;
  if (w.aux_loss.defined()) {
    router_sums.push_back(w.aux_loss.item<double>());
    const auto counts = w.expert_counts.to(torch::kCPU, torch::kDouble).contiguous();
    router_sums.insert(router_sums.end(), counts.data_ptr<double>(),
                       counts.data_ptr<double>() + counts.numel());
  }
  if (pg_) {
    auto sums = pg_->allreduceSum({loss, skipped});
    loss = sums[0] / rt_.world_size;  // the mean over ranks
    skipped = sums[1];
    if (!dpo_sums.empty()) dpo_sums = pg_->allreduceSum(dpo_sums);
    if (!router_sums.empty()) router_sums = pg_->allreduceSum(router_sums);
  }
  last_window_loss_ = loss;
  TrainReport r;
  r.grad_norm = plan_->gradNorm();  // collective where gradients are sharded
  plan_->checkReplicas();
  r.step = state_.step, r.epoch = state_.epoch, r.epochs = epochs_;
  r.total_steps = total_steps_;
  r.loss = loss, r.lr = lr;
  r.samples_per_s = secs > 0 ? w.samples / secs : 0;
  r.data_wait_ms_per_step = 1000.0 * w.data_wait_s / w.steps;
  r.data_wait_share = secs > 0 ? w.data_wait_s / secs : 0.0;
  r.skipped_steps = totals_.skipped;
  if (skip_bad) r.skipped_images = static_cast<int64_t>(skipped);
  r.tokens_per_sample = !splits_.train.tokens ? 1
                        : splits_.train.pairs ? 2 * cfg_.model.block_size  // two answers a pair
                                              : cfg_.model.block_size;
  r.elapsed_s = secondsSince(run_start_);
  r.eta_s = secondsToGo();
  if (flops_per_token_ > 0 && peak_flops_ > 0)
    r.mfu =
        flops_per_token_ * r.samples_per_s * static_cast<double>(r.tokens_per_sample) / peak_flops_;
  if (scaler_.enabled()) r.loss_scale = scaler_.scale();
  if (!dpo_sums.empty()) r.extra = dpoMetrics(dpo_sums);
  if (!router_sums.empty())
    r.extra = routerMetrics(router_sums, w.expert_counts.size(1),
                            w.aux_steps * (pg_ ? rt_.world_size : 1));
  if (pg_) {
    r.collectives_per_step = static_cast<double>(w.collectives) / w.steps;
    r.comm_wait_ms_per_step = 1000.0 * w.comm_wait_s / w.steps;
    if (cfg_.dist.expert_parallel > 1)  // the experts' token exchange, forward and backward
      r.extra.emplace_back("all_to_all_ms_per_step", 1000.0 * w.all_to_all_s / w.steps);
  }
  reporter_.train(r);
  w = Window{};
}

void Trainer::evaluateAndLog() {
  distributed::PhaseScope phase(pg_.get(), distributed::Phase::kEvaluate);
  MemoryPhase memory("evaluate");
  last_eval_ = evaluate(model_, splits_.test, cfg_.data.eval_batch_size, cfg_.train.precision,
                        devices_, pg_.get(), dpo_.get());
  last_eval_step_ = state_.step;
  reporter_.evaluation({state_.step, state_.epoch, heldOutName(splits_.test), last_eval_.loss,
                        last_eval_.accuracy, languageModel(splits_.test), splits_.test.pairs});
}

void Trainer::checkpoint() {
  distributed::PhaseScope phase(pg_.get(), distributed::Phase::kCheckpoint);
  last_ckpt_step_ = state_.step;
  stopOnDeferredNonFinite();
  readTally();  // what a hang's summary says from here on
  MemoryPhase memory("save");
  checkpointer_->save(model_, plan_->state(), state_.step, parts());
}

// The device's sums onto the host (a synchronisation on a GPU: log, summary).
void Trainer::readTally() {
  if (tally_) totals_ = tally_->read();
}

// train.nonfinite stop on a GPU: the step with inf/nan gradients was skipped on the device, and
// the run stops at the next report naming it.
void Trainer::stopOnDeferredNonFinite() {
  if (window_positions_.empty()) return;
  const auto positions = std::move(window_positions_);
  window_positions_.clear();
  if (scaler_.enabled() || cfg_.train.nonfinite != config::NonFinite::kStop) return;
  const int64_t bad = tally_->firstSkippedStep();
  if (bad < 0) return;
  const auto it = positions.find(bad);
  throw std::runtime_error(fmt::format(
      "gradients are not finite at step {}{} on rank {} (skipped on the device, noticed at step "
      "{}); train.nonfinite=skip would skip such steps",
      bad,
      it == positions.end() ? ""
                            : fmt::format(" (epoch {}, batch {} of the epoch)",
                                          it->second.epoch + 1, it->second.batch_in_epoch),
      rt_.rank, state_.step));
}

double Trainer::epochLossMean() {
  try {
    readTally();
  } catch (const std::exception&) {
    // A broken device: summary.json keeps the sums as of the last report.
  }
  return totals_.epochMean();
}

Summary Trainer::finish(double wall_s, double samples_per_s) {
  Summary s;
  s.status = "completed";
  s.test_accuracy = last_eval_.accuracy;
  s.test_loss = last_eval_.loss;
  s.train_loss = epochLossMean();
  s.steps = state_.step;
  s.epochs = state_.epoch;
  s.wall_s = wall_s;
  s.samples_per_s = samples_per_s;
  s.world_size = rt_.world_size;
  s.run_dir = run_.path;
  s.language_model = languageModel(splits_.test);
  s.preference = splits_.test.pairs;
  // The worst rank's peak memory and optimizer state (a sum of one-hot vectors stands in for a
  // max-reduction): ZeRO's point is that the state shrinks.
  const auto w = static_cast<std::ptrdiff_t>(rt_.world_size);
  constexpr double kMiB = 1024.0 * 1024.0;
  std::vector<double> per_rank(6 * rt_.world_size, 0.0);
  per_rank[rt_.rank] = processPeakRssMb();  // across the phases' resets
  const auto plan = plan_->summary();
  per_rank[w + rt_.rank] = static_cast<double>(plan.optimizer_state_bytes) / kMiB;
  if (devices_.main.is_cuda())
    per_rank[2 * w + rt_.rank] = cuda::peakAllocatedMb(devices_.main.index());
  per_rank[3 * w + rt_.rank] = static_cast<double>(plan.gradient_bytes) / kMiB;
  per_rank[4 * w + rt_.rank] = static_cast<double>(plan.parameter_bytes) / kMiB;
  per_rank[5 * w + rt_.rank] = static_cast<double>(plan.gathered_peak_bytes) / kMiB;
  if (pg_) per_rank = pg_->allreduceSum(per_rank);
  auto worst = [&](std::ptrdiff_t k) {
    return *std::max_element(per_rank.begin() + k * w, per_rank.begin() + (k + 1) * w);
  };
  peak_rss_mb_ = worst(0), optimizer_state_mb_ = worst(1), peak_cuda_mb_ = worst(2);
  gradient_mb_ = worst(3), parameter_mb_ = worst(4), gathered_peak_mb_ = worst(5);
  if (cfg_.data.on_bad_image == config::BadImage::kSkip) skipped_image_files_ = skippedImageFiles();
  writeSummary(s.status, s.wall_s, s.samples_per_s, "");
  return s;
}

// Every rank stopped after the same step; rank 0 saves it (train.on_signal checkpoint) and the
// others wait for that, so that nothing exits before the checkpoint is on disk.
Summary Trainer::stopOnSignal(double wall_s) {
  const char* name = stop_signal_ == SIGINT ? "SIGINT" : "SIGTERM";
  const bool save = cfg_.train.on_signal == config::OnSignal::kCheckpoint;
  if (save && last_ckpt_step_ != state_.step) checkpoint();
  if (pg_) pg_->barrier(fmt::format("stop-{}", state_.step), /*stopping=*/true);
  reporter_.warn(fmt::format("stopped by {} after step {}{}", name, state_.step,
                             save ? fmt::format("; checkpoint {} holds it, and the next launch "
                                                "resumes there",
                                                checkpointer_->lastSaved())
                                  : " (train.on_signal=stop: no checkpoint written)"));
  writeSummary("interrupted", wall_s, 0, fmt::format("stopped by {}", name));
  Summary s;
  s.status = "interrupted";
  s.steps = state_.step;
  s.epochs = state_.epoch;
  s.run_dir = run_.path;
  s.stop_signal = stop_signal_;
  return s;
}

// The files every rank left out (each rank read its own shard), gathered on rank 0 through the
// store at the end of the run: once, and small.
std::vector<std::string> Trainer::skippedImageFiles() {
  std::set<std::string> files;
  for (const auto* ds : {&splits_.train, &splits_.test})
    if (ds->source)
      for (auto& f : ds->source->skippedFiles()) files.insert(f);
  if (pg_) {
    std::string mine;
    for (const auto& f : files) mine += f + '\n';
    const auto key = [&](int64_t r) { return fmt::format("skipped-images/{}/{}", state_.step, r); };
    auto store = pg_->store();
    store->set(key(rt_.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    if (rt_.rank == 0)
      for (int64_t r = 1; r < rt_.world_size; ++r) {
        const auto bytes = store->get(key(r));
        std::string line;
        for (auto b : bytes)
          if (b == '\n')
            files.insert(line), line.clear();
          else
            line += static_cast<char>(b);
      }
  }
  return {files.begin(), files.end()};
}

void Trainer::writeSummary(const std::string& status, double wall_s, double samples_per_s,
                           const std::string& error, bool read_device) {
  SummaryReport s;
  s.status = status;
  s.test_accuracy = last_eval_.accuracy, s.test_loss = last_eval_.loss;
  if (read_device) epochLossMean();  // reads the device's sums into totals_
  s.train_loss = totals_.epochMean();
  s.steps = state_.step, s.epochs = state_.epoch, s.world_size = rt_.world_size;
  s.skipped_steps = totals_.skipped;
  s.wall_s = wall_s, s.samples_per_s = samples_per_s;
  s.restarts = rt_.restart_count;
  s.job_wall_s = jobWallSeconds(wall_s);
  // Language models: the validation split's loss (test_loss above) as perplexity too.
  if (languageModel(splits_.test) && last_eval_step_ >= 0)
    s.val_perplexity = std::exp(last_eval_.loss);
  if (first_step_wall_time_ > 0) s.first_step_wall_time = first_step_wall_time_;
  if (peak_rss_mb_ > 0) s.peak_rss_mb = peak_rss_mb_;
  if (optimizer_state_mb_ > 0) s.optimizer_state_mb = optimizer_state_mb_;
  if (gradient_mb_ > 0) s.gradient_mb = gradient_mb_;
  if (parameter_mb_ > 0) s.parameter_mb = parameter_mb_;
  if (gathered_peak_mb_ > 0) s.gathered_peak_mb = gathered_peak_mb_;
  if (peak_cuda_mb_ > 0) s.peak_cuda_memory_mb = peak_cuda_mb_;
  s.skipped_image_files = skipped_image_files_;
  s.error = error;
  reporter_.summary(s);
}

KeptMemory Trainer::keptMemory() const {
  KeptMemory k;
  if (!plan_) return k;
  const auto s = plan_->summary();
  k.parameters = s.parameter_bytes;
  k.gradients = s.gradient_bytes - s.gradient_bytes_within_steps;
  k.optimizer_state = s.optimizer_state_bytes;
  for (const auto& b : model_->buffers())
    k.buffers += b.numel() * static_cast<int64_t>(b.element_size());
  return k;
}

}  // namespace ltrain::train
