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

LoopState loopFromJson(const io::Json& j) {
  LoopState s;
  s.step = j.at("step"), s.epoch = j.at("epoch"), s.batch_in_epoch = j.at("batch_in_epoch");
  s.samples = j.at("samples"), s.loss_scale = j.at("loss_scale");
  s.scale_growth_tracker = j.at("scale_growth_tracker"), s.skipped_steps = j.at("skipped_steps");
  s.epoch_loss_sum = j.at("epoch_loss_sum"), s.epoch_loss_count = j.at("epoch_loss_count");
  s.epoch_examples = j.at("epoch_examples"), s.world_size = j.at("world_size");
  return s;
}

void setGeneratorState(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
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

LoopState loadShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                                torch::optim::Optimizer* opt, torch::Device device) {
  auto fail = [&](const std::string& why) -> void {
    throw UsageError(fmt::format("checkpoint '{}' {}", path, why));
  };
  std::error_code ec;
  if (!fs::is_regular_file(path + "/index.json", ec))
    fail("is incomplete: it has no index.json (written last, once every rank's part is in)");
  const io::Json idx = io::readJsonFile(path + "/index.json");
  LoopState loop;
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
    loop = loopFromJson(idx.at("loop"));
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
  // A resume (an optimizer to fill) takes the generators' states too; a model alone does not.
  auto rng = files[0].find("rng.cpu");
  if (opt && rng == files[0].end()) fail("is corrupt: rank 0's file has no generator state");
  for (const auto& [name, t] : params)
    if (t.scalar_type() != torch::kFloat && t.scalar_type() != torch::kBFloat16 &&
        t.scalar_type() != torch::kHalf && t.scalar_type() != torch::kDouble)
      fail(fmt::format("is corrupt: '{}' is not floating point", name));
  // The generators' states are checked before anything is copied: a refused load changes nothing.
  auto rng_cuda = files[0].find("rng.cuda");
  auto checkRng = [&](const char* key, const torch::Tensor& t, at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    const int64_t bytes = gen.get_state().numel();
    if (t.scalar_type() != torch::kByte || t.numel() != bytes)
      fail(fmt::format("is corrupt: '{}' is not a generator state of {} bytes", key, bytes));
  };
  if (opt) checkRng("rng.cpu", rng->second, at::detail::getDefaultCPUGenerator());
  if (opt && device.is_cuda() && rng_cuda != files[0].end())
    checkRng("rng.cuda", rng_cuda->second, at::globalContext().defaultGenerator(device));
  torch::NoGradGuard no_grad;
  for (auto& p : named) p.value().copy_(params.at(p.key()));
  for (auto& b : model.named_buffers()) b.value().copy_(files[0].at("buffer." + b.key()));
  if (!opt) return loop;
  for (auto& p : named) {
    const auto& st = states.at(p.key());
    if (!st.tensors.empty()) distributed::writeParamState(*opt, p.value(), st);
  }
  setGeneratorState(at::detail::getDefaultCPUGenerator(), rng->second);
  if (device.is_cuda() && rng_cuda != files[0].end())
    setGeneratorState(at::globalContext().defaultGenerator(device), rng_cuda->second);
  return loop;
}

}  // namespace ltrain::checkpoint
