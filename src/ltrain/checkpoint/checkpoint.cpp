#include "ltrain/checkpoint/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <regex>

#include "ltrain/checkpoint/sharded_checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/io/checksummed_file.h"
#include "ltrain/io/files.h"
#include "ltrain/optim/fused.h"

namespace ltrain::checkpoint {
namespace {

constexpr std::string_view kMagic("LTCKPT1\n", 8);

// One line of an exception's message (torch's compiler errors quote the offending code below).
std::string firstLine(const std::string& what) {
  return what.substr(0, what.find('\n'));
}

// Reads and verifies the whole file before torch's reader sees a byte of it; the error names the
// file and says what is wrong with it.
void openArchive(const std::string& path, torch::serialize::InputArchive& ar, std::string& bytes) {
  try {
    bytes = io::readFile(path);
    auto payload = io::verifyChecksummed(bytes, kMagic, "an ltrain checkpoint");
    // Onto the CPU whatever device wrote it: the model is placed, and the optimizer state moved
    // next to its parameters, afterwards (a GPU run's checkpoint also evaluates without a GPU).
    ar.load_from(payload.data(), payload.size(), torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw UsageError(fmt::format("checkpoint '{}' cannot be read: {}", path,
                                 firstLine(e.what_without_backtrace())));
  } catch (const std::exception& e) {  // the frame's checks, or torch's reader and its compiler
    throw UsageError(fmt::format("checkpoint '{}' is unusable: {}", path, firstLine(e.what())));
  }
}

// torch's archive reader swaps each tensor's storage in place, whatever its shape. A checkpoint
// of another model must neither slip in that way nor leave the model half replaced (a fallback to
// an older checkpoint compares against the model's own shapes), so the load is guarded: on a
// mismatch every tensor gets its own storage back.
class GuardedLoad {
 public:
  explicit GuardedLoad(torch::nn::Module& m) {
    for (auto& p : m.named_parameters()) keep(p.key(), p.value());
    for (auto& b : m.named_buffers()) keep(b.key(), b.value());
  }
  void check(const std::string& path) {
    for (const auto& e : entries_)
      if (!e.live.sizes().equals(e.before.sizes())) {
        const std::string msg = fmt::format(
            "checkpoint '{}' is from another model: '{}' has shape [{}] there, this config's "
            "model expects [{}]",
            path, e.name, fmt::join(e.live.sizes(), ", "), fmt::join(e.before.sizes(), ", "));
        restore();
        throw UsageError(msg);
      }
  }
  void restore() {
    torch::NoGradGuard no_grad;
    for (auto& e : entries_) e.live.set_(e.before);
  }

 private:
  struct Entry {
    std::string name;
    torch::Tensor live, before;  // `before`: another handle on the original storage and sizes
  };
  void keep(const std::string& name, const torch::Tensor& t) {
    entries_.push_back({name, t, t.detach()});
  }
  std::vector<Entry> entries_;
};

// The archive's "model" part into `model`, refused (and undone) when it is another model's.
void loadModel(torch::serialize::InputArchive& ar, torch::nn::Module& model,
               const std::string& path) {
  torch::serialize::InputArchive model_ar;
  ar.read("model", model_ar);
  GuardedLoad guard(model);
  try {
    model.load(model_ar);
  } catch (...) {
    guard.restore();
    throw;
  }
  guard.check(path);
}

// Each component's entries that the archive holds, under the names the component gives them.
std::vector<StateDict> readComponents(torch::serialize::InputArchive& ar, const Components& parts) {
  std::vector<StateDict> out;
  for (const auto* part : parts) {
    StateDict got;
    for (const auto& [name, now] : part->state()) {
      torch::Tensor t;
      if (ar.try_read(name, t)) got.emplace_back(name, t);
    }
    out.push_back(std::move(got));
  }
  return out;
}

}  // namespace

StateDict LoopState::state() const {
  return {{"step", stateScalar(step)},
          {"epoch", stateScalar(epoch)},
          {"batch_in_epoch", stateScalar(batch_in_epoch)},
          {"samples", stateScalar(samples)},
          {"epoch_examples", stateScalar(epoch_examples)},
          {"world_size", stateScalar(world_size)}};
}

void LoopState::check(const StateDict& s) const {
  for (const char* name : {"step", "epoch", "batch_in_epoch", "samples"})
    stateInt(s, name, 0, /*required=*/true);
  stateInt(s, "epoch_examples", -1), stateInt(s, "world_size", 0);  // one number each, if there
}

void LoopState::load(const StateDict& s) {
  step = stateInt(s, "step", 0, true), epoch = stateInt(s, "epoch", 0, true);
  batch_in_epoch = stateInt(s, "batch_in_epoch", 0, true);
  samples = stateInt(s, "samples", 0, true);
  epoch_examples = stateInt(s, "epoch_examples", -1), world_size = stateInt(s, "world_size", 0);
}

std::string checkpointPath(const std::string& dir, int64_t step) {
  return fmt::format("{}/step-{:08d}.pt", dir, step);
}

std::vector<std::string> checkpointsNewestFirst(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return {};
  static const std::regex name(R"(step-(\d+)\.(pt|shards))");  // a file, or dist.zero 3's dir
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string fn = e.path().filename().string();
    if (std::regex_match(fn, m, name)) found.emplace_back(std::stoll(m[1]), e.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<std::string> newestCheckpoint(const std::string& dir) {
  auto all = checkpointsNewestFirst(dir);
  if (all.empty()) return std::nullopt;
  return all.front();
}

void pruneCheckpoints(const std::string& dir, int64_t keep) {
  if (keep <= 0) return;
  auto all = checkpointsNewestFirst(dir);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
    std::error_code ec;
    if (isShardedCheckpoint(all[i]))
      removeShardedCheckpoint(all[i]);  // its files only, never the user's
    else
      std::filesystem::remove(all[i], ec);
  }
}

void saveCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const Components& parts) {
  torch::serialize::OutputArchive ar, model_ar, opt_ar;
  model.save(model_ar);
  optim::syncStepsToHost(opt);  // Adam's step counts live on the device between checkpoints
  opt.save(opt_ar);
  ar.write("model", model_ar);
  ar.write("optimizer", opt_ar);
  for (const auto* part : parts)
    for (const auto& [name, t] : part->state()) ar.write(name, t.cpu());
  try {
    io::writeChecksummed(path, kMagic, [&](const io::ByteSink& sink) {
      // torch's zip writer must not see a failed write: neither an exception through its callback
      // nor a short write (its destructor then throws, which terminates). The first failure is
      // kept, the rest of the bytes are dropped, and the failure is raised once torch is done.
      std::exception_ptr failure;
      ar.save_to([&](const void* data, size_t size) -> size_t {
        if (failure) return size;
        try {
          sink(data, size);
        } catch (...) {
          failure = std::current_exception();
        }
        return size;
      });
      if (failure) std::rethrow_exception(failure);
    });
  } catch (const c10::Error& e) {
    throw std::runtime_error(
        fmt::format("cannot write checkpoint '{}': {}", path, e.what_without_backtrace()));
  } catch (const std::runtime_error& e) {
    // The previous checkpoints are untouched (atomic replace); say which file could not be made.
    throw std::runtime_error(fmt::format("cannot write checkpoint '{}': {}", path, e.what()));
  }
}

void loadCheckpointModel(const std::string& path, torch::nn::Module& model) {
  if (isShardedCheckpoint(path)) {
    loadShardedCheckpoint(path, model, nullptr, {});
    return;
  }
  try {
    torch::serialize::InputArchive ar;
    std::string bytes;
    openArchive(path, ar, bytes);
    loadModel(ar, model, path);
  } catch (const c10::Error& e) {
    throw UsageError(
        fmt::format("checkpoint '{}' cannot be loaded (corrupt, or from another model): {}", path,
                    firstLine(e.what_without_backtrace())));
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {  // torch's archive reader compiles code lazily
    throw UsageError(
        fmt::format("checkpoint '{}' cannot be loaded (corrupt): {}", path, firstLine(e.what())));
  }
}

void loadCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const Components& parts) {
  if (isShardedCheckpoint(path)) {
    loadShardedCheckpoint(path, model, &opt, parts);
    return;
  }
  try {
    torch::serialize::InputArchive ar, opt_ar;
    std::string bytes;
    openArchive(path, ar, bytes);
    // Every component read and checked before anything changes: a refused checkpoint leaves
    // the model and the components as they were.
    const auto states = readComponents(ar, parts);
    try {
      for (size_t i = 0; i < parts.size(); ++i) parts[i]->check(states[i]);
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("checkpoint '{}' is unusable: {}", path, e.what()));
    }
    loadModel(ar, model, path);
    ar.read("optimizer", opt_ar);
    opt.load(opt_ar);
    for (size_t i = 0; i < parts.size(); ++i) parts[i]->load(states[i]);
  } catch (const c10::Error& e) {
    const std::string why = firstLine(e.what_without_backtrace());
    // optimizer.decay matrices (the default for gpt and llama since it came) makes two groups;
    // checkpoints written before it, or with decay all, have one.
    if (why.find("different number of parameter groups") != std::string::npos)
      throw UsageError(fmt::format(
          "checkpoint '{}' holds an optimizer with other parameter groups than this run's "
          "({} here): optimizer.decay must be what it was (a gpt checkpoint from before "
          "optimizer.decay existed resumes with optimizer.decay=all)",
          path, opt.param_groups().size()));
    throw UsageError(
        fmt::format("checkpoint '{}' cannot be loaded (corrupt, or from another model or "
                    "optimizer): {}",
                    path, why));
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {  // torch's archive reader compiles code lazily
    throw UsageError(
        fmt::format("checkpoint '{}' cannot be loaded (corrupt): {}", path, firstLine(e.what())));
  }
}

}  // namespace ltrain::checkpoint
