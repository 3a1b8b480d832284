#include "ltrain/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/common/memory.h"
#include "ltrain/data/dataset.h"
#include "ltrain/data/distributed_sampler.h"
#include "ltrain/data/loader.h"
#include "ltrain/data/text.h"
#include "ltrain/dist/comm.h"
#include "ltrain/dist/ddp.h"
#include "ltrain/dist/zero_optimizer.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/io/tensorboard.h"

#include "ltrain/models/model.h"
#include "ltrain/train/checkpoint.h"
#include "ltrain/train/grad_scaler.h"
#include "ltrain/train/metrics.h"
#include "ltrain/train/optimizer.h"
#include "ltrain/train/precision.h"
#include "ltrain/train/progress.h"
#include "ltrain/train/run_dir.h"
#include "ltrain/train/schedule.h"
#include "ltrain/train/stop_signal.h"

namespace ltrain::train {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double wallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The devices of one process: cuda:<local rank> where CUDA is available, else the CPU; with
// model.placement=pipeline, one per stage (cuda:<local_rank * stages + s>, or the CPU for all).
std::vector<torch::Device> devicesFor(const config::ModelConfig& m, int64_t local_rank) {
  const int64_t n = m.placement == "pipeline" ? m.pipeline_stages : 1;
  if (!torch::cuda::is_available()) return std::vector<torch::Device>(n, torch::kCPU);
  const int64_t available = static_cast<int64_t>(torch::cuda::device_count());
  if ((local_rank + 1) * n > available)
    throw UsageError(fmt::format(
        "local rank {} needs cuda:{}..{} for its {} pipeline stage(s), but {} GPU(s) are visible; "
        "run {} process(es) per node",
        local_rank, local_rank * n, (local_rank + 1) * n - 1, n, available,
        std::max<int64_t>(1, available / n)));
  std::vector<torch::Device> out;
  for (int64_t s = 0; s < n; ++s)
    out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank * n + s));
  return out;
}

// dist.strategy=dp: every visible GPU, or the CPU as the one replica.
std::vector<torch::Device> dataParallelDevices() {
  std::vector<torch::Device> out;
  for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i)
    out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
  if (out.empty()) out.emplace_back(torch::kCPU);
  return out;
}

// The forward pass: plain, or (dist.strategy=dp) through LibTorch's data_parallel, which
// replicates the model onto each device, scatters the batch, and gathers the outputs on the first.
torch::Tensor runModel(models::Classifier& model, const torch::Tensor& x,
                       const std::vector<torch::Device>& dp_devices) {
  if (dp_devices.empty()) return model->forward(x);
  return torch::nn::parallel::data_parallel(model, x, dp_devices, dp_devices.front());
}

// Moves the model to its device, or its stages to theirs.
void placeModel(models::Classifier& model, const config::ModelConfig& m,
                const std::vector<torch::Device>& devices) {
  if (m.placement == "pipeline")
    model->placePipeline(devices, m.micro_batches);
  else
    model->to(devices.front());
}

struct EvalResult {
  double loss = 0, accuracy = 0;  // per example, or per token for language models
};

// Cross-entropy of classifier outputs [B, K] or per-token language-model outputs [B, T, V]
// (targets [B] or [B, T]), as PyTorch's recipes compute it on logits.view(-1, V).
torch::Tensor crossEntropy(
    const torch::Tensor& out, const torch::Tensor& y,
    torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction = torch::kMean) {
  namespace F = torch::nn::functional;
  const auto opts = F::CrossEntropyFuncOptions().reduction(reduction);
  // A pipeline's output is on its last stage's device.
  const auto t = y.device() == out.device() ? y : y.to(out.device());
  if (out.dim() == 3) return F::cross_entropy(out.flatten(0, 1), t.flatten(), opts);
  return F::cross_entropy(out, t, opts);
}

// Text goes with gpt and only with it; checked before any data is read.
void checkModelForData(const config::ExperimentConfig& cfg) {
  const bool text = cfg.data.dataset == "text", gpt = cfg.model.name == "gpt";
  if (text && !gpt)
    throw UsageError(
        fmt::format("data.dataset text needs model.name: gpt, got '{}'", cfg.model.name));
  if (gpt && !text)
    throw UsageError(
        fmt::format("model.name gpt needs token sequences (data.dataset: text), got "
                    "data.dataset '{}'",
                    cfg.data.dataset));
}

// What the held-out split is called in logs and metrics.
const char* heldOutName(const data::Dataset& ds) {
  return ds.tokens ? "val" : "test";
}

