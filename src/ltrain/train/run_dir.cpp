#include "ltrain/train/run_dir.h"

#include <fmt/format.h>

#include <filesystem>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/config/emit.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/owned_dir.h"

namespace fs = std::filesystem;

namespace ltrain::train {

std::string runStatus(const std::string& run_dir) {
  std::error_code ec;
  const std::string p = run_dir + "/summary.json";
  if (!fs::exists(p, ec)) return "";
  const io::Json j = io::parseJsonOrDiscard(io::readFile(p));
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string()) return "unknown";
  return j["status"].get<std::string>();
}

RunDir prepareRunDir(const config::LoadedConfig& lc, const std::string& output_dir_flag,
                     bool overwrite, bool create, const std::string& keep) {
  const auto& cfg = lc.cfg;
  RunDir rd;
  rd.path = output_dir_flag.empty() ? cfg.output_dir + "/" + cfg.name : output_dir_flag;
  std::error_code ec;
  // A directory ltrain did not make (a user's files, another tool's config.yaml or summary.json)
  // is refused whole, before anything is read from it or written to it.
  io::checkOwnable(rd.path, io::DirKind::kRun);

  const std::string status = runStatus(rd.path);
  const auto newest = checkpoint::newestCheckpoint(rd.checkpoints());
  const bool explicit_ckpt = cfg.train.resume != "auto" && cfg.train.resume != "never";

  // A file, or the directory of a dist.zero 3 checkpoint (step-N.shards).
  if (explicit_ckpt && fs::is_directory(cfg.train.resume, ec) &&
      !fs::exists(cfg.train.resume + "/index.json", ec))
    throw UsageError(fmt::format(
        "train.resume: '{}' is a directory but no complete sharded checkpoint (it has no "
        "index.json, which rank 0 writes last)",
        cfg.train.resume));
  if (explicit_ckpt && !fs::exists(cfg.train.resume, ec))
    throw UsageError(fmt::format("train.resume: checkpoint file '{}' not found", cfg.train.resume));
  if (overwrite) {
    // Asked for: what ltrain wrote there goes (all but `keep`: the launcher's logs of this very
    // run); anything else stays, and the directory with it.
    if (create) io::removeOwned(rd.path, keep);
  } else if (status == "completed") {
    // How to go on from it, since a finished run is not continued in place.
    const std::string further =
        newest ? fmt::format(
                     "continue it into a new directory with a larger train.max_steps "
                     "(train.resume={} --output-dir NEW)",
                     *newest)
               : fmt::format(
                     "start a new run from its weights (model.init_from={}/"
                     "model.safetensors --output-dir NEW)",
                     rd.path);
    throw UsageError(
        fmt::format("run directory '{}' holds a finished run; pass --overwrite to replace "
                    "it, choose another --output-dir or name, or {}",
                    rd.path, further));
  } else if (newest && cfg.train.resume == "never") {
    throw UsageError(
        fmt::format("run directory '{}' holds checkpoints of an unfinished run; set "
                    "train.resume=auto to continue it or pass --overwrite to start again",
                    rd.path));
  } else if (newest && cfg.train.resume == "auto") {
    rd.resume_from = *newest;
    auto all = checkpoint::checkpointsNewestFirst(rd.checkpoints());
    rd.fallbacks.assign(all.begin() + 1, all.end());
  }
  if (explicit_ckpt) rd.resume_from = cfg.train.resume;

  if (create) {
    io::claimDir(rd.path, io::DirKind::kRun);
    fs::create_directories(rd.checkpoints(), ec);
    if (ec || !fs::is_directory(rd.checkpoints()))
      throw UsageError(fmt::format("cannot create run directory '{}': {}", rd.path, ec.message()));
    try {
      io::writeFileAtomic(rd.path + "/config.yaml", config::toYaml(cfg));
      std::string ov;
      for (const auto& o : lc.overrides) ov += o + "\n";
      io::writeFileAtomic(rd.path + "/overrides.txt", ov);
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("run directory '{}' is not writable: {}", rd.path, e.what()));
    }
  }
  return rd;
}

void saveVocabulary(const std::string& run_dir, const data::Splits& splits) {
  try {
    if (!splits.vocabulary_json.empty())
      io::writeFileAtomic(run_dir + "/vocabulary.json", splits.vocabulary_json);
    else if (!splits.tokenizer_file.empty())
      io::writeFileAtomic(run_dir + "/tokenizer.json", io::readFile(splits.tokenizer_file));
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("run directory '{}' is not writable: {}", run_dir, e.what()));
  }
}

}  // namespace ltrain::train
