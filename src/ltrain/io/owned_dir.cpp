#include "ltrain/io/owned_dir.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"

namespace fs = std::filesystem;

namespace ltrain::io {
namespace {

constexpr const char* kMarker = ".ltrain";

// What ltrain writes, relative to the directory; `*.tmp.*` are atomic writes cut short.
const std::vector<std::string>& patternsFor(DirKind kind) {
  // A trailing '/': a directory ltrain makes, removed once what it wrote there is gone.
  static const std::vector<std::string> run{
      "config.yaml", "overrides.txt", "metrics.jsonl", "summary.json", "report.html",
      "model.safetensors", "output.log", "vocabulary.json", "tokenizer.json", "*.tmp.*",
      "checkpoints/", "checkpoints/step-*.pt", "checkpoints/*.tmp.*",
      // dist.zero 3's sharded checkpoints, whole or partial
      "checkpoints/step-*.shards/", "checkpoints/step-*.shards.partial/",
      "checkpoints/step-*.shards.old/", "checkpoints/step-*.shards*/rank-*-of-*.safetensors",
      "checkpoints/step-*.shards*/index.json",
      "checkpoints/step-*.shards*/rank-*-of-*.safetensors.tmp.*",
      "checkpoints/step-*.shards*/index.json.tmp.*", "tensorboard/",
      "tensorboard/events.out.tfevents.*", "logs/", "logs/rank_*.log", "logs/error-*.json"};
  static const std::vector<std::string> sweep{"sweep.yaml",       "sweep_summary.csv",
                                              "sweep_summary.md", "sweep_report.html",
                                              "*.tmp.*",          "[0-9][0-9][0-9]-*/"};
  static const std::vector<std::string> hf_export{
      "config.json",    "generation_config.json", "model.safetensors",
      "tokenizer.json", "tokenizer_config.json",  "vocabulary.json",
      "*.tmp.*"};
  return kind == DirKind::kRun ? run : kind == DirKind::kSweep ? sweep : hf_export;
}

const char* kindName(DirKind kind) {
  return kind == DirKind::kRun ? "run" : kind == DirKind::kSweep ? "sweep" : "export";
}

// The marker's kind, or "" when there is none or it cannot be read.
std::string markerKind(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(dir) / kMarker, ec)) return "";
  const Json j = parseJsonOrDiscard(readFile((fs::path(dir) / kMarker).string()));
  if (!j.is_object() || !j.contains("ltrain") || !j["ltrain"].is_string()) return "";
  return j["ltrain"].get<std::string>();
}

std::vector<std::string> markerPatterns(const std::string& dir) {
  const Json j = parseJsonOrDiscard(readFile((fs::path(dir) / kMarker).string()));
  std::vector<std::string> out;
  if (j.is_object() && j.contains("owns") && j["owns"].is_array())
    for (const auto& p : j["owns"])
      if (p.is_string()) out.push_back(p.get<std::string>());
  return out;
}

bool matches(const std::vector<std::string>& patterns, const std::string& rel, bool is_dir) {
  for (const auto& p : patterns) {
    const bool dir_pattern = !p.empty() && p.back() == '/';
    if (dir_pattern != is_dir) continue;
    const std::string pat = dir_pattern ? p.substr(0, p.size() - 1) : p;
    if (fnmatch(pat.c_str(), rel.c_str(), FNM_PATHNAME) == 0) return true;
  }
  return false;
}

void removeUnder(const fs::path& root, const fs::path& dir, const std::vector<std::string>& owned,
                 const std::string& keep, std::vector<std::string>& kept) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string rel = fs::relative(e.path(), root, ec).string();
    if (dir == root && e.path().filename() == keep) continue;
    if (e.path().filename() == kMarker && dir == root) continue;
    const bool is_dir = e.is_directory(ec) && !e.is_symlink(ec);
    if (is_dir) {
      if (!matches(owned, rel, true)) {
        kept.push_back(rel + "/");  // not a directory ltrain makes: left whole
        continue;
      }
      if (hasMarker(e.path().string(), DirKind::kRun)) {
        // A run of its own inside (a sweep's trial): by that run's marker.
        const auto inner = removeOwned(e.path().string());
        for (auto& k : inner) kept.push_back(rel + "/" + k);
        if (inner.empty()) fs::remove(e.path() / kMarker, ec);  // a user's file keeps it ltrain's
      } else {
        removeUnder(root, e.path(), owned, keep, kept);
      }
      fs::remove(e.path(), ec);  // fails, and the directory stays, unless it is empty
      continue;
    }
    if (matches(owned, rel, false))
      fs::remove(e.path(), ec);
    else
      kept.push_back(rel);
  }
}

}  // namespace

bool hasMarker(const std::string& dir, DirKind kind) {
  return markerKind(dir) == kindName(kind);
}

void checkOwnable(const std::string& dir, DirKind kind) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec))
    throw UsageError(
        fmt::format("{} directory '{}' exists and is not a directory", kindName(kind), dir));
  const std::string marker = markerKind(dir);
  if (marker == kindName(kind)) return;
  if (!marker.empty())
    throw UsageError(
        fmt::format("'{}' is an ltrain {} directory, not a {} directory; choose "
                    "another directory",
                    dir, marker, kindName(kind)));
  std::vector<std::string> entries;
  // Another agent of the same job (each node's launcher, on a shared filesystem) may be writing
  // the marker right now: its temporary file is ltrain's, not a stranger's.
  const std::string marker_tmp = std::string(kMarker) + ".tmp.";
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(marker_tmp, 0) != 0)
      entries.push_back(e.path().filename());
  if (entries.empty()) return;
  // The marker may have been renamed into place between the check above and the listing (another
  // agent claiming the directory): it is looked for again before anything is called a stranger's.
  // Whoever claims writes the marker before any other file, so what the listing saw came after it.
  if (markerKind(dir) == kindName(kind)) return;
  std::sort(entries.begin(), entries.end());
  throw UsageError(fmt::format(
      "{} directory '{}' holds files that ltrain did not write ('{}'{}) and no ltrain marker "
      "({}); ltrain writes only into a new or empty directory or one it made: choose another",
      kindName(kind), dir, entries.front(),
      entries.size() > 1 ? fmt::format(" and {} more", entries.size() - 1) : "", kMarker));
}

void claimDir(const std::string& dir, DirKind kind) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    throw UsageError(fmt::format("cannot create {} directory '{}': {}", kindName(kind), dir,
                                 ec ? ec.message() : "not a directory"));
  if (hasMarker(dir, kind)) return;
  const Json marker = {{"ltrain", kindName(kind)}, {"owns", patternsFor(kind)}};
  try {
    writeFileAtomic((fs::path(dir) / kMarker).string(), marker.dump(1) + "\n");
  } catch (const std::runtime_error& e) {
    throw UsageError(
        fmt::format("{} directory '{}' is not writable: {}", kindName(kind), dir, e.what()));
  }
}

std::vector<std::string> removeOwned(const std::string& dir, const std::string& keep) {
  std::vector<std::string> kept;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return kept;
  const auto owned = markerPatterns(dir);
  if (owned.empty()) return kept;  // no marker: nothing is ltrain's to remove
  removeUnder(fs::path(dir), fs::path(dir), owned, keep, kept);
  return kept;
}

}  // namespace ltrain::io
