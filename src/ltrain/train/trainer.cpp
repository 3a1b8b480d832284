#include "ltrain/train/trainer.h"
#include "ltrain/train/trainer_parts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "ltrain/checkpoint/checkpointing.h"
#include "ltrain/common/allocator.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/memory.h"
#include "ltrain/common/memory_phase.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/config/model_families.h"
#include "ltrain/config/validate.h"
#include "ltrain/data/distributed_sampler.h"
#include "ltrain/data/loader.h"
#include "ltrain/data/text.h"
#include "ltrain/distributed/mesh.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/io/error_report.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/layers/layer_graph.h"
#include "ltrain/models/lora.h"
#include "ltrain/models/parallelize.h"
#include "ltrain/models/tensor_parallel.h"
#include "ltrain/optim/optimizer.h"
#include "ltrain/train/evaluate.h"
#include "ltrain/train/faults.h"
#include "ltrain/train/grad_scaler.h"
#include "ltrain/train/loss_tally.h"
#include "ltrain/train/mfu.h"
#include "ltrain/train/preflight.h"
#include "ltrain/train/reporter.h"
#include "ltrain/train/schedule.h"
#include "ltrain/train/step.h"
#include "ltrain/train/stop_vote.h"
#include "ltrain/train/sync_debug.h"