// Each rank evaluates a contiguous shard of the test set (no padding, so nothing counts twice);
// the sums are reduced over ranks.
EvalResult evaluate(models::Classifier& model, const data::Dataset& ds, int64_t batch_size,
                    const std::string& precision, const dist::Runtime& rt, dist::Comm* comm,
                    torch::Device device, const std::vector<torch::Device>& dp_devices = {}) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t begin = ds.size() * rt.rank / rt.world_size;
  const int64_t end = ds.size() * (rt.rank + 1) / rt.world_size;
  std::vector<int64_t> order(end - begin);
  std::iota(order.begin(), order.end(), begin);
  data::Loader loader(ds, std::move(order), batch_size, false, 0, 1);
  double loss_sum = 0;
  int64_t correct = 0;
  data::Batch b;
  while (loader.next(b)) {
    AutocastScope autocast(precision, device.type());
    auto x = b.inputs.to(device), y = b.targets.to(device);
    auto out = runModel(model, x, dp_devices).to(torch::kFloat);
    loss_sum += crossEntropy(out, y, torch::kSum).item<double>();
    correct += out.argmax(-1).eq(y.to(out.device())).sum().item<int64_t>();
  }
  model->train();
  std::vector<double> sums{loss_sum, static_cast<double>(correct)};
  if (comm) sums = comm->allreduceSum(sums);
  const auto n = static_cast<double>(ds.targets.numel());  // examples, or tokens
  return {sums[0] / n, sums[1] / n};
}

// Test hooks for failure tests, each LTRAIN_FAULT_<WHAT>_AT_STEP=STEP[:RANK] and on the first
// attempt only (a restarted job runs through): KILL sends SIGKILL to itself after that step, NAN
// makes that step's loss nan, SIGNAL sends itself SIGTERM after it, HANG spins in that step's
// forward pass and STOP sends itself SIGSTOP there.
// Read once: the hooks are asked every step, and the environment does not change.
enum Fault { kKill, kNan, kSignal, kHang, kStop };
bool faultAt(Fault what, int64_t step, const dist::Runtime& rt) {
  static const std::array<const char*, 5> specs = [] {
    std::array<const char*, 5> out{};
    const char* names[] = {"KILL", "NAN", "SIGNAL", "HANG", "STOP"};
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = std::getenv(fmt::format("LTRAIN_FAULT_{}_AT_STEP", names[i]).c_str());
    return out;
  }();
  const char* spec = specs[what];
  if (!spec || rt.restart_count > 0) return false;
  int64_t at_step = std::atoll(spec), rank = 0;
  if (const char* colon = std::strchr(spec, ':')) rank = std::atoll(colon + 1);
  return step == at_step && rank == rt.rank;
}

// What one logging window accumulates between two train reports.
struct Window {
  Clock::time_point start = Clock::now();
  double loss = 0, comm_wait_s = 0, data_wait_s = 0;
  int64_t steps = 0, loss_steps = 0, samples = 0, allreduce_calls = 0;  // loss_steps: not skipped
};

constexpr const char* kRankZeroFailed =
    "\x01"
    "failed: ";  // a prefix no path starts with

class Loop {
 public:
  Loop(const config::LoadedConfig& lc, const TrainRequest& req, const dist::Runtime& rt)
      : cfg_(lc.cfg), rt_(rt) {
    if (cfg_.train.threads > 0) at::set_num_threads(static_cast<int>(cfg_.train.threads));
    checkZeroOptions();
    devices_ = devicesFor(cfg_.model, rt_.local_rank);
    if (cfg_.dist.strategy == "dp") {
      if (rt_.world_size > 1)
        throw UsageError(fmt::format(
            "dist.strategy dp is one process driving every local GPU, but {} processes were "
            "started; drop --nproc-per-node, or use dist.strategy ddp",
            rt_.world_size));
      if (cfg_.model.placement == "pipeline")
        throw UsageError("dist.strategy dp does not combine with model.placement pipeline");
      dp_devices_ = dataParallelDevices();
      devices_ = {dp_devices_.front()};
    }
    device_ = devices_.front();
    dist::chooseBackend(cfg_.dist.backend,
                        device_);  // a backend that cannot serve the device fails now
    // Everything that can be wrong with data or shapes fails here, before the run directory is
    // touched.
    checkModelForData(cfg_);
    splits_ = data::loadDataset(cfg_.data, static_cast<uint64_t>(cfg_.seed), cfg_.model.block_size);
    torch::manual_seed(static_cast<uint64_t>(cfg_.seed));
    model_ = models::build(cfg_.model, splits_.train.exampleShape(), splits_.train.num_classes);
    if (!cfg_.model.init_from.empty()) io::loadModuleState(*model_, cfg_.model.init_from);
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
    const int64_t steps_per_epoch =
        (batches_per_epoch_ + cfg_.train.grad_accum - 1) / cfg_.train.grad_accum;
    total_steps_ = cfg_.train.epochs * steps_per_epoch;
    if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);

