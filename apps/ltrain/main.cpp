// ltrain's command line: a table of subcommands, each a thin call into the library.
// Exit codes: 0 success, 2 bad usage/config/data (one line on stderr), 1 failure during training.
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "ltrain/common/errors.h"
#include "ltrain/config/emit.h"
#include "ltrain/config/load.h"
#include "ltrain/dist/runtime.h"
#include "ltrain/train/trainer.h"

namespace {

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  std::string output_dir;
  bool overwrite = false;
  bool reference = false, explain = false;
};

int cmdTrain(const Args& a) {
  auto lc = ltrain::config::loadConfig(a.config, a.overrides);
  auto rt = ltrain::dist::runtimeFromEnv();
  spdlog::set_pattern(rt.distributed() ? fmt::format("[%H:%M:%S rank {}] %v", rt.rank)
                                       : "[%H:%M:%S] %v");
  auto s = ltrain::train::runTraining(lc, {a.output_dir, a.overwrite}, rt);
  if (rt.isMain())
    fmt::print("test_accuracy {:.4f}  test_loss {:.4f}  steps {}  wall {:.1f}s  run {}\n",
               s.test_accuracy, s.test_loss, s.steps, s.wall_s, s.run_dir);
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
  std::cout << (a.explain ? ltrain::config::toYamlExplained(lc) : ltrain::config::toYaml(lc.cfg));
  return 0;
}

std::string oneLine(std::string s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ltrain: train LibTorch models from a YAML config, on one or many devices"};
  app.require_subcommand(1);
  Args a;
  const std::string keys =
      "\nConfig keys (set in the YAML file or as KEY=VALUE):\n" + ltrain::config::optionSummary();

  auto* train = app.add_subcommand("train", "Train the model a config describes");
  train->add_option("config", a.config, "Experiment config (YAML)")->required();
  train->add_option("overrides", a.overrides, "KEY=VALUE overrides, e.g. optimizer.lr=0.01");
  train->add_option("--output-dir", a.output_dir, "Run directory (default: <output_dir>/<name>)");
  train->add_flag("--overwrite", a.overwrite, "Replace a finished run in the run directory");
  train->footer(keys);

  auto* config = app.add_subcommand("config", "Print the resolved config as YAML");
  config->add_option("config", a.config, "Experiment config (YAML)");
  config->add_option("overrides", a.overrides, "KEY=VALUE overrides");
  config->add_flag("--explain", a.explain, "Say where each value came from");
  config->add_flag("--reference", a.reference,
                   "Print the Markdown reference of every key (docs/config.md)");
  config->footer(keys);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ltrain: error: " << oneLine(e.what()) << " (see ltrain --help)\n";
    return 2;
  }

  try {
    if (app.got_subcommand(train)) return cmdTrain(a);
    return cmdConfig(a);
  } catch (const ltrain::UsageError& e) {
    std::cerr << "ltrain: error: " << oneLine(e.what()) << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "ltrain: error: " << oneLine(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ltrain: error: " << oneLine(e.what()) << "\n";
    return 1;
  }
}
