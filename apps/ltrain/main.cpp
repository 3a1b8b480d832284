// ltrain's command line: a table of subcommands, each a thin call into the library.
// Exit codes: 0 success, 2 bad usage/config/data (one line on stderr), 1 failure during training.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "ltrain/common/allocator.h"
#include "ltrain/common/tensor_memory.h"
#include "ltrain/io/error_report.h"

#include "ltrain/common/errors.h"
#include "ltrain/common/memory_phase.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/config/emit.h"
#include "ltrain/config/load.h"
#include "ltrain/cuda/plugin.h"
#include "ltrain/distributed/runtime.h"
#include "ltrain/io/files.h"
#include "ltrain/io/owned_dir.h"
#include "ltrain/launch/launcher.h"
#include "ltrain/sweep/sweep.h"

#include "ltrain/data/loader_speed.h"
#include "ltrain/inference/inference.h"
#include "ltrain/inference/predict.h"
#include "ltrain/train/evaluate.h"
#include "ltrain/train/preflight.h"
#include "ltrain/train/run_dir.h"
#include "ltrain/train/trainer.h"

namespace {

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  std::string output_dir;
  bool overwrite = false;
  bool reference = false, explain = false, model_summary = false;
  std::string checkpoint;
  std::string nproc;      // train --nproc-per-node: run through the launcher
  bool multirun = false;  // train -m: the overrides' lists and ranges make a sweep
  int64_t parallel = 1;
  std::string sweep_file, runs_dir, runs_html;
  std::string run_dir, tokenizer, hf_dir, peft_dir, prompt;  // generate, export
  ltrain::models::SamplingOptions sampling;
  ltrain::launch::LaunchOptions launch;
  ltrain::inference::PredictRequest predict;
  int64_t batches = 0;  // loader-speed
};

std::string selfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "ltrain" : p.string();
}

// generate and export: where the trained model comes from (a config and weights, or a run).
void addTrainedModelOptions(CLI::App* cmd, Args& a) {
  cmd->add_option("config", a.config, "Experiment config (YAML); or --run");
  cmd->add_option("overrides", a.overrides, "KEY=VALUE overrides");
  cmd->add_option("--checkpoint", a.checkpoint,
                  "A checkpoint (.pt) or a model.safetensors (default: the run's newest)");
  cmd->add_option("--run", a.run_dir, "A run directory: its config.yaml and newest weights");
}

// `ltrain train CONFIG --nproc-per-node N`: check what can be checked here, then run the same
// command as N workers under the launcher. Rank 0 prepares (and with --overwrite empties) the run
// directory once the data and model have loaded, so a bad input never costs the old run.
int trainLaunched(const Args& a) {
  auto lc = ltrain::config::loadConfig(a.config, a.overrides);
  ltrain::train::preflight(lc);
  auto rd = ltrain::train::prepareRunDir(lc, a.output_dir, a.overwrite, /*create=*/false);
  // The launcher writes the workers' logs there before rank 0 prepares the rest: made ltrain's now.
  ltrain::io::claimDir(rd.path, ltrain::io::DirKind::kRun);
  ltrain::launch::LaunchOptions lo = a.launch;
  lo.nproc_per_node = a.nproc;
  // A pipeline's worker drives one GPU per stage: --nproc-per-node gpu starts GPUs / stages.
  if (lc.cfg.model.placement == ltrain::config::Placement::kPipeline)
    lo.gpus_per_worker = static_cast<int>(lc.cfg.model.pipeline_stages);
  ltrain::launch::checkLaunchable(lo, lc.cfg.dist.backend);
  if (lo.log_dir.empty()) lo.log_dir = rd.path + "/logs";
  lo.program = {selfExe(), "train", a.config};
  lo.program.insert(lo.program.end(), a.overrides.begin(), a.overrides.end());
  lo.program.insert(lo.program.end(), {"--output-dir", rd.path});
  if (a.overwrite) lo.program.push_back("--overwrite");
  return ltrain::launch::runLauncher(lo);
}

// The last line's scores on the held-out split: a language model's is its validation split,
// scored per token (loss, perplexity, next-token accuracy); DPO's, its validation pairs (loss,
// and the share ranked right); a classifier's, its test set.
std::string heldOutScores(double accuracy, double loss, bool language_model,
                          bool preference = false) {
  if (preference) return fmt::format("val_loss {:.4f}  reward_accuracy {:.4f}", loss, accuracy);
  if (language_model)
    return fmt::format("val_loss {:.4f}  val_perplexity {:.3f}  next_token_accuracy {:.4f}", loss,
                       std::exp(loss), accuracy);
  return fmt::format("test_accuracy {:.4f}  test_loss {:.4f}", accuracy, loss);
}

