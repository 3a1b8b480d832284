// dist.zero 3's checkpoints written: every rank its own part at once (sharded_checkpoint.h).
#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "ltrain/checkpoint/sharded_checkpoint.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/io/crc32c.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"

namespace ltrain::checkpoint {
namespace fs = std::filesystem;
namespace {

// The components' states, taken once: their numbers for index.json ("loop"), their other
// tensors (the generators' states) for rank 0's file as "state.<name>".
struct ComponentStates {
  io::Json numbers = io::Json::object();
  io::NamedTensors tensors;
};

ComponentStates takeStates(const Components& parts) {
  ComponentStates out;
  for (const auto* part : parts)
    for (const auto& [name, t] : part->state()) {
      if (t.dim() > 0)
        out.tensors.emplace_back("state." + name, t.cpu());
      else if (t.is_floating_point())
        out.numbers[name] = t.item<double>();
      else
        out.numbers[name] = t.item<int64_t>();
    }
  return out;
}

// This rank's file: its slices, and on rank 0 what every rank has the same of (`states`).
void writeRankFile(const std::string& file, const std::vector<UnitShard>& units,
                   torch::nn::Module& model, const ComponentStates* states) {
  io::NamedTensors t;
  for (size_t k = 0; k < units.size(); ++k) {
    t.emplace_back(fmt::format("u{}.param", k), units[k].values);
    for (const auto& [name, st] : units[k].state)
      t.emplace_back(fmt::format("u{}.{}", k, name), st);
  }
  if (states) {
    for (const auto& b : model.named_buffers()) t.emplace_back("buffer." + b.key(), b.value());
    t.insert(t.end(), states->tensors.begin(), states->tensors.end());
  }
  io::saveSafetensors(file, t);  // a tensor at a time, each copied to the host as it is written
}

// A rank file's size and CRC-32C, which index.json records and a reader checks before anything
// loads (the .pt checkpoints' framing does the same for one file).
struct FileSum {
  int64_t bytes = 0;
  uint32_t crc = 0;
  static FileSum of(const std::string& file) {
    return {static_cast<int64_t>(fs::file_size(file)), io::crc32cOfFile(file)};
  }
};

io::Json indexJson(const std::vector<UnitShard>& units, const io::Json& numbers, int64_t world,
                   const std::vector<FileSum>& sums) {
  io::Json j{{"format", kShardedCheckpointFormat}, {"world_size", world}, {"loop", numbers}};
  j["files"] = io::Json::array();
  for (int64_t r = 0; r < world; ++r)
    j["files"].push_back({{"name", shardedRankFile(r, world)},
                          {"bytes", sums[static_cast<size_t>(r)].bytes},
                          {"crc32c", sums[static_cast<size_t>(r)].crc}});
  j["units"] = io::Json::array();
  for (const auto& u : units) {
    io::Json params = io::Json::array();
    for (const auto& p : u.params)
      params.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
    io::Json states = io::Json::array();
    for (const auto& [name, t] : u.state) states.push_back(name);
    j["units"].push_back({{"padded", u.padded},
                          {"optimizer_step", u.optimizer_step},
                          {"optimizer_states", states},
                          {"params", params}});
  }
  return j;
}

// Every rank learns whether all of them succeeded; the ones that did not say why.
void agree(distributed::ProcessGroup& pg, const std::string& path, const std::string& error) {
  const auto failed = pg.allreduceSum({error.empty() ? 0.0 : 1.0});
  if (failed[0] == 0) return;
  if (pg.runtime().isMain()) {
    removeShardedCheckpoint(path + ".partial");
  }
  throw std::runtime_error(
      error.empty() ? fmt::format("cannot write checkpoint '{}': another rank could not write its "
                                  "part (its log says why)",
                                  path)
                    : fmt::format("cannot write checkpoint '{}': {}", path, error));
}

}  // namespace

void saveShardedCheckpoint(const std::string& path, const std::vector<UnitShard>& units,
                           torch::nn::Module& model, const Components& parts,
                           distributed::ProcessGroup& pg) {
  const auto& rt = pg.runtime();
  const std::string partial = path + ".partial";
  std::string error;
  if (rt.isMain()) {
    std::error_code ec;
    removeShardedCheckpoint(partial);
    fs::create_directories(partial, ec);
    if (ec) error = fmt::format("cannot create '{}': {}", partial, ec.message());
  }
  agree(pg, path, error);
  ComponentStates states;  // rank 0's, which writes them
  FileSum mine;
  try {  // every rank at once
    if (rt.isMain()) states = takeStates(parts);
    const std::string file = partial + "/" + shardedRankFile(rt.rank, rt.world_size);
    writeRankFile(file, units, model, rt.isMain() ? &states : nullptr);
    mine = FileSum::of(file);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(pg, path, error);
  // Every rank's sums, for index.json: each rank fills its own places (exact in a double).
  std::vector<double> places(2 * static_cast<size_t>(rt.world_size), 0.0);
  places[2 * static_cast<size_t>(rt.rank)] = static_cast<double>(mine.bytes);
  places[2 * static_cast<size_t>(rt.rank) + 1] = static_cast<double>(mine.crc);
  places = pg.allreduceSum(places);
  std::vector<FileSum> sums;
  for (size_t r = 0; r < static_cast<size_t>(rt.world_size); ++r)
    sums.push_back({static_cast<int64_t>(places[2 * r]), static_cast<uint32_t>(places[2 * r + 1])});
  if (rt.isMain()) {
    try {
      io::writeFileAtomic(partial + "/index.json",
                          indexJson(units, states.numbers, rt.world_size, sums).dump(1) + "\n");
      // The same step saved again (a finished run relaunched): the old copy is moved aside, not
      // deleted, until the new one is in place, so a kill or a failed rename leaves one of them.
      const std::string old = path + ".old";
      const bool had = fs::exists(path);
      if (had) {
        removeShardedCheckpoint(old);
        fs::rename(path, old);
      }
      try {
        fs::rename(partial, path);
      } catch (...) {
        if (had) fs::rename(old, path);
        throw;
      }
      if (had) removeShardedCheckpoint(old);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(pg, path, error);
}

void saveAsShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                             const torch::optim::Optimizer& opt, const Components& parts) {
  std::vector<UnitShard> units;
  for (const auto& p : model.named_parameters()) {
    UnitShard u;
    u.params.push_back({p.key(), p.value().sizes().vec(), 0});
    u.padded = p.value().numel();
    u.values = p.value().detach().reshape(-1);
    distributed::ParamState st;
    if (distributed::readParamState(opt, p.value(), st)) {
      u.optimizer_step = st.step;
      for (const auto& [name, t] : st.tensors) u.state.emplace_back(name, t.reshape(-1));
    }
    units.push_back(std::move(u));
  }
  removeShardedCheckpoint(path);
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create '{}': {}", path, ec.message()));
  const auto states = takeStates(parts);
  const std::string file = path + "/" + shardedRankFile(0, 1);
  writeRankFile(file, units, model, &states);
  io::writeFileAtomic(path + "/index.json",
                      indexJson(units, states.numbers, 1, {FileSum::of(file)}).dump(1) + "\n");
}

}  // namespace ltrain::checkpoint