    if (rt_.distributed()) comm_ = dist::Comm::connect(rt_, cfg_.dist, device_);
    // Rank 0 alone decides about and writes the run directory; the others follow its decision.
    if (rt_.isMain()) {
      try {
        // --overwrite is for the first attempt: a restarted job resumes what it has written.
        run_ = prepareRunDir(lc, req.output_dir, req.overwrite && rt_.restart_count == 0, true,
                             rt_.distributed() ? "logs" : "");
      } catch (const UsageError& e) {
        // The other ranks would otherwise wait dist.timeout_s for a run directory.
        if (comm_) comm_->broadcastString("run_dir", std::string(kRankZeroFailed) + e.what());
        throw;
      }
    }
    if (comm_) {
      run_.path = comm_->broadcastString("run_dir", run_.path);
      if (run_.path.rfind(kRankZeroFailed, 0) == 0)
        throw UsageError("rank 0 could not prepare the run directory: " +
                         run_.path.substr(std::strlen(kRankZeroFailed)));
    }
    // Rank 0 loads first, past corrupt checkpoints if it must; the others load what it chose.
    if (rt_.isMain() && run_.resume_from) resumeWithFallback();
    if (comm_) {
      const std::string from = comm_->broadcastString("resume_from", run_.resume_from.value_or(""));
      if (!rt_.isMain() && !from.empty()) {
        run_.resume_from = from;
        state_ = loadCheckpoint(from, *model_, *optimizer_);
      }
    }
    if (run_.resume_from) {
      if (scaler_.enabled() && state_.loss_scale > 0)
        scaler_.restore(state_.loss_scale, state_.scale_growth_tracker);
      if (rt_.isMain())
        spdlog::info("resuming from {} (step {}, epoch {})", *run_.resume_from, state_.step,
                     state_.epoch + 1);
    }
    placeModel(model_, cfg_.model, devices_);
    if (comm_) {
      dist::DdpOptions o;
      o.bucket_cap_mb = cfg_.dist.bucket_cap_mb;
      o.find_unused_parameters = cfg_.dist.find_unused_parameters;
      o.compression = cfg_.dist.grad_compression;
      o.timeout = comm_->timeout();
      o.pending_signal = [] { return StopSignal::pending(); };
      o.shard_gradients = cfg_.dist.zero == 1;
      ddp_ = std::make_unique<dist::DistributedDataParallel>(model_.ptr(), comm_->backend(),
                                                             rt_.world_size, o);
      has_buffers_ = !model_->buffers().empty();
      if (o.shard_gradients) {
        zero_ = std::make_unique<dist::ZeroOptimizer>(
            *ddp_, comm_->backend(), rt_.rank, rt_.world_size,
            [&](std::vector<torch::Tensor> p) { return makeOptimizer(cfg_.optimizer, p); },
            comm_->timeout(), o.pending_signal);
        // A resumed state moves into the shards; the whole optimizer keeps none between
        // checkpoints.
        zero_->loadStateFrom(*optimizer_);
        optimizer_->state().clear();
      }
    }
    if (rt_.isMain()) {
      // A start from scratch (step 0) drops what an attempt that died before its first checkpoint
      // logged: found by tests/soak/kill_soak.sh.
      metrics_.open(run_.metrics(), run_.resume_from ? state_.step : 0);
      tensorboard_ = std::make_unique<io::TensorBoardWriter>(run_.path + "/tensorboard");
      // TensorBoard keeps the points before the restart's step: the checkpoint's own step stays.
      if (run_.resume_from) tensorboard_->sessionStart(state_.step + 1, wallTime());
      spdlog::info("{}: {} with {} parameters, {} training / {} {} {}, {} steps, {} process(es){}",
                   cfg_.name, cfg_.model.name, models::parameterCount(*model_),
                   splits_.train.size(), splits_.test.size(), heldOutName(splits_.test),
                   splits_.train.tokens
                       ? fmt::format("blocks of {} tokens (vocabulary {})", cfg_.model.block_size,
                                     splits_.train.num_classes)
                       : std::string("examples"),
                   total_steps_, rt_.world_size,
                   ddp_ ? fmt::format(" on {} with {} gradient buckets", comm_->backendName(),
                                      ddp_->bucketCount())
                        : "");
      if (!dp_devices_.empty())
        spdlog::info("dist.strategy dp: {} replica(s), on {} first", dp_devices_.size(),
                     dp_devices_.front().str());
      // LibTorch's replicas are copies (PyTorch's replica 0 shares the module's storage): batch
      // norm's running statistics, updated in the replicas, never reach the model.
      if (dp_devices_.size() > 1 && !model_->buffers().empty())
        spdlog::warn(
            "dist.strategy dp over {} GPUs does not update the model's buffers (batch norm's "
            "running statistics stay at their initial values); dist.strategy ddp does",
            dp_devices_.size());
      if (cfg_.model.placement == "pipeline")
        spdlog::info("pipeline of {} stages, {} micro-batches a batch: {}", devices_.size(),
                     cfg_.model.micro_batches, model_->pipelineSummary());
    }
  }

  Summary run() {
    const auto start = Clock::now();
    double train_seconds = 0;
    int64_t samples_this_run = 0;
    StopSignal stop_signal;  // from here on SIGTERM/SIGINT end the run after a step
    run_start_ = start, start_step_ = state_.step;
    try {
      while (state_.step < total_steps_ && state_.epoch < cfg_.train.epochs && !stop_signal_) {
        auto t0 = Clock::now();
        const int64_t before = state_.samples;
        runEpoch();
        train_seconds += secondsSince(t0) - paused_s_;
        samples_this_run += state_.samples - before;
        paused_s_ = 0;
      }
      if (stop_signal_) return stopOnSignal(secondsSince(start));
      if (last_eval_step_ != state_.step) evaluateAndLog();
      if (last_ckpt_step_ != state_.step) checkpoint();
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      const std::string why = collectiveFailure(e);
      writeSummary("failed", secondsSince(start), 0, why.empty() ? e.what() : why);
      if (!why.empty()) throw std::runtime_error(why);
      throw;
    }
    Summary s;
    s.status = "completed";
    s.test_accuracy = last_eval_.accuracy;
    s.test_loss = last_eval_.loss;
    s.train_loss = state_.epoch_loss_count ? state_.epoch_loss_sum / state_.epoch_loss_count : 0;
    s.steps = state_.step;
    s.epochs = state_.epoch;
    s.wall_s = secondsSince(start);
    s.samples_per_s = train_seconds > 0 ? samples_this_run / train_seconds : 0;
    s.world_size = rt_.world_size;
    s.run_dir = run_.path;
    s.language_model = splits_.test.tokens;
    // Peak memory of the worst rank (a sum of one-hot vectors stands in for a max-reduction).
    std::vector<double> rss(rt_.world_size, 0.0);
    rss[rt_.rank] = peakRssMb();
    if (comm_) rss = comm_->allreduceSum(rss);
    peak_rss_mb_ = *std::max_element(rss.begin(), rss.end());
    // The optimizer state each rank holds (the largest): ZeRO-1's point is that it shrinks.
    std::vector<double> opt_mb(rt_.world_size, 0.0);
    opt_mb[rt_.rank] = static_cast<double>(optimizerStateBytes()) / (1024.0 * 1024.0);
    if (comm_) opt_mb = comm_->allreduceSum(opt_mb);
    optimizer_state_mb_ = *std::max_element(opt_mb.begin(), opt_mb.end());
    writeSummary(s.status, s.wall_s, s.samples_per_s, "");
    return s;
  }

 private:
  // One optimizer step of k micro-batches; returns this rank's mean loss, nan for a skipped step.
  double step(data::Loader& loader, int64_t k, int64_t& samples, Window& w) {
    if (comm_) {
      comm_->watchdog().setStep(state_.step);
      comm_->watchdog().setPhase(dist::Phase::kCompute);
    }
    optimizer_->zero_grad();
    torch::Tensor step_loss = torch::zeros({}, device_);
    data::Batch b;
    for (int64_t i = 0; i < k; ++i) {
      const auto wait_start = Clock::now();
      if (!loader.next(b)) throw std::runtime_error("loader ended before the epoch's last batch");
      w.data_wait_s += secondsSince(wait_start);
      const bool sync = i == k - 1;  // earlier micro-batches accumulate locally (no_sync)
      if (ddp_) {
        ddp_->prepareBackward(sync);
        if (has_buffers_) ddp_->broadcastBuffers();
      }
      auto x = b.inputs.to(device_, /*non_blocking=*/true), y = b.targets.to(device_, true);
      torch::Tensor loss;
      {
        AutocastScope autocast(cfg_.train.precision, device_.type());
        loss = crossEntropy(runModel(model_, x, dp_devices_).to(torch::kFloat), y);
      }
      injectFaults(loss);
      (scaler_.enabled() ? loss * (scaler_.scale() / k) : loss / k).backward();
      if (ddp_ && sync) {
        dist::Watchdog::Waiting waiting(&comm_->watchdog());
        ddp_->finishBackward();
      }
      step_loss += loss.detach() / k;
      samples += b.targets.size(0);
    }
    if (ddp_) {
      w.allreduce_calls += ddp_->lastStep().allreduce_calls;
      for (double s : ddp_->lastStep().bucket_wait_s) w.comm_wait_s += s;
    }
    // Gradients are identical on every rank after the reduction (an inf or nan anywhere reaches
    // every rank through the sum), so decisions taken on them are the same on every rank: all
    // skip, or all stop, at the same step.
    const bool finite = scaler_.enabled() ? scaler_.unscaleAndUpdate(model_->parameters())
                        : zero_           ? zero_->gradientsFinite()
                                          : gradientsFinite();
    if (!finite) {
      if (!scaler_.enabled() && cfg_.train.nonfinite == "stop")
        throw std::runtime_error(fmt::format(
            "gradients are not finite at step {} (epoch {}, batches {}-{} of the epoch; loss on "
            "rank {}: {}); train.nonfinite=skip would skip such steps",
            state_.step + 1, state_.epoch + 1, state_.batch_in_epoch, state_.batch_in_epoch + k - 1,
            rt_.rank, step_loss.item<double>()));
      ++state_.skipped_steps;
      optimizer_->zero_grad();
      if (zero_) zero_->clearGradients();
      return std::nan("");
    }
    if (zero_) {
      if (cfg_.train.clip_grad_norm > 0) zero_->clipGradNorm(cfg_.train.clip_grad_norm);
      zero_->step();
      return step_loss.item<double>();
    }
    if (cfg_.train.clip_grad_norm > 0) clipGradients(cfg_.train.clip_grad_norm);
    optimizer_->step();
    return step_loss.item<double>();
  }

  // A collective that failed because a peer went away says only "connection closed by peer
  // <address>": name the ranks whose heartbeat stopped. "" when `e` is not such a failure.
  std::string collectiveFailure(const std::exception& e) {
    const std::string what = e.what();
    const bool collective = dynamic_cast<const c10::DistError*>(&e) ||
                            what.find("gloo") != std::string::npos ||
                            what.find("NCCL") != std::string::npos;
    if (!comm_ || !collective) return "";
    const std::string first = what.substr(0, what.find('\n'));
    const auto silent = comm_->watchdog().silentRanks();
    if (silent.empty())
      return fmt::format("rank {}: a collective failed after step {}: {}", rt_.rank, state_.step,
                         first);
    return fmt::format(
        "rank {}: a collective failed after step {} because rank(s) {} went away (no heartbeat "
        "since: the process died or its node is gone): {}",
        rt_.rank, state_.step, fmt::join(silent, ", "), first);
  }

  // Every rank stopped after the same step; rank 0 saves it (train.on_signal=checkpoint) and the
  // others wait for that, so that nothing exits before the checkpoint is on disk.
  Summary stopOnSignal(double wall_s) {
    const char* name = stop_signal_ == SIGINT ? "SIGINT" : "SIGTERM";
    const bool save = cfg_.train.on_signal == "checkpoint";
    bar_.clear();
    if (save && last_ckpt_step_ != state_.step) checkpoint();
    if (comm_) comm_->backend()->barrier()->wait(comm_->timeout());
    if (rt_.isMain())
      spdlog::warn("stopped by {} after step {}{}", name, state_.step,
                   save ? fmt::format("; checkpoint {} holds it, and the next launch resumes there",
                                      checkpointPath(run_.checkpoints(), state_.step))
                        : " (train.on_signal=stop: no checkpoint written)");
    writeSummary("interrupted", wall_s, 0, fmt::format("stopped by {}", name));
    Summary s;
    s.status = "interrupted";
    s.steps = state_.step;
    s.epochs = state_.epoch;
    s.run_dir = run_.path;
    s.stop_signal = stop_signal_;
    return s;
  }

  void injectFaults(torch::Tensor& loss) {
    const int64_t s = state_.step + 1;
    if (faultAt(kNan, s, rt_)) loss = loss * std::nan("");
    if (faultAt(kStop, s, rt_)) std::raise(SIGSTOP);
    if (faultAt(kHang, s, rt_))
      for (volatile bool spin = true; spin;) {
      }
  }

  void resumeWithFallback() {
    std::vector<std::string> candidates{*run_.resume_from};
    candidates.insert(candidates.end(), run_.fallbacks.begin(), run_.fallbacks.end());
    for (size_t i = 0; i < candidates.size(); ++i) {
      try {
        state_ = loadCheckpoint(candidates[i], *model_, *optimizer_);
        run_.resume_from = candidates[i];
        return;
      } catch (const UsageError& e) {
        if (i + 1 == candidates.size()) throw;
        spdlog::warn("{}; resuming from the previous checkpoint, {}", e.what(), candidates[i + 1]);
      }
    }
  }

  // The global L2 norm of the gradients of the last step (0 after a skipped one).
  double gradNorm() {
    if (zero_) return zero_->gradNorm();  // the slices' norms, over every rank
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> norms;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) norms.push_back(p.grad().norm(2).to(device_, torch::kFloat));
    return norms.empty() ? 0.0 : torch::stack(norms).norm(2).item<double>();
  }

  // As torch::nn::utils::clip_grad_norm_ (scale by max_norm / (norm + 1e-6) when below 1), with
  // the norm summed in double: ZeRO-1 sums the same squares over slices in another order, and
  // in double both give the same factor, so sharded and unsharded runs stay equal.
  void clipGradients(double max_norm) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> squares;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) squares.push_back(dist::sumOfSquares(p.grad()).to(device_));
    if (squares.empty()) return;
    const double coef = max_norm / (std::sqrt(torch::stack(squares).sum().item<double>()) + 1e-6);
    if (coef >= 1.0) return;
    for (auto& p : model_->parameters())
      if (p.grad().defined()) p.mutable_grad().mul_(coef);
  }

  int64_t optimizerStateBytes() const {
    return zero_ ? zero_->stateBytes() : dist::optimizerStateBytes(*optimizer_);
  }

  // Options that ZeRO-1 does not combine with, refused before anything starts.
  void checkZeroOptions() const {
    if (cfg_.dist.zero != 1) return;
    auto refuse = [](const std::string& what) {
      throw UsageError(fmt::format("dist.zero: 1 does not combine with {}", what));
    };
    if (cfg_.train.precision == "fp16")
      refuse("train.precision fp16 (its loss scaler checks whole gradients; use bf16)");
    if (cfg_.dist.grad_compression != "none")
      refuse("dist.grad_compression (slices are reduced in the parameters' dtype)");
    if (cfg_.dist.find_unused_parameters) refuse("dist.find_unused_parameters");
  }

  bool gradientsFinite() {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> flags;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) flags.push_back(torch::isfinite(p.grad()).all().to(device_));
    return flags.empty() || torch::stack(flags).all().item<bool>();
  }

  void runEpoch() {
    sampler_->setEpoch(state_.epoch);
    if (splits_.train.tokens)  // this epoch's cut of the text into blocks
      data::shiftBlocks(splits_.train, data::blockOffset(static_cast<uint64_t>(cfg_.seed),
                                                         state_.epoch, cfg_.model.block_size));
    data::Loader loader(
        splits_.train, sampler_->indices(), cfg_.data.batch_size, cfg_.data.drop_last,
        cfg_.data.num_workers, cfg_.data.prefetch, state_.batch_in_epoch,
        /*pin_memory=*/device_.is_cuda(),
        data::Augment{cfg_.data.augment == "crop_flip", cfg_.data.augment_pad,
                      data::augmentSeed(static_cast<uint64_t>(cfg_.seed), rt_.rank, state_.epoch)});
    if (state_.batch_in_epoch == 0) state_.epoch_loss_sum = 0, state_.epoch_loss_count = 0;
    model_->train();
    Window w;
    while (state_.step < total_steps_) {
      const int64_t k = std::min(cfg_.train.grad_accum, batches_per_epoch_ - state_.batch_in_epoch);
      if (k <= 0) break;
      const double lr = learningRate(cfg_.optimizer, cfg_.scheduler, state_.step, total_steps_);
      setLearningRate(zero_ ? zero_->shardOptimizer() : *optimizer_, lr);
      int64_t samples = 0;
      const double loss = step(loader, k, samples, w);
      ++state_.step;
      if (first_step_wall_time_ == 0) first_step_wall_time_ = wallTime();
      state_.batch_in_epoch += k;
      state_.samples += samples * rt_.world_size;
      ++w.steps, w.samples += samples * rt_.world_size;
      if (!std::isnan(loss))  // a skipped step's loss stays out of the averages
        w.loss += loss, ++w.loss_steps, state_.epoch_loss_sum += loss, ++state_.epoch_loss_count;

      if (bar_.enabled()) {
        const int64_t done = state_.step - start_step_;
        const double elapsed = secondsSince(run_start_), window = secondsSince(w.start);
        bar_.update(state_.epoch + 1, cfg_.train.epochs, state_.step, total_steps_,
                    w.loss_steps ? w.loss / w.loss_steps : std::nan(""),
                    window > 0 ? w.samples / window : 0,
                    done > 0 ? elapsed / done * (total_steps_ - state_.step) : std::nan(""));
      }
      if (state_.step % cfg_.train.log_every == 0 || state_.step == total_steps_) {
        logTrain(w, lr);
        w = Window{};
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
      w.start += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(paused));
      if (faultAt(kKill, state_.step, rt_)) std::raise(SIGKILL);
      if (faultAt(kSignal, state_.step, rt_)) std::raise(SIGTERM);
      stop_signal_ = zero_ ? zero_->stopVote() : ddp_ ? ddp_->stopVote() : StopSignal::pending();
      if (stop_signal_ != 0) {
        if (state_.step % cfg_.train.log_every != 0 && state_.step != total_steps_) logTrain(w, lr);
        return;
      }
      if (epoch_done) break;
    }
  }

  void logTrain(const Window& w, double lr) {
    const double secs = secondsSince(w.start);
    double loss = w.loss_steps > 0 ? w.loss / w.loss_steps : std::nan("");
    if (comm_) loss = comm_->allreduceSum({loss})[0] / rt_.world_size;  // the mean over ranks
    const double grad_norm = gradNorm();
    if (!rt_.isMain()) return;
    const double samples_per_s = secs > 0 ? w.samples / secs : 0;
    // On a terminal the bar says this; elsewhere a log line does.
    // Language models count tokens: samples (blocks) times the block length.
    const int64_t per_sample = splits_.train.tokens ? cfg_.model.block_size : 1;
    if (!bar_.enabled())
      spdlog::info("ep {}/{} step {}/{} | loss {:.4f} | lr {:.3g} | {:.0f} {}/s", state_.epoch + 1,
                   cfg_.train.epochs, state_.step, total_steps_, loss, lr,
                   samples_per_s * per_sample, per_sample > 1 ? "tokens" : "samples");
    std::vector<std::pair<std::string, double>> tb{
        {"train/loss", loss},
        {"train/lr", lr},
        {"train/samples_per_s", samples_per_s},
        {"train/data_wait_share", secs > 0 ? w.data_wait_s / secs : 0.0},
        {"train/grad_norm", grad_norm},
        {"train/skipped_steps", static_cast<double>(state_.skipped_steps)}};
    if (scaler_.enabled()) tb.emplace_back("train/loss_scale", scaler_.scale());
    if (tensorboard_) {
      tensorboard_->scalars(state_.step, wallTime(), tb);
      tensorboard_->flush();  // as metrics.jsonl: what was logged survives a kill
    }
    io::JsonObject j;
    j.add("step", state_.step)
        .add("epoch", state_.epoch)
        .add("split", "train")
        .add("loss", loss)
        .add("lr", lr)
        .add("samples_per_s", samples_per_s)
        .add("wall_time", wallTime());
    if (per_sample > 1) j.add("tokens_per_s", samples_per_s * per_sample);
    j.add("grad_norm", grad_norm);
    j.add("data_wait_ms_per_step", 1000.0 * w.data_wait_s / w.steps)
        .add("data_wait_share", secs > 0 ? w.data_wait_s / secs : 0.0);
    j.add("skipped_steps", state_.skipped_steps);
    if (scaler_.enabled()) j.add("loss_scale", scaler_.scale());
    if (ddp_)
      j.add("allreduce_per_step", static_cast<double>(w.allreduce_calls) / w.steps)
          .add("comm_wait_ms_per_step", 1000.0 * w.comm_wait_s / w.steps);
    metrics_.write(j);
  }

  // What the watchdog reports about this rank while it is away from the collectives.
  struct PhaseScope {
    PhaseScope(dist::Comm* c, dist::Phase p) : comm(c) {
      if (comm) before = comm->watchdog().phase(), comm->watchdog().setPhase(p);
    }
    ~PhaseScope() {
      if (comm) comm->watchdog().setPhase(before);
    }
    dist::Comm* comm;
    dist::Phase before = dist::Phase::kCompute;
  };

  void evaluateAndLog() {
    PhaseScope phase(comm_.get(), dist::Phase::kEvaluate);
    last_eval_ = evaluate(model_, splits_.test, cfg_.data.eval_batch_size, cfg_.train.precision,
                          rt_, comm_.get(), device_, dp_devices_);
    last_eval_step_ = state_.step;
    if (!rt_.isMain()) return;
    bar_.clear();
    const char* split = heldOutName(splits_.test);
    const bool lm = splits_.test.tokens;
    // Language models: perplexity, exp of the mean per-token loss in nats.
    const double perplexity = std::exp(last_eval_.loss);
    if (tensorboard_) {
      std::vector<std::pair<std::string, double>> tb{{"eval/loss", last_eval_.loss},
                                                     {"eval/accuracy", last_eval_.accuracy}};
      if (lm) tb.emplace_back("eval/perplexity", perplexity);
      tensorboard_->scalars(state_.step, wallTime(), tb);
      tensorboard_->flush();
    }
    spdlog::info("eval step {} | {} loss {:.4f} | {} {:.4f}", state_.step, split, last_eval_.loss,
                 lm ? fmt::format("{} perplexity {:.3f} | next-token accuracy", split, perplexity)
                    : fmt::format("{} accuracy", split),
                 last_eval_.accuracy);
    io::JsonObject j;
    j.add("step", state_.step)
        .add("epoch", state_.epoch)
        .add("split", split)
        .add("loss", last_eval_.loss)
        .add("accuracy", last_eval_.accuracy);
    if (lm) j.add("perplexity", perplexity);
    metrics_.write(j.add("wall_time", wallTime()));
  }

  void checkpoint() {
    last_ckpt_step_ = state_.step;
    // ZeRO-1: every rank sends its slice of the optimizer state, and the checkpoint holds it
    // whole, as an unsharded run writes it; it is dropped again once written.
    struct DropState {
      torch::optim::Optimizer* opt;
      ~DropState() {
        if (opt) opt->state().clear();
      }
    } drop{zero_ ? optimizer_.get() : nullptr};
    if (zero_) zero_->gatherStateInto(*optimizer_);
    if (!rt_.isMain()) return;
    PhaseScope phase(comm_.get(), dist::Phase::kCheckpoint);
    state_.loss_scale = scaler_.enabled() ? scaler_.scale() : 0;
    state_.scale_growth_tracker = scaler_.growthTracker();
    saveCheckpoint(checkpointPath(run_.checkpoints(), state_.step), *model_, *optimizer_, state_);
    pruneCheckpoints(run_.checkpoints(), cfg_.train.keep_checkpoints);
    // The newest weights, readable by Python (safetensors or torch) under PyTorch's names.
    io::saveSafetensors(run_.path + "/model.safetensors", io::moduleState(*model_),
                        {{"step", std::to_string(state_.step)}, {"format", "pt"}});
  }

  void writeSummary(const std::string& status, double wall_s, double samples_per_s,
                    const std::string& error) {
    if (!rt_.isMain() || run_.path.empty()) return;
    io::JsonObject j;
    j.add("status", status)
        .add("test_accuracy", last_eval_.accuracy)
        .add("test_loss", last_eval_.loss)
        .add("train_loss",
             state_.epoch_loss_count ? state_.epoch_loss_sum / state_.epoch_loss_count : 0.0)
        .add("steps", state_.step)
        .add("epochs", state_.epoch)
        .add("wall_s", wall_s)
        .add("samples_per_s", samples_per_s)
        .add("world_size", rt_.world_size)
        .add("skipped_steps", state_.skipped_steps);
    // Language models: the validation split's loss (test_loss above) as perplexity too.
    if (splits_.test.tokens && last_eval_step_ >= 0)
      j.add("val_perplexity", std::exp(last_eval_.loss));
    if (first_step_wall_time_ > 0) j.add("first_step_wall_time", first_step_wall_time_);
    if (peak_rss_mb_ > 0) j.add("peak_rss_mb", peak_rss_mb_);
    if (optimizer_state_mb_ > 0) j.add("optimizer_state_mb", optimizer_state_mb_);
    if (!error.empty()) j.add("error", error);
    io::writeFileAtomic(run_.summary(), j.str() + "\n");
  }

  const config::ExperimentConfig& cfg_;
  dist::Runtime rt_;
  torch::Device device_{torch::kCPU};      // where batches go: the (first stage's) device
  std::vector<torch::Device> devices_;     // one per pipeline stage
  std::vector<torch::Device> dp_devices_;  // dist.strategy=dp: the replicas' devices
  std::shared_ptr<dist::Comm> comm_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  bool has_buffers_ = false;
  GradScaler scaler_{cfg_.train.precision == "fp16"};
  data::Splits splits_;
  models::Classifier model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<data::DistributedSampler> sampler_;
  int64_t batches_per_epoch_ = 0, total_steps_ = 0;
  RunDir run_;
  LoopState state_;
  MetricsLog metrics_;
  EvalResult last_eval_;
  int64_t last_eval_step_ = -1, last_ckpt_step_ = -1;
  double paused_s_ = 0;
  ProgressBar bar_{rt_.isMain()};
  Clock::time_point run_start_ = Clock::now();
  int64_t start_step_ = 0;
  std::unique_ptr<io::TensorBoardWriter> tensorboard_;  // rank 0: <run>/tensorboard/
  int stop_signal_ = 0;
  double first_step_wall_time_ = 0, peak_rss_mb_ = 0, optimizer_state_mb_ = 0;
  std::unique_ptr<dist::ZeroOptimizer> zero_;  // dist.zero: 1 with more than one process
};

}  // namespace