namespace ltrain::train {

Trainer::Trainer(const config::LoadedConfig& lc, const TrainRequest& req,
                 const distributed::Runtime& rt)
    : cfg_(lc.cfg), rt_(rt), faults_(rt), reporter_(rt.isMain()) {
  try {
    prepare(lc, req);
  } catch (const Interrupted& e) {
    writeSummary("interrupted", 0, 0, e.what(), /*read_device=*/false);
    throw;
  }
  announce();
}

// Everything that can be wrong with devices, data or shapes fails before the run directory is
// touched; then rank 0 prepares it, the chosen checkpoint is loaded (on the CPU), the model placed
// and the optimizer state moved next to it.
void Trainer::prepare(const config::LoadedConfig& lc, const TrainRequest& req) {
  applyThreads();
  if (cfg_.dist.strategy == config::Strategy::kDp && rt_.world_size > 1)
    throw UsageError(fmt::format(
        "dist.strategy dp is one process driving every local GPU, but {} processes were "
        "started; drop --nproc-per-node, or use dist.strategy ddp",
        rt_.world_size));
  preflight(lc);
  checkTensorParallelRanks();
  const distributed::Mesh mesh{rt_.rank, rt_.world_size, cfg_.dist.tensor_parallel};
  data_world_ = mesh.dp();  // a tensor-parallel group reads one shard of the data together
  data_rank_ = mesh.dpRank();
  devices_ = compute::chooseDevices(cfg_, rt_);
  compute::bindDevice(devices_.main);
  distributed::chooseBackend(cfg_.dist.backend, devices_.main);  // fails now if it cannot serve
  splits_ = data::loadDataset(cfg_.data, static_cast<uint64_t>(cfg_.seed), cfg_.model.block_size,
                              cfg_.model.vocab_size);
  StopSignal::checkpoint("while loading the data");
  torch::manual_seed(static_cast<uint64_t>(cfg_.seed));
  // A single launched worker with an explicit dist.backend joins a group of one too: the
  // multi-process path (NCCL included) then runs on a machine with one GPU.
  const bool launched_alone = rt_.source != "none" && cfg_.dist.backend != config::Backend::kAuto;
  const bool grouped = rt_.distributed() || launched_alone;
  // Where the plan will shard the parameters, no rank makes the whole model: each unit's values
  // are made when the plan shards it.
  // (Tensor parallelism with a single replica: the groups' parts are all there is to shard.)
  const bool deferred = distributed::shardsParameters(cfg_.dist, grouped) &&
                        (cfg_.dist.tensor_parallel == 1 || data_world_ > 1);
  tuneAllocatorForBuilding();  // until the plan has spread the model (resumeAndSpread)
  try {
    MemoryPhase phase("build");
    const int64_t tp = cfg_.dist.tensor_parallel;
    model_ = tp > 1 ? models::buildTensorParallel(cfg_.model, splits_.train.modelInputShape(),
                                                  splits_.train.num_classes, rt_.rank % tp, tp,
                                                  deferred, cfg_.dist.sequence_parallel)
                    : models::build(cfg_.model, splits_.train.modelInputShape(),
                                    splits_.train.num_classes, splits_.train.tokens, deferred);
  } catch (const models::LayerError& e) {
    throw UsageError(layerWhere(lc, e.line) + e.what());
  }
  if (!cfg_.model.init_from.empty()) {
    MemoryPhase phase("init_from");  // a deferred model only checks the files' headers here
    // Under tensor parallelism the whole model's twin reads the file: each rank keeps its part.
    auto into = models::wholeModel(model_);
    models::loadInitialWeights(into, cfg_.model);
  }
  if (const auto lora = models::applyFinetuning(model_, cfg_, /*starting=*/true))
    announceLora(*lora);
  if (const int64_t every = config::activationCheckpointEvery(cfg_.train); every > 0)
    reporter_.info(
        fmt::format("activation checkpointing: {} recomputed run(s) of up to {} block(s)",
                    models::applyActivationCheckpointing(*model_, every), every));
  // DPO's reference is the model as it starts: kept before a resume loads the run's weights.
  if (cfg_.finetune.method == "dpo") dpo_ = std::make_unique<Dpo>(cfg_.dpo.beta, model_);
  sampler_ = std::make_unique<data::DistributedSampler>(
      splits_.train.size(), data_world_, data_rank_, cfg_.data.shuffle, cfg_.seed, false);
  batches_per_epoch_ =
      data::batchesPerEpoch(sampler_->numSamples(), cfg_.data.batch_size, cfg_.data.drop_last);
  if (batches_per_epoch_ == 0)
    throw UsageError(
        fmt::format("data.batch_size {} with data.drop_last leaves no batch from the {} "
                    "training examples per process",
                    cfg_.data.batch_size, sampler_->numSamples()));
  flops_per_token_ = flopsPerToken(cfg_.model, models::parameterCount(*models::wholeModel(model_)),
                                   splits_.train.num_classes);
  // The peak of all the devices the job trains on: each rank's, times its pipeline stages.
  peak_flops_ =
      peakFlops(cfg_.train, devices_.main.is_cuda() ? "cuda" : "cpu", devices_.main.index()) *
      static_cast<double>(rt_.world_size * std::max<size_t>(1, devices_.stages.size()));
  steps_per_epoch_ = (batches_per_epoch_ + cfg_.train.grad_accum - 1) / cfg_.train.grad_accum;
  // train.max_steps, when set, is the run's length, the epochs repeating as needed (as Hugging
  // Face's Trainer and torchtitan count it); else train.epochs.
  const int64_t max_steps = cfg_.train.max_steps;
  epochs_ =
      max_steps > 0 ? (max_steps + steps_per_epoch_ - 1) / steps_per_epoch_ : cfg_.train.epochs;
  total_steps_ = max_steps > 0 ? max_steps : epochs_ * steps_per_epoch_;

  if (grouped) pg_ = distributed::ProcessGroup::connect(rt_, cfg_.dist, devices_.main);
  run_ = agreeOnRunDir(lc, req, rt_, pg_.get());
  if (rt_.isMain()) saveVocabulary(run_.path, splits_);  // for ltrain generate
  reporter_.setRunDir(run_.path);
  attachRankLog();
  if (pg_)  // a hang ends this process from the watchdog's thread: summary.json says why first
    pg_->beforeHangExit([this](const std::string& why) {
      writeSummary("failed", secondsSince(run_start_), 0, why, /*read_device=*/false);
    });
  StopSignal::checkpoint("while preparing the run directory");
  auto make_optimizer = [this](std::vector<torch::Tensor> p,
                               std::vector<optim::DecayRanges> decay) {
    return optim::makeOptimizer(cfg_.optimizer, std::move(p), std::move(decay));
  };
  rng_ = RngStreams(devices_.main);
  tally_ = std::make_unique<LossTally>(devices_.main);
  const bool resumed = resumeAndSpread(make_optimizer);
  tuneAllocatorForTraining();
  if (dpo_) dpo_->place();
  step_ = std::make_unique<TrainStep>(cfg_, model_, devices_, *plan_, scaler_, faults_, dpo_.get());
  checkpointer_ = std::make_unique<checkpoint::Checkpointer>(run_.path, cfg_.train.keep_checkpoints,
                                                             rt_.isMain(), pg_.get());
  checkpointer_->beforeWrite([this](int64_t step) {
    if (faults_.failsSave(step))
      throw std::runtime_error(
          fmt::format("cannot write the checkpoint of step {}: No space left on device "
                      "(LTRAIN_FAULT_SAVE_AT_STEP)",
                      step));
  });
  scaler_.to(devices_.main);
  StopSignal::checkpoint("while resuming");
  reporter_.open(resumed ? state_.step : 0, resumed);
}

// finetune.method lora: adapters on the frozen base just read (init_from), drawn from the run's
// seed on every rank alike, or read from finetune.adapter_from; resuming overwrites them.
void Trainer::announceLora(const models::LoraSummary& s) {
  reporter_.info(fmt::format(
      "LoRA rank {} (alpha {:g}) on {} linears ({}){}: {} of {} parameters train ({:.2f}%)",
      cfg_.lora.rank, cfg_.lora.alpha, s.modules, fmt::join(s.names, ", "),
      cfg_.finetune.adapter_from.empty() ? "" : ", from " + cfg_.finetune.adapter_from, s.trainable,
      s.total, 100.0 * static_cast<double>(s.trainable) / static_cast<double>(s.total)));
}

// dist.tensor_parallel's groups are consecutive ranks on one host: the world and each host's ranks
// must be whole groups.
void Trainer::checkTensorParallelRanks() const {
  const int64_t e = cfg_.dist.expert_parallel;
  if (rt_.world_size % e != 0)
    throw UsageError(fmt::format(
        "dist.expert_parallel {} needs whole groups of {} ranks, but {} process(es) were started; "
        "start a multiple of {} (ltrain launch --nproc-per-node {})",
        e, e, rt_.world_size, e, e));
  const int64_t n = cfg_.dist.tensor_parallel;
  if (n == 1) return;
  if (rt_.world_size % n != 0 || rt_.local_world_size % n != 0)
    throw UsageError(fmt::format(
        "dist.tensor_parallel {} needs whole groups of {} ranks on each host, but {} process(es) "
        "were started, {} on this host; start a multiple of {} per host (ltrain launch "
        "--nproc-per-node {})",
        n, n, rt_.world_size, rt_.local_world_size, n, n));
}

// train.threads when set; under srun or mpirun with no OMP_NUM_THREADS, Slurm's CPUs per task or
// the rank's share of its CPUs (torch's default would give every rank all of them).
void Trainer::applyThreads() {
  if (cfg_.train.threads > 0) {
    at::set_num_threads(static_cast<int>(cfg_.train.threads));
    return;
  }
  const bool mpi_style = rt_.source == "slurm" || rt_.source == "openmpi" ||
                         rt_.source == "mvapich" || rt_.source == "pmi";
  if (mpi_style && !std::getenv("OMP_NUM_THREADS"))
    at::set_num_threads(static_cast<int>(rt_.intraOpThreads()));
}

// A rank that no ltrain launcher started (one process, srun, mpirun, torchrun) writes its own
// logs/rank_N.log in the run directory, as the launcher does for its workers.
void Trainer::attachRankLog() {
  if (rt_.launched_by_ltrain || run_.path.empty()) return;
  const std::string path = fmt::format("{}/logs/rank_{}.log", run_.path, rt_.rank);
  std::error_code ec;
  std::filesystem::create_directories(run_.path + "/logs", ec);
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
    // One run's file at a time: a process that trains again (a test, a sweep in-process) stops
    // writing the previous run's.
    static std::shared_ptr<spdlog::sinks::sink> previous;
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), previous), sinks.end());
    previous = sink;
    sinks.push_back(sink);
    setErrorLog(path);
  } catch (const spdlog::spdlog_ex& e) {
    reporter_.warn(fmt::format("cannot write '{}': {}", path, e.what()));
  }
}

