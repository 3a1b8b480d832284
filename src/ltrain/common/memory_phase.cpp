#include "ltrain/common/memory_phase.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <regex>

#include "ltrain/common/allocator.h"
#include "ltrain/common/memory.h"
#include "ltrain/common/tensor_memory.h"

namespace ltrain {
namespace {

struct Phases {
  std::mutex mu;
  std::string current;     // the innermost phase running now
  std::string failed;      // the phase an exception left last
  double peak_before = 0;  // VmHWM before the last reset
  std::vector<PhaseRecord> ended;
  // Before the first phase: what was resident, and how much of it tensors (categories_mb).
  double base_rss_mb = -1, base_tensor_mb = 0, base_file_mb = 0;
  int64_t library_bytes = 0;  // addLibraryBytes
  std::function<KeptMemory()> kept;
};

Phases& phases() {
  static Phases p;
  return p;
}

double statusMb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string k;
  while (in >> k) {
    if (k == key) {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

// "5" to clear_refs: the peak resident set becomes the resident set now (Linux 4.0 on).
void resetPeak() {
  auto& p = phases();
  p.peak_before = std::max(p.peak_before, peakRssMb());
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

constexpr double kMiB = 1024.0 * 1024.0;

// The phase's peak split by what held it (memory_phase.h), as a JSON object; "" when tensors are
// not counted.
// file_mb: the file-backed resident pages at the phase's start (RssFile): the libraries' code,
// paged in as kernels first run (20 MiB over a GPT's first steps), and mapped data.
std::string categories(double peak_rss_mb, double file_mb) {
  auto& p = phases();
  if (!tensorMemoryTracked() || p.base_rss_mb < 0) return "";
  const TensorMemory t = tensorMemory();
  KeptMemory k;
  if (p.kept) k = p.kept();
  const double kept_but_gradients =
      static_cast<double>(k.parameters + k.optimizer_state + k.buffers) / kMiB;
  auto transient = [&](Transient kind) {
    return static_cast<double>(t.transient_at_peak[static_cast<int>(kind)]) / kMiB;
  };
  const double gathered = transient(Transient::kGatheredUnits);
  const double buckets = transient(Transient::kGradientBuckets);
  const double gradients =
      static_cast<double>(k.gradients) / kMiB + transient(Transient::kGradientSlices);
  const double tensors = static_cast<double>(t.peak) / kMiB - p.base_tensor_mb;
  const double held = kept_but_gradients + gradients + gathered + buckets;
  const double activations = std::max(0.0, tensors - held);
  const double libraries = p.base_rss_mb + std::max(0.0, file_mb - p.base_file_mb) +
                           static_cast<double>(p.library_bytes) / kMiB;
  const double slack = peak_rss_mb - libraries - (held + activations);
  return fmt::format(
      ", \"categories_mb\": {{\"libraries\": {:.1f}, \"parameters\": {:.1f}, \"gradients\": "
      "{:.1f}, \"optimizer_state\": {:.1f}, \"buffers\": {:.1f}, \"gathered_units\": {:.1f}, "
      "\"gradient_buckets\": {:.1f}, \"activations\": {:.1f}, \"allocator_slack\": {:.1f}}}",
      libraries, static_cast<double>(k.parameters) / kMiB, gradients,
      static_cast<double>(k.optimizer_state) / kMiB, static_cast<double>(k.buffers) / kMiB,
      gathered, buckets, activations, slack);
}

// Under phases().mu, from a destructor: it must not throw, even when memory ran out (the phase an
// allocation failed in is what the error names; its record may be lost).
void appendLog(const std::string& phase, double start, double peak, double end, double file_mb) {
  try {
    phases().ended.push_back({phase, start, peak, end});
  } catch (...) {
  }
  const char* path = std::getenv("LTRAIN_MEMORY_LOG");
  if (!path || !*path) return;
  const char* rank = std::getenv("RANK");
  std::string line;
  try {
    line = fmt::format(
        "{{\"rank\": {}, \"phase\": \"{}\", \"start_rss_mb\": {:.1f}, \"peak_rss_mb\": "
        "{:.1f}, \"end_rss_mb\": {:.1f}{}}}\n",
        rank && *rank ? std::atoi(rank) : 0, phase, start, peak, end, categories(peak, file_mb));
  } catch (...) {
    return;
  }
  // One short write in append mode: the ranks' lines do not interleave.
  if (std::FILE* f = std::fopen(path, "a")) {
    std::fwrite(line.data(), 1, line.size(), f);
    std::fclose(f);
  }
}

std::string mib(double bytes) {
  return fmt::format("{:.0f} MiB", bytes / (1024.0 * 1024.0));
}

// The limits that bound this process's memory: RLIMIT_DATA and RLIMIT_AS where set, and its
// cgroup's (v2 memory.max, v1 memory.limit_in_bytes) where it is below the machine's.
std::string memoryLimit() {
  std::vector<std::string> out;
  for (auto [res, name] :
       {std::pair{RLIMIT_DATA, "RLIMIT_DATA"}, std::pair{RLIMIT_AS, "RLIMIT_AS"}}) {
    rlimit l{};
    if (getrlimit(res, &l) == 0 && l.rlim_cur != RLIM_INFINITY)
      out.push_back(fmt::format("{} {}", name, mib(static_cast<double>(l.rlim_cur))));
  }
  for (const char* file :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(file);
    double v = 0;
    if (in >> v && v > 0 && v < 1e18) out.push_back(fmt::format("cgroup {}", mib(v)));
  }
  if (out.empty()) return "no memory limit set on this process";
  return fmt::format("this process's memory limit: {}", fmt::join(out, ", "));
}

}  // namespace

MemoryPhase::MemoryPhase(std::string name)
    : name_(std::move(name)), exceptions_(std::uncaught_exceptions()) {
  auto& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  outer_ = p.current;
  p.current = name_;
  p.failed.clear();
  // What earlier work left free in the heap (a step that was no phase) is not this phase's.
  giveBackFreedMemory();
  resetPeak();
  start_rss_mb_ = currentRssMb();
  start_file_mb_ = tensorMemoryTracked() ? statusMb("RssFile:") : 0;  // for categories_mb only
  if (p.base_rss_mb < 0) {
    p.base_rss_mb = start_rss_mb_;
    p.base_file_mb = start_file_mb_;
    p.base_tensor_mb = static_cast<double>(tensorMemory().live) / kMiB;
  }
  resetTensorPeak();
}

MemoryPhase::~MemoryPhase() {
  auto& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  const double peak = peakRssMb();
  giveBackFreedMemory();
  const double end = currentRssMb();
  p.peak_before = std::max(p.peak_before, peak);
  if (std::uncaught_exceptions() > exceptions_ && p.failed.empty()) p.failed = name_;
  p.current = outer_;
  appendLog(name_, start_rss_mb_, peak, end, start_file_mb_);
}

void addLibraryBytes(int64_t bytes) {
  auto& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  p.library_bytes += bytes;
}

void setKeptMemory(std::function<KeptMemory()> kept) {
  auto& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  p.kept = std::move(kept);
}

std::vector<PhaseRecord> memoryPhases() {
  auto& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.ended;
}

double currentRssMb() {
  return statusMb("VmRSS:");
}

double processPeakRssMb() {
  auto& p = phases();
  std::lock_guard<std::mutex> lock(p.mu);
  return std::max(p.peak_before, peakRssMb());
}

std::string describeOutOfMemory(const std::string& what) {
  // LibTorch's CPU allocator: "can't allocate memory: you tried to allocate N bytes"; its CUDA
  // allocator: "CUDA out of memory. Tried to allocate 2.00 GiB".
  static const std::regex cpu("you tried to allocate ([0-9]+) bytes");
  static const std::regex cuda("out of memory\\. Tried to allocate ([0-9.]+ [KMG]iB)");
  std::smatch m;
  std::string asked;
  if (std::regex_search(what, m, cpu))
    asked = fmt::format("an allocation of {} bytes ({})", m[1].str(), mib(std::stod(m[1].str())));
  else if (std::regex_search(what, m, cuda))
    asked = fmt::format("a device allocation of {}", m[1].str());
  else if (what == "std::bad_alloc")
    asked = "an allocation";
  else
    return "";
  std::string phase;
  {
    auto& p = phases();
    std::lock_guard<std::mutex> lock(p.mu);
    phase = !p.failed.empty() ? p.failed : p.current;
  }
  return fmt::format("out of memory{}: {} failed with {:.0f} MiB resident (peak {:.0f} MiB); {}",
                     phase.empty() ? "" : " in phase " + phase, asked, currentRssMb(),
                     processPeakRssMb(), memoryLimit());
}

}  // namespace ltrain