int cmdTrain(const Args& a) {
  if (!a.nproc.empty()) return trainLaunched(a);
  auto lc = ltrain::config::loadConfig(a.config, a.overrides);
  auto rt = ltrain::distributed::runtimeFromEnv();
  // Under ltrain launch the launcher prefixes each line with the rank; under srun, mpirun or
  // torchrun each rank says it itself (and writes logs/rank_N.log, see the trainer).
  if (rt.distributed() && !rt.launched_by_ltrain)
    spdlog::set_pattern(fmt::format("[rank {}] [%H:%M:%S] %v", rt.rank));
  else
    spdlog::set_pattern("[%H:%M:%S] %v");
  auto s = ltrain::train::runTraining(lc, {a.output_dir, a.overwrite}, rt);
  if (s.stop_signal != 0)
    return 128 + s.stop_signal;  // 143 for SIGTERM, 130 for SIGINT, as torchrun
  if (rt.isMain())
    fmt::print("{}  steps {}  wall {:.1f}s  run {}\n",
               heldOutScores(s.test_accuracy, s.test_loss, s.language_model, s.preference), s.steps,
               s.wall_s, s.run_dir);
  return 0;
}

// `ltrain train CONFIG -m KEY=a,b KEY2=range(..)`: a sweep without a sweep file, into
// --output-dir or <output_dir>/<name>-sweep.
int cmdMultirun(const Args& a) {
  auto lc = ltrain::config::loadConfig(a.config, {});
  ltrain::sweep::SweepSpec spec;
  spec.base = a.config;
  for (const auto& o : a.overrides) {
    const auto eq = o.find('=');
    if (eq != std::string::npos && ltrain::sweep::isSweepValue(o.substr(eq + 1)))
      spec.params.push_back(ltrain::sweep::parseParam(o.substr(0, eq), o.substr(eq + 1)));
    else
      spec.overrides.push_back(o);
  }
  if (spec.params.empty())
    throw ltrain::UsageError(
        "train -m: no override sweeps anything; write KEY=a,b,c or KEY=range(start,stop,step)");
  spec.parallel = a.parallel;
  spec.nproc_per_node = a.nproc.empty() ? "1" : a.nproc;
  spec.dir = a.output_dir.empty() ? lc.cfg.output_dir + "/" + lc.cfg.name + "-sweep" : a.output_dir;
  return ltrain::sweep::runSweep(spec, selfExe());
}

// eval and predict: the config and weights given, or a run directory's.
ltrain::inference::RunFiles evalFiles(const Args& a) {
  return ltrain::inference::resolveRun({a.config, a.overrides, a.checkpoint, a.run_dir, ""});
}

const char* const kNoWeights =
    "expected --checkpoint PATH (a checkpoint .pt or a model.safetensors) or --run RUN_DIR";

int cmdEval(const Args& a) {
  const auto files = evalFiles(a);
  auto lc = ltrain::config::loadConfig(files.config, a.overrides);
  // No weights but model.init_from: the model as it starts (a Hugging Face model before tuning,
  // with finetune.adapter_from's adapter), on the config's data (a text file to score).
  if (files.weights.empty() && lc.cfg.model.init_from.empty())
    throw ltrain::UsageError(fmt::format(
        "{}, or a config with model.init_from (the model before training)", kNoWeights));
  spdlog::set_pattern("[%H:%M:%S] %v");
  auto r = ltrain::train::evaluateWeights(lc, files.weights);
  // A language model's held-out split is its text's validation part: also its perplexity.
  fmt::print("{}  examples {}\n",
             heldOutScores(r.test_accuracy, r.test_loss, r.language_model, r.preference),
             r.examples);
  return 0;
}

int cmdPredict(Args& a) {
  spdlog::set_pattern("[%H:%M:%S] %v");
  auto& req = a.predict;
  const auto files = evalFiles(a);
  if (files.weights.empty()) throw ltrain::UsageError(kNoWeights);
  req.config = files.config, req.overrides = a.overrides, req.checkpoint = files.weights;
  const auto s = ltrain::inference::runPredict(req);
  fmt::print(
      "{} predictions written to {}{}{}\n", s.rows, req.output,
      s.labelled ? fmt::format("; accuracy {:.4f} over the {} with a known class",
                               static_cast<double>(s.correct) / s.labelled, s.labelled)
                 : "",
      s.skipped ? fmt::format("; {} files skipped (data.on_bad_image skip)", s.skipped) : "");
  return 0;
}