// The epoch's position is kept in examples: a checkpoint written by another number of processes
// resumes with the rest of its epoch dealt out over this world size (no example skipped or seen
// twice), and the run's length in steps, the schedule's, recomputed for it.
void Trainer::adoptWorldSize() {
  const int64_t b = cfg_.data.batch_size, w = data_world_;
  if (state_.epoch_examples < 0)  // not recorded (an older checkpoint): a run of this size
    state_.epoch_examples = state_.batch_in_epoch * b * w;
  const int64_t written_by = state_.world_size > 0 ? state_.world_size : w;
  state_.world_size = w;
  if (written_by == w) return;
  sampler_->setEpoch(state_.epoch);
  if (splits_.train.source) splits_.train.source->setEpoch(state_.epoch);  // augmentation draws
  const auto rest = static_cast<int64_t>(sampler_->indices(state_.epoch_examples).size());
  const int64_t left_batches = data::batchesPerEpoch(rest, b, cfg_.data.drop_last);
  const int64_t left_steps = (left_batches + cfg_.train.grad_accum - 1) / cfg_.train.grad_accum;
  const int64_t before = total_steps_;
  if (cfg_.train.max_steps > 0) {  // the same length; the epochs it takes from here may change
    const int64_t after_this = std::max<int64_t>(0, total_steps_ - state_.step - left_steps);
    epochs_ = state_.epoch + 1 + (after_this + steps_per_epoch_ - 1) / steps_per_epoch_;
  } else {
    total_steps_ = state_.step + left_steps + (epochs_ - state_.epoch - 1) * steps_per_epoch_;
  }
  reporter_.info(fmt::format(
      "resuming on {} process(es) a checkpoint written by {}: {} examples of epoch {} were done, "
      "the rest is dealt over {} ranks ({} steps); then {} steps an epoch, {} in all (was {})",
      w, written_by, state_.epoch_examples, state_.epoch + 1, w, left_steps, steps_per_epoch_,
      total_steps_, before));
}

