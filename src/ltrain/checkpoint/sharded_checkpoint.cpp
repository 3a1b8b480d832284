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
#include "ltrain/io/crc32c.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"

namespace ltrain::checkpoint {
namespace fs = std::filesystem;
namespace {

// What the checkpoint holds of each component's names: numbers from index.json's "loop",
// tensors from rank 0's file ("state.<name>"; "rng.cpu" and "rng.cuda" before components had
// names of their own).
std::vector<StateDict> readComponents(const io::Json& loop, const io::SafetensorsFile& rank0,
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
      std::string key = "state." + name;
      if (!rank0.find(key) && name.rfind("rng_", 0) == 0) key = "rng." + name.substr(4);
      if (rank0.find(key)) got.emplace_back(name, rank0.read(key));
    }
    out.push_back(std::move(got));
  }
  return out;
}

// A deferred model's values from a sharded checkpoint: of each parameter, the elements this rank
// keeps, from whichever rank files hold them.
class CheckpointValues final : public models::DeferredValues {
 public:
  CheckpointValues(std::shared_ptr<const ShardedCheckpointReader> ckpt,
                   std::vector<std::string> prefixes)
      : ckpt_(std::move(ckpt)), prefixes_(std::move(prefixes)) {}
  void fill(size_t layer, torch::nn::Module& target,
            const models::WantedElements& wanted) override {
    torch::NoGradGuard no_grad;
    for (const auto& p : target.named_parameters()) {
      const auto [begin, end] = wanted(p.value());
      if (end <= begin) continue;
      p.value()
          .view(-1)
          .narrow(0, begin, end - begin)
          .copy_(ckpt_->read(prefixes_.at(layer) + p.key(), "param", begin, end));
    }
  }

 private:
  std::shared_ptr<const ShardedCheckpointReader> ckpt_;
  std::vector<std::string> prefixes_;
};

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

ShardedCheckpointReader::ShardedCheckpointReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (!fs::is_regular_file(path_ + "/index.json", ec))
    fail("is incomplete: it has no index.json (written last, once every rank's part is in)");
  const io::Json idx = io::readJsonFile(path_ + "/index.json");
  try {
    if (idx.value("format", "") != kShardedCheckpointFormat)
      fail("is not an ltrain sharded checkpoint");
    world_ = idx.at("world_size");
    if (world_ < 1) fail("is corrupt: index.json's world_size is below 1");
    for (int64_t k = 0; k < world_; ++k) {
      const std::string file = path_ + "/" + shardedRankFile(k, world_);
      if (!fs::is_regular_file(file, ec)) fail("lacks " + shardedRankFile(k, world_));
      if (idx.contains("files")) verify(file, idx.at("files").at(static_cast<size_t>(k)));
      files_.push_back(std::make_unique<io::SafetensorsFile>(file));
    }
    const auto& units = idx.at("units");
    for (size_t k = 0; k < units.size(); ++k) {
      const auto& u = units[k];
      Unit unit;
      unit.padded = u.at("padded");
      unit.step = u.at("optimizer_step");
      if (unit.padded < 0 || unit.padded % world_ != 0)
        fail(fmt::format("is corrupt: unit {}'s length {} is not a multiple of {}", k, unit.padded,
                         world_));
      std::vector<std::string> keys{"param"};
      for (const std::string name : u.at("optimizer_states"))
        unit.states.push_back(name), keys.push_back(name);
      for (const auto& key : keys)  // every rank's file holds 1/world of each of the unit's tensors
        for (const auto& f : files_) {
          const auto* e = f->find(fmt::format("u{}.{}", k, key));
          if (!e) fail(fmt::format("is corrupt: a rank's file has no 'u{}.{}'", k, key));
          if (e->shape.size() != 1 || e->numel * world_ != unit.padded)
            fail(fmt::format("is corrupt: a rank's 'u{}.{}' is not 1/{} of the unit", k, key,
                             world_));
          if (key == "param" && !c10::isFloatingType(e->dtype))
            fail(fmt::format("is corrupt: unit {}'s parameters are not floating point", k));
        }
      for (const auto& p : u.at("params")) {
        Param param;
        param.unit = k;
        param.offset = p.at("offset");
        param.shape = p.at("shape").get<std::vector<int64_t>>();
        param.numel = c10::multiply_integers(param.shape);
        if (param.offset < 0 || param.numel < 0 || param.offset + param.numel > unit.padded)
          fail(fmt::format("is corrupt: '{}' lies outside its unit",
                           p.at("name").get<std::string>()));
        params_[p.at("name").get<std::string>()] = std::move(param);
      }
      units_.push_back(std::move(unit));
    }
    loop_ = idx.at("loop");
  } catch (const io::Json::exception& e) {
    fail(fmt::format("is corrupt: index.json: {}", e.what()));
  }
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