EvalSummary evaluateWeights(const config::LoadedConfig& lc, const std::string& weights) {
  const auto& cfg = lc.cfg;
  if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(weights, ec))
    throw UsageError(
        std::filesystem::is_directory(weights, ec)
            ? fmt::format("--checkpoint '{}' is a directory, expected a .pt or .safetensors file",
                          weights)
            : fmt::format("--checkpoint '{}' not found", weights));
  checkModelForData(cfg);
  auto splits = data::loadDataset(cfg.data, static_cast<uint64_t>(cfg.seed), cfg.model.block_size);
  torch::manual_seed(static_cast<uint64_t>(cfg.seed));
  auto model = models::build(cfg.model, splits.train.exampleShape(), splits.train.num_classes);
  const bool safetensors =
      weights.size() > 12 && weights.substr(weights.size() - 12) == ".safetensors";
  if (safetensors)
    io::loadModuleState(*model, weights);
  else
    loadCheckpointModel(weights, *model);
  const auto devices = devicesFor(cfg.model, 0);
  const torch::Device device = devices.front();
  placeModel(model, cfg.model, devices);
  auto r = evaluate(model, splits.test, cfg.data.eval_batch_size, cfg.train.precision,
                    dist::Runtime{}, nullptr, device);
  return {r.accuracy, r.loss, splits.test.size(), splits.test.tokens};
}

Summary runTraining(const config::LoadedConfig& lc, const TrainRequest& req,
                    const dist::Runtime& rt) {
  Loop loop(lc, req, rt);
  return loop.run();
}

}  // namespace ltrain::train