void Trainer::announce() {
  if (run_.resume_from)
    reporter_.info(fmt::format("resuming from {} (step {}, epoch {})", *run_.resume_from,
                               state_.step, state_.epoch + 1));
  const auto& train = splits_.train;
  const std::string sync = plan_->summary().description;
  reporter_.info(fmt::format(
      "{}: {} with {} parameters{}{}, {} training / {} {} {}, {} steps ({}{} epoch(s) of {}), {} "
      "process(es) of {} thread(s){}",
      cfg_.name, cfg_.model.name, models::parameterCount(*models::wholeModel(model_)),
      model_->tp ? fmt::format(" ({} per tensor-parallel rank)", models::parameterCount(*model_))
                 : "",
      // Where the weights start from (a resumed run says so above).
      cfg_.model.init_from.empty() || run_.resume_from
          ? ""
          : fmt::format(" from {}", cfg_.model.init_from),
      train.size(), splits_.test.size(), heldOutName(splits_.test),
      train.pairs ? fmt::format("preference pairs of blocks of {} tokens (DPO, beta {:g})",
                                cfg_.model.block_size, cfg_.dpo.beta)
      : train.tokens
          ? fmt::format("blocks of {} tokens (vocabulary {}{})", cfg_.model.block_size,
                        train.num_classes, cfg_.data.packing ? "; training examples packed" : "")
          : std::string("examples"),
      total_steps_, cfg_.train.max_steps > 0 ? "train.max_steps: " : "", epochs_, steps_per_epoch_,
      rt_.world_size, at::get_num_threads(), sync.empty() ? "" : " " + sync));
  if (cfg_.dist.strategy == config::Strategy::kDp)
    reporter_.info(fmt::format("dist.strategy dp: {} replica(s), on {} first",
                               devices_.replicas.size(), devices_.main.str()));
  if (config::modelFamily(cfg_.model.name).layer_summary) {  // the network as written
    torch::NoGradGuard no_grad;
    std::istringstream table(
        models::modelSummary(cfg_.model, train.modelInputShape(), train.num_classes, train.tokens));
    for (std::string line; std::getline(table, line);) reporter_.info(line);
  }
  if (cfg_.model.placement == config::Placement::kPipeline)
    reporter_.info(fmt::format("pipeline of {} stages, {} micro-batches a batch: {}",
                               devices_.stages.size(), cfg_.model.micro_batches,
                               model_->pipeline->summary()));
}

