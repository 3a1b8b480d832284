#include "ltrain/sweep/sweep.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

#include "ltrain/common/child_groups.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/spawn.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/config/load.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/owned_dir.h"
#include "ltrain/train/run_report.h"

namespace fs = std::filesystem;

namespace ltrain::sweep {
namespace {

using Clock = std::chrono::steady_clock;

// The summary fields a sweep can sort by, as summary.json names them.
const std::vector<std::string> kMetrics = {"test_accuracy", "test_loss",     "train_loss",
                                           "steps",         "samples_per_s", "wall_s"};

struct Outcome {
  std::string status = "pending";  // pending | running | completed | failed | interrupted
  std::map<std::string, double> metrics;
  std::string error;
  double seconds = 0;
  // The training loss's first and last quarters of reports (metrics.jsonl), each averaged so
  // that one noisy window decides nothing.
  double early_loss = std::nan(""), late_loss = std::nan("");
  // A completed trial whose training loss fell by less than 3% from its first quarter of reports
  // to its last: it did not learn (a learning rate far too low or too high, a model left at
  // chance), which its place in the ranking alone would not say. Four reports at least.
  bool didNotLearn() const {
    return status == "completed" && std::isfinite(early_loss) && std::isfinite(late_loss) &&
           late_loss >= 0.97 * early_loss;
  }
};

Outcome readOutcome(const std::string& run_dir) {
  Outcome o;
  std::error_code ec;
  if (!fs::exists(run_dir + "/summary.json", ec)) return o;
  const io::Json j = io::parseJsonOrDiscard(io::readFile(run_dir + "/summary.json"));
  if (!j.is_object()) {
    o.status = "unknown";
    return o;
  }
  o.status = j.value("status", std::string("unknown"));
  for (const auto& m : kMetrics)
    if (j.contains(m) && j[m].is_number()) o.metrics[m] = j[m].get<double>();
  if (j.contains("error") && j["error"].is_string()) o.error = j["error"].get<std::string>();
  std::ifstream metrics(run_dir + "/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);) {
    const io::Json r = io::parseJsonOrDiscard(line);
    if (r.is_object() && r.value("split", "") == "train" && r.contains("loss") &&
        r["loss"].is_number())
      losses.push_back(r["loss"].get<double>());
  }
  if (losses.size() >= 4) {
    const auto q = static_cast<std::ptrdiff_t>(losses.size() / 4);
    o.early_loss = std::accumulate(losses.begin(), losses.begin() + q, 0.0) / q;
    o.late_loss = std::accumulate(losses.end() - q, losses.end(), 0.0) / q;
  }
  return o;
}

// The last "ltrain: error:" line of a trial's output, or "" when there is none.
std::string lastError(const std::string& log) {
  std::ifstream in(log);
  std::string line, found;
  while (std::getline(in, line)) {
    const auto at = line.find("ltrain: error: ");
    if (at != std::string::npos) found = line.substr(at + 15);
  }
  return found;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string metricText(const Outcome& o, const std::string& m) {
  auto it = o.metrics.find(m);
  return it == o.metrics.end() ? "" : fmt::format("{:.6g}", it->second);
}

struct Running : Child {
  Running(size_t trial_, pid_t pid_, int slot_) : trial(trial_), slot(slot_) { pid = pid_; }
  size_t trial;
  int slot;
  Clock::time_point start = Clock::now();
};

// How long trials get to checkpoint and exit when a failed sweep stops them.
constexpr double kTrialGraceS = 60;

class Runner {
 public:
  Runner(const SweepSpec& spec, std::string self)
      : spec_(spec),
        self_(std::move(self)),
        trials_(expandTrials(spec.params, spec.samples, spec.seed)) {}

  int run() {
    validate();
    prepareDir();
    outcomes_.resize(trials_.size());
    std::vector<size_t> todo;
    for (size_t i = 0; i < trials_.size(); ++i) {
      outcomes_[i] = readOutcome(trialDir(i));
      if (outcomes_[i].status == "completed")
        say(fmt::format("trial {} finished earlier: skipped", trials_[i].shortName()));
      else
        todo.push_back(i);
    }
    // A stop signal is passed on to the trials (they checkpoint); a second one kills them.
    StopSignal signals(StopSignal::SecondInterrupt::kCount);
    try {
      schedule(todo);
    } catch (...) {
      // Never leave trials running behind a failed sweep; record what finished.
      StopOptions o;
      o.grace_s = kTrialGraceS;
      stopGroups(children(), SIGTERM, o);
      writeSummary();
      throw;
    }
    writeSummary();
    if (StopSignal::pending()) return 128 + StopSignal::received();  // as a shell reports it
    for (const auto& o : outcomes_)
      if (o.status != "completed") return 1;
    return 0;
  }

 private:
  std::string trialDir(size_t i) const { return spec_.dir + "/" + trials_[i].shortName(); }

  std::vector<std::string> trialOverrides(size_t i) const {
    std::vector<std::string> o = spec_.overrides;
    for (const auto& t : trials_[i].overrides()) o.push_back(t);
    return o;
  }

  // Every trial's config must load before the first one runs.
  void validate() {
    if (std::find(kMetrics.begin(), kMetrics.end(), spec_.metric) == kMetrics.end())
      throw UsageError(fmt::format("sweep.metric '{}': expected one of {}", spec_.metric,
                                   fmt::join(kMetrics, ", ")));
    if (spec_.mode != "max" && spec_.mode != "min")
      throw UsageError(fmt::format("sweep.mode '{}': expected max or min", spec_.mode));
    for (size_t i = 0; i < trials_.size(); ++i) {
      try {
        config::loadConfig(spec_.base, trialOverrides(i));
      } catch (const UsageError& e) {
        throw UsageError(fmt::format("trial {}: {}", trials_[i].shortName(), e.what()));
      }
    }
  }

  void prepareDir() {
    std::error_code ec;
    io::checkOwnable(spec_.dir, io::DirKind::kSweep);
    io::claimDir(spec_.dir, io::DirKind::kSweep);
    YAML::Emitter y;
    y << YAML::BeginMap << YAML::Key << "base" << YAML::Value << fs::absolute(spec_.base).string();
    if (!spec_.source.empty())
      y << YAML::Key << "source" << YAML::Value << fs::absolute(spec_.source).string();
    y << YAML::Key << "overrides" << YAML::Value << YAML::Flow << spec_.overrides;
    y << YAML::Key << "params" << YAML::Value << YAML::BeginMap;
    for (const auto& p : spec_.params) y << YAML::Key << p.key << YAML::Value << p.describe();
    y << YAML::EndMap;
    y << YAML::Key << "sweep" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "parallel" << YAML::Value << spec_.parallel;
    y << YAML::Key << "metric" << YAML::Value << spec_.metric;
    y << YAML::Key << "mode" << YAML::Value << spec_.mode;
    y << YAML::Key << "samples" << YAML::Value << spec_.samples;
    y << YAML::Key << "seed" << YAML::Value << spec_.seed;
    y << YAML::Key << "nproc_per_node" << YAML::Value << spec_.nproc_per_node;
    y << YAML::EndMap;
    y << YAML::Key << "trials" << YAML::Value << YAML::BeginSeq;
    std::vector<std::string> names;
    for (size_t i = 0; i < trials_.size(); ++i) {
      names.push_back(trials_[i].shortName());
      y << YAML::Flow << YAML::BeginMap << YAML::Key << "dir" << YAML::Value << names.back()
        << YAML::Key << "overrides" << YAML::Value << trials_[i].overrides() << YAML::EndMap;
    }
    y << YAML::EndSeq << YAML::EndMap;
    const std::string path = spec_.dir + "/sweep.yaml";
    if (fs::exists(path, ec)) {
      // The same sweep may run again (finishing what is left); another one must not mix in.
      std::vector<std::string> before;
      try {
        for (const auto& t : YAML::LoadFile(path)["trials"])
          before.push_back(t["dir"].as<std::string>());
      } catch (const YAML::Exception&) {
      }
      if (before != names)
        throw UsageError(fmt::format(
            "sweep directory '{}' holds another sweep (its sweep.yaml lists other trials); "
            "choose another --output-dir or sweep.name",
            spec_.dir));
    }
    io::writeFileAtomic(path, std::string(y.c_str()) + "\n");
  }

  void schedule(const std::vector<size_t>& todo) {
    const int gpus = gpuCount();
    auto& running = running_;
    std::vector<bool> slot_busy(static_cast<size_t>(spec_.parallel), false);
    size_t next = 0;
    bool forwarded = false;
    while (next < todo.size() || !running.empty()) {
      const int sig = StopSignal::pending();
      if (sig && !forwarded) {
        say(fmt::format("got signal {}: stopping the running trials (they checkpoint first)", sig));
        signalGroups(children(), sig);
        forwarded = true;
      }
      if (StopSignal::count() > 1) signalGroups(children(), SIGKILL);
      while (!sig && next < todo.size() && running.size() < slot_busy.size()) {
        const int slot = static_cast<int>(std::find(slot_busy.begin(), slot_busy.end(), false) -
                                          slot_busy.begin());
        slot_busy[static_cast<size_t>(slot)] = true;
        const size_t i = todo[next++];
        running.emplace_back(i, start(i, slot, gpus), slot);
        outcomes_[i].status = "running";
        say(fmt::format("trial {} started ({} running, {} waiting)", trials_[i].shortName(),
                        running.size(), todo.size() - next));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      reapExited(children());
      for (auto it = running.begin(); it != running.end();) {
        if (!it->exited) {
          ++it;
          continue;
        }
        finish(it->trial, it->status,
               std::chrono::duration<double>(Clock::now() - it->start).count());
        slot_busy[static_cast<size_t>(it->slot)] = false;
        it = running.erase(it);
      }
      if (StopSignal::pending() && next < todo.size()) next = todo.size();  // start nothing more
    }
  }

  static int gpuCount() {
    // Counted from the driver's device files rather than by initialising CUDA in this process,
    // which only forks trials.
    int n = 0;
    std::error_code ec;
    while (fs::exists(fmt::format("/dev/nvidia{}", n), ec)) ++n;
    return n;
  }

  pid_t start(size_t i, int slot, int gpus) {
    const std::string dir = trialDir(i);
    io::claimDir(dir, io::DirKind::kRun);  // its output.log goes in before the trial starts
    std::vector<std::string> argv{self_, "train", spec_.base};
    for (const auto& o : trialOverrides(i)) argv.push_back(o);
    argv.insert(argv.end(), {"--output-dir", dir});
    if (spec_.nproc_per_node != "1")
      argv.insert(argv.end(), {"--nproc-per-node", spec_.nproc_per_node, "--master-port", "0"});
    std::map<std::string, std::string> env;
    const int k = static_cast<int>(spec_.parallel);
    if (gpus > 0) {
      // Each concurrent trial its own share of the GPUs.
      const int per = std::max(1, gpus / k);
      std::string ids;
      for (int g = slot * per % gpus, n = 0; n < per; ++n)
        ids += (ids.empty() ? "" : ",") + std::to_string((g + n) % gpus);
      env["CUDA_VISIBLE_DEVICES"] = ids;
    } else if (!std::getenv("OMP_NUM_THREADS")) {
      // The CPU's cores shared among the concurrent trials instead of each taking all of them.
      env["OMP_NUM_THREADS"] =
          std::to_string(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / k));
    }
    const std::string log = dir + "/output.log";
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
      throw std::runtime_error(fmt::format("cannot write '{}': {}", log, std::strerror(errno)));
    // SIGTERM should the sweep die: the trial checkpoints and stops.
    pid_t pid = -1;
    try {
      pid = spawnInGroup(argv, env, fd, SIGTERM);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return pid;
  }

  void finish(size_t i, int status, double seconds) {
    Outcome o = readOutcome(trialDir(i));
    o.seconds = seconds;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0 && o.status == "completed") {
      say(fmt::format("trial {} completed: {} {} ({:.1f} s){}", trials_[i].shortName(),
                      spec_.metric, metricText(o, spec_.metric), seconds,
                      o.didNotLearn() ? fmt::format("; it did not learn (training loss {:.4g} over "
                                                    "its first quarter, {:.4g} over its last)",
                                                    o.early_loss, o.late_loss)
                                      : ""));
    } else if (code == 128 + SIGTERM || code == 128 + SIGINT) {
      o.status = "interrupted";
      say(fmt::format("trial {} interrupted: it resumes when the sweep runs again",
                      trials_[i].shortName()));
    } else {
      o.status = "failed";
      o.error = lastError(trialDir(i) + "/output.log");
      if (o.error.empty()) o.error = fmt::format("exit code {}", code);
      say(fmt::format("trial {} failed: {} (see {}/output.log)", trials_[i].shortName(), o.error,
                      trialDir(i)));
    }
    outcomes_[i] = o;
  }

  void writeSummary() {
    std::string csv = "trial,status";
    for (const auto& p : spec_.params) csv += "," + csvField(p.key);
    for (const auto& m :
         {"test_accuracy", "test_loss", "train_loss", "steps", "wall_s", "samples_per_s"})
      csv += std::string(",") + m;
    csv += ",run_dir,error\n";
    for (size_t i = 0; i < trials_.size(); ++i) {
      const auto& o = outcomes_[i];
      csv += fmt::format("{},{}", trials_[i].number, o.status);
      for (const auto& [k, v] : trials_[i].values) csv += "," + csvField(v);
      for (const auto& m :
           {"test_accuracy", "test_loss", "train_loss", "steps", "wall_s", "samples_per_s"})
        csv += "," + metricText(o, m);
      csv += "," + csvField(trialDir(i)) + "," + csvField(o.error) + "\n";
    }
    io::writeFileAtomic(spec_.dir + "/sweep_summary.csv", csv);

    // Completed trials best first by the metric; the others after them, in trial order.
    std::vector<size_t> order(trials_.size());
    std::iota(order.begin(), order.end(), 0);
    auto value = [&](size_t i) {
      const auto& o = outcomes_[i];
      auto it = o.metrics.find(spec_.metric);
      return o.status == "completed" && it != o.metrics.end();
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const bool va = value(a), vb = value(b);
      if (va != vb) return va;
      if (!va) return false;
      const double ma = outcomes_[a].metrics.at(spec_.metric),
                   mb = outcomes_[b].metrics.at(spec_.metric);
      return spec_.mode == "max" ? ma > mb : ma < mb;
    });
    std::string md = "| rank | trial |";
    std::string rule = "| --- | --- |";
    for (const auto& p : spec_.params) md += " " + p.key + " |", rule += " --- |";
    md += fmt::format(" {} | status |\n", spec_.metric);
    md += rule + " --- | --- |\n";
    int rank = 0;
    for (size_t i : order) {
      md += fmt::format("| {} | {} |", value(i) ? std::to_string(++rank) : "-", trials_[i].number);
      for (const auto& [k, v] : trials_[i].values) md += " " + v + " |";
      md += fmt::format(" {} | {}{} |\n", value(i) ? metricText(outcomes_[i], spec_.metric) : "-",
                        outcomes_[i].status, outcomes_[i].didNotLearn() ? " (did not learn)" : "");
    }
    io::writeFileAtomic(spec_.dir + "/sweep_summary.md", md);
    std::vector<train::SweepReportRow> rows;
    for (size_t i : order) {
      train::SweepReportRow r;
      r.number = trials_[i].number;
      r.values = {trials_[i].values.begin(), trials_[i].values.end()};
      r.status = outcomes_[i].status + (outcomes_[i].didNotLearn() ? " (did not learn)" : "");
      r.has_metric = value(i);
      if (r.has_metric) r.metric = outcomes_[i].metrics.at(spec_.metric);
      r.run_dir = trials_[i].shortName();
      rows.push_back(std::move(r));
    }
    train::writeSweepReport(spec_.dir, spec_.metric, rows);
    fmt::print("\n{}\n", md);
    const auto stuck = std::count_if(outcomes_.begin(), outcomes_.end(),
                                     [](const Outcome& o) { return o.didNotLearn(); });
    fmt::print("sweep: {} ({} of {} trials completed{}; summary in {}/sweep_summary.csv)\n",
               spec_.dir, rank, trials_.size(),
               stuck ? fmt::format(", {} of them did not learn", stuck) : "", spec_.dir);
  }

  static void say(const std::string& line) { fmt::print("sweep: {}\n", line), std::fflush(stdout); }

  const SweepSpec& spec_;
  std::string self_;
  std::vector<Trial> trials_;
  std::vector<Outcome> outcomes_;
  std::vector<Running> running_;

  std::vector<Child*> children() {
    std::vector<Child*> out;
    for (auto& r : running_) out.push_back(&r);
    return out;
  }
};

}  // namespace

int runSweep(const SweepSpec& spec, const std::string& self_exe) {
  Runner r(spec, self_exe);
  return r.run();
}

std::string listRuns(const std::string& dir, const std::string& html) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format("runs: '{}' is not a directory", dir));
  std::vector<std::string> runs;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory()) continue;
    const std::string name = it->path().filename().string();
    if (name == "checkpoints" || name == "logs") {
      it.disable_recursion_pending();
      continue;
    }
    if (fs::exists(it->path() / "config.yaml") && fs::exists(it->path() / "overrides.txt"))
      runs.push_back(it->path().string());
  }
  if (fs::exists(fs::path(dir) / "config.yaml") && fs::exists(fs::path(dir) / "overrides.txt"))
    runs.push_back(dir);
  std::sort(runs.begin(), runs.end());
  std::string out = fmt::format("{:<48} {:<12} {:>7} {:>13} {:>9} {:>8}\n", "run", "status",
                                "steps", "test_accuracy", "test_loss", "wall_s");
  for (const auto& r : runs) {
    Outcome o = readOutcome(r);
    if (o.status == "pending") o.status = "unfinished";
    std::string rel = fs::relative(r, dir, ec).string();
    if (rel.empty() || rel == ".") rel = r;
    out += fmt::format("{:<48} {:<12} {:>7} {:>13} {:>9} {:>8}\n", rel, o.status,
                       metricText(o, "steps"), metricText(o, "test_accuracy"),
                       metricText(o, "test_loss"), metricText(o, "wall_s"));
  }
  if (runs.empty()) out += "(no runs below " + dir + ")\n";
  if (!html.empty()) {
    std::vector<train::RunsReportRow> rows;
    for (const auto& r : runs) {
      Outcome o = readOutcome(r);
      train::RunsReportRow row;
      row.run_dir = r;
      row.status = o.status == "pending" ? "unfinished" : o.status;
      for (const char* m : {"steps", "test_accuracy", "test_loss", "wall_s"})
        row.columns.emplace_back(m, metricText(o, m));
      rows.push_back(std::move(row));
    }
    train::writeRunsReport(dir, rows, html);
    out += "wrote " + html + "\n";
  }
  return out;
}

}  // namespace ltrain::sweep