// Before anything of it is read: its size and CRC-32C as index.json recorded them when it was
// written (checkpoints from before the sums were recorded have none to check).
void ShardedCheckpointReader::verify(const std::string& file, const io::Json& recorded) const {
  const std::string name = fs::path(file).filename().string();
  if (recorded.at("name") != name)
    fail(fmt::format("is corrupt: index.json lists '{}' where '{}' belongs",
                     recorded.at("name").get<std::string>(), name));
  const int64_t bytes = static_cast<int64_t>(fs::file_size(file)), want = recorded.at("bytes");
  if (bytes != want)
    fail(fmt::format("is damaged: {} is {} bytes, index.json records {}", name, bytes, want));
  const uint32_t crc = io::crc32cOfFile(file), want_crc = recorded.at("crc32c");
  if (crc != want_crc)
    fail(
        fmt::format("is damaged: {} does not match its checksum (crc32c {:08x}, written as "
                    "{:08x})",
                    name, crc, want_crc));
}

void ShardedCheckpointReader::fail(const std::string& why) const {
  throw UsageError(fmt::format("checkpoint '{}' {}", path_, why));
}

std::vector<StateDict> ShardedCheckpointReader::check(const torch::nn::Module& model,
                                                      const torch::optim::Optimizer* opt,
                                                      const Components& parts) const {
  const auto named = model.named_parameters();
  for (const auto& p : named) {
    auto it = params_.find(p.key());
    if (it == params_.end()) fail(fmt::format("is from another model: it has no '{}'", p.key()));
    if (!p.value().sizes().equals(it->second.shape))
      fail(fmt::format("is from another model: '{}' has shape [{}] there, this model's is [{}]",
                       p.key(), fmt::join(it->second.shape, ", "),
                       fmt::join(p.value().sizes(), ", ")));
  }
  if (params_.size() != named.size())
    fail(fmt::format("is from another model: it has {} parameters, this model {}", params_.size(),
                     named.size()));
  for (const auto& b : model.named_buffers()) {
    const auto* e = files_[0]->find("buffer." + b.key());
    if (!e || !b.value().sizes().equals(e->shape))
      fail(fmt::format("is from another model: buffer '{}' is missing or shaped otherwise",
                       b.key()));
  }
  if (opt) {  // the state names must be this optimizer's
    std::set<std::string> want;
    if (dynamic_cast<const torch::optim::SGD*>(opt)) want = {"momentum_buffer"};
    if (dynamic_cast<const torch::optim::Adam*>(opt) ||
        dynamic_cast<const torch::optim::AdamW*>(opt))
      want = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    for (const auto& u : units_)
      for (const auto& name : u.states)
        if (!want.count(name))
          fail(fmt::format("holds another optimizer's state ('{}'), not this run's optimizer's",
                           name));
  }
  std::vector<StateDict> states;
  try {
    states = readComponents(loop_, *files_[0], parts);
    for (size_t i = 0; i < parts.size(); ++i) parts[i]->check(states[i]);
  } catch (const io::Json::exception& e) {
    fail(fmt::format("is corrupt: index.json's loop: {}", e.what()));
  } catch (const c10::Error& e) {  // a number too large for its type, say
    fail(fmt::format("is corrupt: index.json's loop: {}", e.what_without_backtrace()));
  } catch (const UsageError&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(fmt::format("is unusable: {}", e.what()));
  }
  return states;
}