Summary Trainer::run() {
  const auto start = Clock::now();
  double train_seconds = 0;
  int64_t samples_this_run = 0;
  run_start_ = start, start_step_ = state_.step;
  try {
    while (state_.step < total_steps_ && state_.epoch < epochs_ && !stop_signal_) {
      const auto t0 = Clock::now();
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
    const std::string why = pg_ ? pg_->explainFailure(e, state_.step) : "";
    writeSummary("failed", secondsSince(start), 0, why.empty() ? e.what() : why);
    if (!why.empty()) throw std::runtime_error(why);
    throw;
  }
  return finish(secondsSince(start), train_seconds > 0 ? samples_this_run / train_seconds : 0);
}

// The steps of one epoch (or what is left of it after a resume), until the run's last step or a
// stop vote.
void Trainer::runEpoch() {
  sampler_->setEpoch(state_.epoch);
  if (splits_.train.source) splits_.train.source->setEpoch(state_.epoch);  // augmentation draws
  if (splits_.train.tokens)  // this epoch's cut of the text into blocks
    data::shiftBlocks(splits_.train, data::blockOffset(static_cast<uint64_t>(cfg_.seed),
                                                       state_.epoch, cfg_.model.block_size));
  // The epoch's order without what all ranks already took of it (a resumed epoch).
  auto indices = sampler_->indices(state_.epoch_examples);
  epoch_batches_ =
      state_.batch_in_epoch + data::batchesPerEpoch(static_cast<int64_t>(indices.size()),
                                                    cfg_.data.batch_size, cfg_.data.drop_last);
  faults_.traceEpoch(state_.epoch, indices);
  data::Loader loader(
      splits_.train, std::move(indices), cfg_.data.batch_size, cfg_.data.drop_last,
      cfg_.data.num_workers, cfg_.data.prefetch, /*first_batch=*/0,
      /*pin_memory=*/devices_.main.is_cuda(),
      data::Augment{cfg_.data.augment == config::Augment::kCropFlip, cfg_.data.augment_pad,
                    data::augmentSeed(static_cast<uint64_t>(cfg_.seed), data_rank_, state_.epoch)},
      /*epoch_batch_offset=*/state_.batch_in_epoch);
  if (state_.batch_in_epoch == 0) tally_->startEpoch();
  model_->train();
  Window w;
  while (state_.step < total_steps_) {
    const int64_t k = std::min(cfg_.train.grad_accum, epoch_batches_ - state_.batch_in_epoch);
    if (k <= 0) break;
    if (pg_)
      pg_->watchdog().setStep(state_.step), pg_->watchdog().setPhase(distributed::Phase::kCompute);
    last_lr_ = learningRate(cfg_.optimizer, cfg_.scheduler, state_.step, total_steps_);
    const StepPosition at{state_.step, state_.epoch, state_.batch_in_epoch, rt_.rank};
    const bool logs = (at.step + 1) % cfg_.train.log_every == 0 || at.step + 1 == total_steps_;
    {
      // LTRAIN_CUDA_SYNC_DEBUG: a step that does not log must not make the host wait.
      NoHostSyncScope quiet(!logs);
      // The first step makes what steps keep (optimizer state, buckets); the second is a step as
      // every later one is.
      std::optional<MemoryPhase> phase;
      if (state_.step == start_step_) phase.emplace("first step");
      if (state_.step == start_step_ + 1) phase.emplace("second step");
      const StepResult r = step_->run(loader, at, k, last_lr_);
      phase.reset();
      if (r.found_inf.defined()) window_positions_[at.step + 1] = at;
      state_.batch_in_epoch += k;
      state_.epoch_examples += r.samples * data_world_;
      faults_.traceStep(r.samples);
      afterStep(r, w);
    }
    if (logs) logWindow(w, last_lr_);
    const bool epoch_done = state_.batch_in_epoch >= epoch_batches_;
    if (epoch_done) ++state_.epoch, state_.batch_in_epoch = 0, state_.epoch_examples = 0;
    if (betweenSteps(epoch_done, w)) {
      if (w.steps > 0) logWindow(w, last_lr_);  // the stopped window's steps are reported too
      return;
    }
    if (epoch_done) break;
  }
}

// Counts the step: position, samples, and its loss (unless skipped) into window and epoch.
void Trainer::afterStep(const StepResult& r, Window& w) {
  ++state_.step;
  if (first_step_wall_time_ == 0) first_step_wall_time_ = wallTime();
  state_.samples += r.samples * data_world_;
  ++w.steps, w.samples += r.samples * data_world_;
  w.data_wait_s += r.data_wait_s;
  const auto last = plan_->lastStep();
  w.collectives += last.collectives, w.comm_wait_s += last.wait_s;
  w.all_to_all_s += last.all_to_all_s;
  tally_->add(r.loss, r.found_inf, r.skipped, state_.step);
  if (r.dpo_stats.defined())
    w.dpo_stats = w.dpo_stats.defined() ? w.dpo_stats + r.dpo_stats : r.dpo_stats;
  if (r.aux_loss.defined()) {
    w.aux_loss = w.aux_loss.defined() ? w.aux_loss + r.aux_loss : r.aux_loss;
    w.expert_counts =
        w.expert_counts.defined() ? w.expert_counts + r.expert_counts : r.expert_counts;
    ++w.aux_steps;
  }
  if (reporter_.active()) {
    const double window = secondsSince(w.start);
    // The last report's loss: reading this step's would make the host wait for the device.
    reporter_.progress(state_.epoch + 1, epochs_, state_.step, total_steps_, last_window_loss_,
                       window > 0 ? w.samples / window : 0, secondsToGo());
  }
}

// The rest of the run at this attempt's pace so far; NaN before its first step.
double Trainer::secondsToGo() const {
  const int64_t done = state_.step - start_step_;
  if (done <= 0) return std::nan("");
  return secondsSince(run_start_) / static_cast<double>(done) *
         static_cast<double>(total_steps_ - state_.step);
}

// Evaluation, checkpoints, fault hooks and the stop vote between two steps; the time they take
// is kept out of the throughput. True when every rank is to stop now.
bool Trainer::betweenSteps(bool epoch_done, Window& w) {
  const auto t_pause = Clock::now();
  if ((cfg_.train.eval_every > 0 && state_.step % cfg_.train.eval_every == 0) ||
      (cfg_.train.eval_every == 0 && epoch_done))
    evaluateAndLog();
  if ((cfg_.train.checkpoint_every > 0 && state_.step % cfg_.train.checkpoint_every == 0) ||
      (cfg_.train.checkpoint_every == 0 && epoch_done))
    checkpoint();
  const double paused = secondsSince(t_pause);
  paused_s_ += paused;
  w.start += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(paused));
  faults_.afterStep(state_.step);
  faults_.drift(state_.step, *model_);
  stop_signal_ = vote_.afterStep(plan_->lastStep().extras);
  return stop_signal_ != 0;
}

Summary runTraining(const config::LoadedConfig& lc, const TrainRequest& req,
                    const distributed::Runtime& rt) {
  Trainer t(lc, req, rt);
  return t.run();
}

}  // namespace ltrain::train
