// What a run tells people and tools, from rank 0: one call per event, fanned out to the log
// lines or the live progress bar, metrics.jsonl, TensorBoard and summary.json. Other ranks hold
// a Reporter that says nothing.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ltrain/io/tensorboard.h"
#include "ltrain/train/metrics.h"
#include "ltrain/train/progress.h"

namespace ltrain::train {

// One logging window of training steps, averaged over ranks.
struct TrainReport {
  int64_t step = 0, epoch = 0, epochs = 0, total_steps = 0;
  double loss = 0, lr = 0, samples_per_s = 0, grad_norm = 0;
  double data_wait_ms_per_step = 0, data_wait_share = 0;
  int64_t skipped_steps = 0;
  int64_t tokens_per_sample = 1;               // language models: the block length
  double elapsed_s = 0;                        // since the run (this attempt) started
  double eta_s = std::nan("");                 // to its last step, at this attempt's pace
  std::optional<double> loss_scale;            // fp16
  std::optional<double> collectives_per_step;  // several processes
  std::optional<double> comm_wait_ms_per_step;
  std::optional<double> mfu;  // language models where the devices' peak is known (train/mfu.h)
  std::optional<int64_t> skipped_images;  // data.on_bad_image skip: draws left out this window
  std::vector<std::pair<std::string, double>> extra;  // finetune.method dpo: TRL's rewards/*
};

struct EvalReport {
  int64_t step = 0, epoch = 0;
  std::string split;  // "test", or "val" for a language model
  double loss = 0, accuracy = 0;
  bool language_model = false;  // then also perplexity, exp(loss)
  bool pairs = false;           // preference pairs: the accuracy is the reward accuracy
};

struct SummaryReport {
  std::string status;  // completed | interrupted | failed | running
  double test_accuracy = 0, test_loss = 0, train_loss = 0;
  int64_t steps = 0, epochs = 0, world_size = 1, skipped_steps = 0;
  double wall_s = 0, samples_per_s = 0;
  // The job's restarts so far, and its wall time since the launcher started it (restarts and
  // waits for lost nodes included; wall_s without a launcher of ltrain's).
  int64_t restarts = 0;
  double job_wall_s = 0;
  std::optional<double> val_perplexity, first_step_wall_time, peak_rss_mb, optimizer_state_mb;
  std::optional<double> peak_cuda_memory_mb;  // the worst rank's, on CUDA
  std::optional<double> gradient_mb;          // the worst rank's gradients after the last step
  std::optional<double> parameter_mb;         // the worst rank's parameters between steps
  std::optional<double> gathered_peak_mb;     // dist.zero 3: the most gathered at once
  // data.on_bad_image skip: the distinct files left out, over every rank and both splits.
  std::optional<std::vector<std::string>> skipped_image_files;
  std::string error;
};

class Reporter {
 public:
  // `run_dir` empty: a silent reporter (ranks other than 0).
  explicit Reporter(bool main_rank);
  // Where summary.json goes (known once rank 0 prepared the run directory).
  void setRunDir(const std::string& run_dir) { run_dir_ = run_dir; }
  // Opens metrics.jsonl (dropping records after `resume_step`, all of them when starting from
  // step 0) and the TensorBoard file of the run directory.
  void open(int64_t resume_step, bool resumed);
  bool active() const { return main_; }

  void info(const std::string& line);
  void warn(const std::string& line);
  // Every step, for the live bar on a terminal.
  void progress(int64_t epoch, int64_t epochs, int64_t step, int64_t total, double loss,
                double samples_per_s, double eta_s);
  void train(const TrainReport& r);
  void evaluation(const EvalReport& r);
  void summary(const SummaryReport& s);

 private:
  bool main_;
  std::string run_dir_;
  ProgressBar bar_;
  MetricsLog metrics_;
  std::unique_ptr<io::TensorBoardWriter> tensorboard_;
};

double wallTime();  // seconds since the Unix epoch

}  // namespace ltrain::train
