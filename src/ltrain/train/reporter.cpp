#include "ltrain/train/reporter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "ltrain/common/memory_phase.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/train/progress.h"
#include "ltrain/train/run_report.h"

namespace ltrain::train {

double wallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Reporter::Reporter(bool main_rank) : main_(main_rank), bar_(main_rank) {}

void Reporter::open(int64_t resume_step, bool resumed) {
  if (!main_) return;
  const std::string& run_dir = run_dir_;
  // A start from scratch (step 0) drops what an attempt that died before its first checkpoint
  // logged: found by tests/soak/kill_soak.sh.
  metrics_.open(run_dir + "/metrics.jsonl", resume_step);
  tensorboard_ = std::make_unique<io::TensorBoardWriter>(run_dir + "/tensorboard");
  // TensorBoard keeps the points before the restart's step: the checkpoint's own step stays.
  if (resumed) tensorboard_->sessionStart(resume_step + 1, wallTime());
}

void Reporter::info(const std::string& line) {
  if (!main_) return;
  bar_.clear();
  spdlog::info("{}", line);
}

void Reporter::warn(const std::string& line) {
  if (!main_) return;
  bar_.clear();
  spdlog::warn("{}", line);
}

void Reporter::progress(int64_t epoch, int64_t epochs, int64_t step, int64_t total, double loss,
                        double samples_per_s, double eta_s) {
  if (main_ && bar_.enabled()) bar_.update(epoch, epochs, step, total, loss, samples_per_s, eta_s);
}

void Reporter::train(const TrainReport& r) {
  if (!main_ || !tensorboard_) return;
  const bool tokens = r.tokens_per_sample > 1;
  // On a terminal the bar says this; elsewhere (a pipe, a file, a cluster's log) a log line
  // does, with the time so far and to go.
  if (!bar_.enabled())
    spdlog::info(
        "ep {}/{} step {}/{} | loss {:.4f} | lr {:.3g} | {:.0f} {}/s{} | {} elapsed, ETA {}",
        r.epoch + 1, r.epochs, r.step, r.total_steps, r.loss, r.lr,
        r.samples_per_s * static_cast<double>(r.tokens_per_sample), tokens ? "tokens" : "samples",
        r.mfu ? fmt::format(" | mfu {:.1f}%", 100 * *r.mfu) : "", clockTime(r.elapsed_s),
        clockTime(r.eta_s));
  std::vector<std::pair<std::string, double>> tb{
      {"train/loss", r.loss},
      {"train/lr", r.lr},
      {"train/samples_per_s", r.samples_per_s},
      {"train/data_wait_share", r.data_wait_share},
      {"train/grad_norm", r.grad_norm},
      {"train/skipped_steps", static_cast<double>(r.skipped_steps)}};
  if (r.loss_scale) tb.emplace_back("train/loss_scale", *r.loss_scale);
  if (r.mfu) tb.emplace_back("train/mfu", *r.mfu);
  for (const auto& [name, v] : r.extra) tb.emplace_back("train/" + name, v);
  tensorboard_->scalars(r.step, wallTime(), tb);
  tensorboard_->flush();  // as metrics.jsonl: what was logged survives a kill
  io::Json j = {{"step", r.step},         {"epoch", r.epoch}, {"split", "train"},
                {"loss", r.loss},         {"lr", r.lr},       {"samples_per_s", r.samples_per_s},
                {"wall_time", wallTime()}};
  if (tokens) j["tokens_per_s"] = r.samples_per_s * static_cast<double>(r.tokens_per_sample);
  if (r.mfu) j["mfu"] = *r.mfu;
  j["grad_norm"] = r.grad_norm;
  j["data_wait_ms_per_step"] = r.data_wait_ms_per_step;
  j["data_wait_share"] = r.data_wait_share;
  j["skipped_steps"] = r.skipped_steps;
  if (r.skipped_images) j["skipped_images"] = *r.skipped_images;
  if (r.loss_scale) j["loss_scale"] = *r.loss_scale;
  if (r.collectives_per_step) j["allreduce_per_step"] = *r.collectives_per_step;
  if (r.comm_wait_ms_per_step) j["comm_wait_ms_per_step"] = *r.comm_wait_ms_per_step;
  for (const auto& [name, v] : r.extra) j[name] = v;
  metrics_.write(j);
}

void Reporter::evaluation(const EvalReport& r) {
  if (!main_ || !tensorboard_) return;
  bar_.clear();
  // Language models: perplexity, exp of the mean per-token loss in nats.
  const double perplexity = std::exp(r.loss);
  std::vector<std::pair<std::string, double>> tb{{"eval/loss", r.loss},
                                                 {"eval/accuracy", r.accuracy}};
  if (r.language_model) tb.emplace_back("eval/perplexity", perplexity);
  tensorboard_->scalars(r.step, wallTime(), tb);
  tensorboard_->flush();
  spdlog::info("eval step {} | {} loss {:.4f} | {} {:.4f}", r.step, r.split, r.loss,
               r.language_model
                   ? fmt::format("{} perplexity {:.3f} | next-token accuracy", r.split, perplexity)
               : r.pairs ? fmt::format("{} reward accuracy", r.split)
                         : fmt::format("{} accuracy", r.split),
               r.accuracy);
  io::Json j = {{"step", r.step},
                {"epoch", r.epoch},
                {"split", r.split},
                {"loss", r.loss},
                {"accuracy", r.accuracy}};
  if (r.language_model) j["perplexity"] = perplexity;
  j["wall_time"] = wallTime();
  metrics_.write(j);
}

void Reporter::summary(const SummaryReport& s) {
  if (!main_ || run_dir_.empty()) return;
  io::Json j = {{"status", s.status},         {"test_accuracy", s.test_accuracy},
                {"test_loss", s.test_loss},   {"train_loss", s.train_loss},
                {"steps", s.steps},           {"epochs", s.epochs},
                {"wall_s", s.wall_s},         {"samples_per_s", s.samples_per_s},
                {"world_size", s.world_size}, {"skipped_steps", s.skipped_steps},
                {"restarts", s.restarts},     {"job_wall_s", s.job_wall_s}};
  if (s.val_perplexity) j["val_perplexity"] = *s.val_perplexity;
  if (s.first_step_wall_time) j["first_step_wall_time"] = *s.first_step_wall_time;
  if (s.peak_rss_mb) j["peak_rss_mb"] = *s.peak_rss_mb;
  if (s.peak_cuda_memory_mb) j["peak_cuda_memory_mb"] = *s.peak_cuda_memory_mb;
  if (s.optimizer_state_mb) j["optimizer_state_mb"] = *s.optimizer_state_mb;
  if (s.gradient_mb) j["gradient_mb"] = *s.gradient_mb;
  if (s.parameter_mb) j["parameter_mb"] = *s.parameter_mb;
  if (s.gathered_peak_mb) j["gathered_peak_mb"] = *s.gathered_peak_mb;
  if (s.skipped_image_files) {
    j["skipped_images"] = s.skipped_image_files->size();
    j["skipped_image_files"] = *s.skipped_image_files;
  }
  if (!s.error.empty()) j["error"] = s.error;
  j["memory_phases"] = io::Json::array();  // rank 0's
  for (const auto& p : memoryPhases())
    j["memory_phases"].push_back({{"phase", p.phase},
                                  {"start_rss_mb", p.start_rss_mb},
                                  {"peak_rss_mb", p.peak_rss_mb},
                                  {"end_rss_mb", p.end_rss_mb}});
  io::writeFileAtomic(run_dir_ + "/summary.json", io::dumpJsonLine(j) + "\n");
  try {  // a page to look at; the run's files are what counts
    writeRunReport(run_dir_);
  } catch (const std::exception& e) {
    spdlog::warn("report.html not written: {}", e.what());
  }
}

}  // namespace ltrain::train