int cmdLoaderSpeed(const Args& a) {
  auto lc = ltrain::config::loadConfig(a.config, a.overrides);
  const auto s = ltrain::data::measureLoader(lc, a.batches);
  // One JSON line, for bench/image_loader.py and scripts.
  fmt::print(
      "{{\"batches\": {}, \"examples\": {}, \"seconds\": {:.4f}, \"examples_per_s\": {:.1f}}}\n",
      s.batches, s.examples, s.seconds, s.examplesPerSecond());
  return 0;
}

int cmdConfig(const Args& a) {
  if (a.reference) {
    std::cout << ltrain::config::referenceMarkdown();
    return 0;
  }
  if (a.config.empty())
    throw ltrain::UsageError("config: expected a CONFIG.yaml argument (or --reference)");
  auto lc = ltrain::config::loadConfig(a.config, a.overrides);
  ltrain::train::preflight(lc);
  if (a.model_summary) {
    std::cout << ltrain::train::describeModel(lc);
    return 0;
  }
  std::cout << (a.explain ? ltrain::config::toYamlExplained(lc) : ltrain::config::toYaml(lc.cfg));
  return 0;
}

ltrain::inference::InferenceRequest inferenceRequest(const Args& a) {
  return {a.config, a.overrides, a.checkpoint, a.run_dir, a.tokenizer};
}

