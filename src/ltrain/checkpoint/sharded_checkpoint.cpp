#include "ltrain/checkpoint/sharded_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"

namespace ltrain::checkpoint {
namespace fs = std::filesystem;
namespace {

// What the checkpoint holds of each component's names: numbers from index.json's "loop",
// tensors from rank 0's file ("state.<name>"; "rng.cpu" and "rng.cuda" before components had
// names of their own).
std::vector<StateDict> readComponents(const io::Json& loop,
                                      const std::map<std::string, torch::Tensor>& rank0,
                                      const Components& parts) {
  std::vector<StateDict> out;
  for (const auto* part : parts) {
    StateDict got;
    for (const auto& [name, now] : part->state()) {
      if (now.dim() == 0) {
        auto it = loop.find(name);
        if (it == loop.end()) continue;
        got.emplace_back(name, it->is_number_integer() ? stateScalar(it->get<int64_t>())
                                                       : stateScalar(it->get<double>()));
        continue;
      }
      auto it = rank0.find("state." + name);
      if (it == rank0.end() && name.rfind("rng_", 0) == 0) it = rank0.find("rng." + name.substr(4));
      if (it != rank0.end()) got.emplace_back(name, it->second);
    }
    out.push_back(std::move(got));
  }
  return out;
}

}  // namespace

const char* const kShardedCheckpointFormat = "ltrain sharded checkpoint 1";

std::string shardedRankFile(int64_t rank, int64_t world) {
  return fmt::format("rank-{:05d}-of-{:05d}.safetensors", rank, world);
}

std::string shardedCheckpointPath(const std::string& dir, int64_t step) {
  return fmt::format("{}/step-{:08d}.shards", dir, step);
}

void removeShardedCheckpoint(const std::string& dir) {
  // Its own names, and their atomic writes cut short (NAME.tmp.PID): nothing else matches.
  static const std::regex ours(R"((index\.json|rank-\d+-of-\d+\.safetensors)(\.tmp\.\d+)?)");
  std::error_code ec;
  // index.json first: a deletion cut short must not leave an index naming missing rank files.
  fs::remove(dir + "/index.json", ec);
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && std::regex_match(e.path().filename().string(), ours))
      fs::remove(e.path(), ec);
  fs::remove(dir, ec);  // only when empty
}

bool isShardedCheckpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

void loadShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                           torch::optim::Optimizer* opt, const Components& parts) {
  auto fail = [&](const std::string& why) -> void {
    throw UsageError(fmt::format("checkpoint '{}' {}", path, why));
  };
  std::error_code ec;
  if (!fs::is_regular_file(path + "/index.json", ec))
    fail("is incomplete: it has no index.json (written last, once every rank's part is in)");
  const io::Json idx = io::readJsonFile(path + "/index.json");
  std::vector<StateDict> component_states;
  std::map<std::string, torch::Tensor> params;
  std::map<std::string, distributed::ParamState> states;
  std::vector<std::map<std::string, torch::Tensor>> files;
  try {
    if (idx.value("format", "") != kShardedCheckpointFormat)
      fail("is not an ltrain sharded checkpoint");
    const int64_t world = idx.at("world_size");
    for (int64_t k = 0; k < world; ++k) {
      const std::string file = path + "/" + shardedRankFile(k, world);
      if (!fs::is_regular_file(file, ec)) fail("lacks " + shardedRankFile(k, world));
      files.push_back(io::loadSafetensors(file));
    }
    // Each unit's flat tensors, its ranks' slices end to end.
    auto join = [&](const std::string& key, int64_t padded) {
      std::vector<torch::Tensor> parts;
      for (auto& f : files) {
        auto it = f.find(key);
        if (it == f.end()) fail(fmt::format("is corrupt: a rank's file has no '{}'", key));
        if (it->second.dim() != 1 || it->second.numel() * world != padded)
          fail(fmt::format("is corrupt: a rank's '{}' is not 1/{} of the unit", key, world));
        parts.push_back(it->second);
      }
      auto flat = torch::cat(parts);
      if (flat.numel() != padded)
        fail(fmt::format("is corrupt: '{}' has {} elements over its ranks, expected {}", key,
                         flat.numel(), padded));
      return flat;
    };
    const auto& units = idx.at("units");
    for (size_t k = 0; k < units.size(); ++k) {
      const auto& u = units[k];
      const int64_t padded = u.at("padded");
      const auto flat = join(fmt::format("u{}.param", k), padded);
      std::vector<std::pair<std::string, torch::Tensor>> flat_states;
      for (const std::string name : u.at("optimizer_states"))
        flat_states.emplace_back(name, join(fmt::format("u{}.{}", k, name), padded));
      for (const auto& p : u.at("params")) {
        const std::string name = p.at("name");
        const std::vector<int64_t> shape = p.at("shape");
        const int64_t offset = p.at("offset");
        const int64_t numel = c10::multiply_integers(shape);
        params[name] = flat.narrow(0, offset, numel).view(shape);
        auto& st = states[name];
        st.step = u.at("optimizer_step");
        for (const auto& [sname, t] : flat_states)
          st.tensors.emplace_back(sname, t.narrow(0, offset, numel).view(shape));
      }
    }
    component_states = readComponents(idx.at("loop"), files[0], parts);
  } catch (const io::Json::exception& e) {
    fail(fmt::format("is corrupt: index.json: {}", e.what()));
  } catch (const c10::Error& e) {
    fail(fmt::format("is corrupt: {}", e.what_without_backtrace()));
  }

  // Everything checked before anything is copied: a checkpoint refused changes nothing.
  const auto named = model.named_parameters();
  for (const auto& p : named) {
    auto it = params.find(p.key());
    if (it == params.end()) fail(fmt::format("is from another model: it has no '{}'", p.key()));
    if (!it->second.sizes().equals(p.value().sizes()))
      fail(fmt::format("is from another model: '{}' has shape [{}] there, this model's is [{}]",
                       p.key(), fmt::join(it->second.sizes(), ", "),
                       fmt::join(p.value().sizes(), ", ")));
  }
  if (params.size() != named.size())
    fail(fmt::format("is from another model: it has {} parameters, this model {}", params.size(),
                     named.size()));
  for (const auto& b : model.named_buffers()) {
    auto it = files[0].find("buffer." + b.key());
    if (it == files[0].end() || !it->second.sizes().equals(b.value().sizes()))
      fail(fmt::format("is from another model: buffer '{}' is missing or shaped otherwise",
                       b.key()));
  }
  if (opt) {  // the state names must be this optimizer's
    std::set<std::string> want;
    if (dynamic_cast<torch::optim::SGD*>(opt)) want = {"momentum_buffer"};
    if (dynamic_cast<torch::optim::Adam*>(opt) || dynamic_cast<torch::optim::AdamW*>(opt))
      want = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    for (const auto& [name, st] : states)
      for (const auto& [sname, t] : st.tensors)
        if (!want.count(sname))
          fail(fmt::format("holds another optimizer's state ('{}'), not this run's optimizer's",
                           sname));
  }
  for (const auto& [name, t] : params)
    if (t.scalar_type() != torch::kFloat && t.scalar_type() != torch::kBFloat16 &&
        t.scalar_type() != torch::kHalf && t.scalar_type() != torch::kDouble)
      fail(fmt::format("is corrupt: '{}' is not floating point", name));
  try {
    for (size_t i = 0; i < parts.size(); ++i) parts[i]->check(component_states[i]);
  } catch (const c10::Error& e) {  // a number too large for its type, say
    fail(fmt::format("is corrupt: index.json's loop: {}", e.what_without_backtrace()));
  } catch (const std::runtime_error& e) {
    fail(fmt::format("is unusable: {}", e.what()));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parts.size(); ++i) parts[i]->load(component_states[i]);
  for (auto& p : named) p.value().copy_(params.at(p.key()));
  for (auto& b : model.named_buffers()) b.value().copy_(files[0].at("buffer." + b.key()));
  if (!opt) return;
  for (auto& p : named) {
    const auto& st = states.at(p.key());
    if (!st.tensors.empty()) distributed::writeParamState(*opt, p.value(), st);
  }
}

}  // namespace ltrain::checkpoint