torch::Tensor ShardedCheckpointReader::read(const std::string& name, const std::string& what,
                                            int64_t begin, int64_t end) const {
  const Param& p = params_.at(name);
  const Unit& u = units_[p.unit];
  const int64_t n = u.padded / world_;
  const std::string key = fmt::format("u{}.{}", p.unit, what);
  std::vector<torch::Tensor> pieces;
  for (int64_t at = p.offset + begin, stop = p.offset + end; at < stop;) {
    const int64_t r = at / n, upto = std::min(stop, (r + 1) * n);
    pieces.push_back(files_[static_cast<size_t>(r)]->read(key, at - r * n, upto - at));
    at = upto;
  }
  if (pieces.empty())
    return torch::empty({0}, torch::TensorOptions().dtype(files_[0]->find(key)->dtype));
  return pieces.size() == 1 ? pieces[0] : torch::cat(pieces);
}

const std::vector<std::string>& ShardedCheckpointReader::stateNames(const std::string& name) const {
  return units_[params_.at(name).unit].states;
}

int64_t ShardedCheckpointReader::optimizerStep(const std::string& name) const {
  return units_[params_.at(name).unit].step;
}

torch::Tensor ShardedCheckpointReader::buffer(const std::string& name) const {
  return files_[0]->read("buffer." + name);
}

std::shared_ptr<const ShardedCheckpointReader> resumeDeferred(const std::string& path,
                                                              models::Classifier& model,
                                                              const torch::optim::Optimizer& opt,
                                                              const Components& parts) {
  auto ckpt = std::make_shared<const ShardedCheckpointReader>(path);
  const auto states = ckpt->check(*model, &opt, parts);
  std::vector<torch::Tensor> buffers;
  for (const auto& b : model->named_buffers()) buffers.push_back(ckpt->buffer(b.key()));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parts.size(); ++i) parts[i]->load(states[i]);
  size_t k = 0;
  for (auto& b : model->named_buffers()) b.value().copy_(buffers[k++]);
  std::vector<std::string> prefixes;
  for (size_t i = 0; i < model->layers->size(); ++i) prefixes.push_back(model->layerPrefix(i));
  model->deferred = std::make_shared<CheckpointValues>(ckpt, std::move(prefixes));
  return ckpt;
}

PlanState::RangeSource rangeSource(std::shared_ptr<const ShardedCheckpointReader> r) {
  PlanState::RangeSource s;
  s.state_names = [r](const std::string& p) { return r->stateNames(p); };
  s.step = [r](const std::string& p) { return r->optimizerStep(p); };
  s.read = [r](const std::string& p, const std::string& what, int64_t b, int64_t e) {
    return r->read(p, what, b, e);
  };
  return s;
}

void loadShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                           torch::optim::Optimizer* opt, const Components& parts) {
  const ShardedCheckpointReader ckpt(path);
  // Everything checked before anything is copied: a checkpoint refused changes nothing.
  const auto states = ckpt.check(model, opt, parts);
  const auto named = model.named_parameters();
  std::vector<torch::Tensor> values;
  try {
    for (const auto& p : named) values.push_back(ckpt.read(p.key(), "param", 0, p.value().numel()));
  } catch (const c10::Error& e) {
    throw UsageError(
        fmt::format("checkpoint '{}' is corrupt: {}", path, e.what_without_backtrace()));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parts.size(); ++i) parts[i]->load(states[i]);
  for (size_t i = 0; i < named.size(); ++i)
    named[i].value().copy_(values[i].view(named[i].value().sizes()));
  for (auto& b : model.named_buffers()) b.value().copy_(ckpt.buffer(b.key()));
  if (!opt) return;
  for (auto& p : named) {
    distributed::ParamState st;
    st.step = ckpt.optimizerStep(p.key());
    for (const auto& sname : ckpt.stateNames(p.key()))
      st.tensors.emplace_back(
          sname, ckpt.read(p.key(), sname, 0, p.value().numel()).view(p.value().sizes()));
    if (!st.tensors.empty()) distributed::writeParamState(*opt, p.value(), st);
  }
}

}  // namespace ltrain::checkpoint