std::string oneLine(std::string s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// A failed allocation is told by the phase it failed in, the bytes and the process's limit.
std::string outOfMemoryOr(const std::string& message) {
  const std::string oom = ltrain::describeOutOfMemory(message);
  return oom.empty() ? message : oom;
}

// LTRAIN_TEST_OVERRIDES="KEY=VALUE ...": a test hook, added after `train`'s own overrides (and so
// to a sweep's trials and a launcher's workers, which inherit it), so that tests/readme/ runs
// README's commands as written at a test's size.
void addTestOverrides(std::vector<std::string>& overrides) {
  const char* env = std::getenv("LTRAIN_TEST_OVERRIDES");
  if (!env) return;
  std::istringstream in(env);
  for (std::string kv; in >> kv;)  // a launcher's workers get them on their command line too
    if (std::find(overrides.begin(), overrides.end(), kv) == overrides.end())
      overrides.push_back(kv);
}

int fail(int code, const std::string& message) {
  ltrain::reportError(message);
  return code;
}

void addLaunchOptions(CLI::App* app, ltrain::launch::LaunchOptions& o) {
  app->add_option("--nnodes", o.nnodes, "Number of nodes")->capture_default_str();
  app->add_option("--node-rank", o.node_rank, "This node's rank")->capture_default_str();
  app->add_option("--master-addr", o.master_addr, "Rendezvous address (node 0)")
      ->capture_default_str();
  app->add_option("--master-port", o.master_port,
                  "Rendezvous port; 0 picks a free one (single node)")
      ->capture_default_str();
  app->add_option("--max-restarts", o.max_restarts, "Restarts of all workers after a failure")
      ->capture_default_str();
  app->add_option("--log-dir", o.log_dir, "Directory for per-rank logs (rank_N.log)");
  app->add_option("--grace", o.grace_s, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  app->add_option("--rdzv-id,--rdzv_id", o.run_id,
                  "The job's id, the same on every node (torchrun's); node 0 makes one when none "
                  "is given");
  app->add_option("--join-timeout", o.join_timeout_s,
                  "Seconds a restart waits for every node to rejoin (a node that lost the network)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that died leaves a closed socket: writing to it must fail the collective with an error
  // that names the peer, not kill this process silently with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  // c10d logs each store or socket failure with a C++ stack trace; ltrain names the failure in
  // one line of its own. TORCH_CPP_LOG_LEVEL (INFO, WARNING, ERROR) brings c10's messages back.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = 3;  // c10's FATAL only
  ltrain::tuneAllocatorForTraining();
  // LTRAIN_MEMORY_LOG splits each phase's peak by what held it: tensors are counted from here on.
  if (const char* log = std::getenv("LTRAIN_MEMORY_LOG"); log && *log) ltrain::trackTensorMemory();
  ltrain::cuda::loadIfPresent();  // before anything asks LibTorch about CUDA
  CLI::App app{"ltrain: train LibTorch models from a YAML config, on one or many devices"};
  app.require_subcommand(1);
  // What a bug report or the GPU check needs: LibTorch's version, and whether the CUDA side
  // loaded (with NCCL's version) or why not.
  app.set_version_flag("--version", [] {
    return fmt::format("ltrain, LibTorch {}\n{}", TORCH_VERSION, ltrain::cuda::status());
  });
  Args a;
  const std::string keys =
      "\nConfig keys (set in the YAML file or as KEY=VALUE):\n" + ltrain::config::optionSummary();

  auto* train = app.add_subcommand("train", "Train the model a config describes");
  train->add_option("config", a.config, "Experiment config (YAML)")->required();
  train->add_option("overrides", a.overrides, "KEY=VALUE overrides, e.g. optimizer.lr=0.01");
  train->add_option("--output-dir", a.output_dir, "Run directory (default: <output_dir>/<name>)");
  train->add_flag("--overwrite", a.overwrite, "Replace a finished run in the run directory");
  train->add_option("--nproc-per-node", a.nproc,
                    "Run as N worker processes (N, auto, cpu or gpu) under the launcher");
  train->add_flag("-m,--multirun", a.multirun,
                  "A sweep: KEY=a,b,c, KEY=range(0,10,2), KEY=choice(..), uniform/loguniform/int");
  train->add_option("--parallel", a.parallel, "With -m: trials run at a time")
      ->check(CLI::PositiveNumber);
  a.launch.master_port = 0;  // a free port: one command, one job
  addLaunchOptions(train, a.launch);
  train->footer(keys);

  auto* sweep =
      app.add_subcommand("sweep", "Run every trial of a sweep file (see configs/sweeps/)");
  sweep->add_option("sweep", a.sweep_file, "Sweep file (YAML: base, overrides, params, sweep)")
      ->required();
  sweep->add_option("--output-dir", a.output_dir,
                    "Sweep directory (default: <sweep.output_dir>/<sweep.name>)");

  auto* runs = app.add_subcommand("runs", "List the runs below a directory with their metrics");
  runs->add_option("dir", a.runs_dir, "Directory to search (e.g. runs/)")->required();
  runs->add_option("--html", a.runs_html,
                   "Also write this page: every run linked to its report.html, their losses");

  auto* config = app.add_subcommand("config", "Print the resolved config as YAML");
  config->add_option("config", a.config, "Experiment config (YAML)");
  config->add_option("overrides", a.overrides, "KEY=VALUE overrides");
  config->add_flag("--explain", a.explain, "Say where each value came from");
  config->add_flag("--model", a.model_summary,
                   "Print the model one line per layer (type, output shape, parameters), as "
                   "torchinfo does, instead of the config");
  config->add_flag("--reference", a.reference,
                   "Print the Markdown reference of every key (docs/config.md)");
  config->footer(keys);

  auto* eval = app.add_subcommand("eval", "Evaluate saved weights on the test split");
  eval->add_option("config", a.config,
                   "Experiment config (YAML) that describes the model and data; or --run");
  eval->add_option("overrides", a.overrides, "KEY=VALUE overrides");
  eval->add_option("--checkpoint", a.checkpoint,
                   "A checkpoint (.pt) or a model.safetensors (default: the run's final weights)");
  eval->add_option("--run", a.run_dir, "A run directory: its config.yaml and final weights");
  eval->footer(keys);

  auto* predict = app.add_subcommand(
      "predict", "Write a trained classifier's predictions for images or a table as CSV");
  predict->add_option("config", a.config,
                      "Experiment config (YAML) that describes the model and data; or --run");
  predict->add_option("overrides", a.overrides, "KEY=VALUE overrides");
  predict->add_option(
      "--checkpoint", a.checkpoint,
      "A checkpoint (.pt) or a model.safetensors (default: the run's final weights)");
  predict->add_option("--run", a.run_dir, "A run directory: its config.yaml and final weights");
  predict
      ->add_option("--input", a.predict.input,
                   "Class folders, a folder of images, one image, a path,label manifest, or (csv "
                   "data) a table with train.csv's columns")
      ->required();
  predict->add_option("--output", a.predict.output, "The CSV to write")->capture_default_str();
  predict->add_option("--top-k", a.predict.top_k, "Classes per row, most likely first")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  predict->add_flag("--overwrite", a.predict.overwrite, "Replace --output if it exists");
  predict->footer(keys);

  auto* loader_speed = app.add_subcommand(
      "loader-speed",
      "Time the config's training batches alone (loader threads, decoding, augmentation; no "
      "model): examples/s as a JSON line");
  loader_speed->add_option("config", a.config, "Experiment config (YAML)")->required();
  loader_speed->add_option("overrides", a.overrides, "KEY=VALUE overrides");
  loader_speed->add_option("--batches", a.batches, "Batches to time; 0: one epoch")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  loader_speed->footer(keys);

  auto* generate = app.add_subcommand(
      "generate", "Continue a prompt with a trained gpt or llama (KV cache; tokens/s on stderr)");
  addTrainedModelOptions(generate, a);
  generate->add_option("--prompt", a.prompt, "The text to continue")->required();
  generate->add_option("--max-new-tokens", a.sampling.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  generate
      ->add_option("--temperature", a.sampling.temperature,
                   "Sampling temperature; 0: greedy (the most likely token each step)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  generate->add_option("--top-k", a.sampling.top_k, "Sample among the K most likely; 0: all")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  generate
      ->add_option("--top-p", a.sampling.top_p,
                   "Sample among the most likely tokens whose probability reaches P")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  generate->add_option("--seed", a.sampling.seed, "Seed of the sampling")->capture_default_str();
  generate->add_option("--tokenizer", a.tokenizer,
                       "vocabulary.json or tokenizer.json (default: the run directory's)");

  auto* export_cmd = app.add_subcommand(
      "export",
      "Write trained weights as a Hugging Face model directory (transformers loads it), or a "
      "LoRA run's adapters as a PEFT adapter directory");
  addTrainedModelOptions(export_cmd, a);
  export_cmd->add_option("--hf", a.hf_dir,
                         "The directory to write (config.json, model.safetensors); a LoRA run's "
                         "adapters merged into the weights");
  export_cmd->add_option("--peft", a.peft_dir,
                         "LoRA runs: the PEFT adapter directory to write (adapter_config.json, "
                         "adapter_model.safetensors), for peft.PeftModel.from_pretrained");
  export_cmd->add_option("--tokenizer", a.tokenizer,
                         "tokenizer.json to copy beside the weights (default: the run's)");

  ltrain::launch::LaunchOptions lo;
  auto* launch =
      app.add_subcommand("launch", "Run PROGRAM as one worker per device, torchrun-style");
  launch->add_option("--nproc-per-node", lo.nproc_per_node, "Workers per node: N, auto, cpu or gpu")
      ->capture_default_str();
  addLaunchOptions(launch, lo);
  launch->add_option("program", lo.program, "-- PROGRAM ARGS...")->required();
  launch->footer(
      "\nExample: ltrain launch --nproc-per-node 2 -- build/ltrain train configs/quickstart.yaml");

  // CLI11 says only "A subcommand is required" for a misspelt one; name it and the choices.
  std::string names;
  bool known = false;
  for (const auto* s : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + s->get_name();
    known = known || (argc > 1 && s->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "ltrain: error: unknown command '" << argv[1] << "': expected one of " << names
              << " (see ltrain --help)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ltrain: error: " << oneLine(e.what()) << " (see ltrain --help)\n";
    return 2;
  }

  try {
    if (app.got_subcommand(train)) {
      if (a.multirun) return cmdMultirun(a);
      addTestOverrides(a.overrides);
      return cmdTrain(a);
    }
    if (app.got_subcommand(sweep)) {
      auto spec = ltrain::sweep::loadSweepFile(a.sweep_file, a.output_dir);
      return ltrain::sweep::runSweep(spec, selfExe());
    }
    if (app.got_subcommand(runs)) {
      std::cout << ltrain::sweep::listRuns(a.runs_dir, a.runs_html);
      return 0;
    }
    if (app.got_subcommand(launch)) return ltrain::launch::runLauncher(lo);
    if (app.got_subcommand(eval)) return cmdEval(a);
    if (app.got_subcommand(predict)) return cmdPredict(a);
    if (app.got_subcommand(loader_speed)) return cmdLoaderSpeed(a);
    if (app.got_subcommand(generate)) {
      ltrain::inference::runGenerate(inferenceRequest(a), a.prompt, a.sampling);
      return 0;
    }
    if (app.got_subcommand(export_cmd)) {
      ltrain::inference::runExport(inferenceRequest(a), a.hf_dir, a.peft_dir);
      return 0;
    }
    return cmdConfig(a);
  } catch (const ltrain::Interrupted& e) {
    spdlog::warn("{}", e.what());  // a stop request, not an error: exit 128 + signal, as torchrun
    return 128 + e.signal;
  } catch (const ltrain::UsageError& e) {
    return fail(2, oneLine(e.what()));
  } catch (const c10::Error& e) {
    return fail(1, outOfMemoryOr(oneLine(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    return fail(1, outOfMemoryOr(oneLine(e.what())));
  }
}
