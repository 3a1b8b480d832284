// dist.zero 3's checkpoints: a directory step-<N>.shards/ in which every rank writes its own part
// at the same time, and no rank gathers the model or the optimizer state to write it:
//   rank-<r>-of-<W>.safetensors  its slice of each unit's flattened parameters ("u<k>.param") and
//                                optimizer state ("u<k>.exp_avg", ...); rank 0's also holds the
//                                buffers ("buffer.<name>") and the components' tensors
//                                ("state.<name>": the random generators' states);
//   index.json                   written by rank 0 once every rank's file is in: the components'
//                                numbers ("loop": step, epoch, loss scale, ...), the world size,
//                                every rank file's size and CRC-32C ("files", checked before
//                                anything loads: a damaged file is named, and a resume takes the
//                                previous checkpoint),
//                                and each unit's layout (its parameters' names, shapes and offsets,
//                                its padded length), from which the slices are found again.
// The directory is written as step-<N>.shards.partial and renamed when complete: a crash or a full
// disk leaves no half checkpoint under a checkpoint's name.
// It is read by ranges (ShardedCheckpointReader): a rank of a dist.zero 3 run reads only the
// elements of its own slices, under any world size; loadShardedCheckpoint reads it whole onto the
// host, as a .pt checkpoint is, for any other strategy.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/checkpoint/plan_state.h"
#include "ltrain/io/json.h"
#include "ltrain/models/model.h"

namespace ltrain::distributed {
class ProcessGroup;
}
namespace ltrain::io {
class SafetensorsFile;
}

namespace ltrain::checkpoint {

// The format's name in index.json, and rank r's file of a world of w.
extern const char* const kShardedCheckpointFormat;
std::string shardedRankFile(int64_t rank, int64_t world);
// "<dir>/step-00000042.shards".
std::string shardedCheckpointPath(const std::string& dir, int64_t step);
bool isShardedCheckpoint(const std::string& path);
// Deletes what ltrain writes into a sharded checkpoint's directory (index.json, the rank files,
// their temporaries), then the directory if that left it empty: a file of the user's put there
// stays, and so does the directory holding it.
void removeShardedCheckpoint(const std::string& dir);

// Collective: every rank passes its units. std::runtime_error naming the directory (and, on the
// rank that failed, the file) when any rank cannot write; the previous checkpoints stay.
void saveShardedCheckpoint(const std::string& path, const std::vector<UnitShard>& units,
                           torch::nn::Module& model, const Components& parts,
                           distributed::ProcessGroup& pg);

// A whole model, its optimizer (state on the host) and the components written as a sharded
// checkpoint of one rank, each parameter a unit of its own (no copies): how dist.zero 3 resumes a
// whole .pt, which only the rank that reads it holds whole; every rank then reads its ranges.
void saveAsShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                             const torch::optim::Optimizer& opt, const Components& parts);

// A sharded checkpoint's index and its rank files' headers, checked (UsageError naming the
// checkpoint when it is incomplete or corrupt); tensors are read by element ranges, from whichever
// rank files hold them, and nothing else is read.
class ShardedCheckpointReader {
 public:
  explicit ShardedCheckpointReader(std::string path);
  ~ShardedCheckpointReader();
  // UsageError when it is another model's or optimizer's (`opt` may be null), or a component
  // refuses its state; returns the components' states, to load. Changes nothing.
  std::vector<StateDict> check(const torch::nn::Module& model, const torch::optim::Optimizer* opt,
                               const Components& parts) const;
  // Elements [begin, end) of parameter `name` (flattened): its values (what = "param") or an
  // optimizer state's ("exp_avg", ...), 1-d, of the stored dtype.
  torch::Tensor read(const std::string& name, const std::string& what, int64_t begin,
                     int64_t end) const;
  const std::vector<std::string>& stateNames(const std::string& name) const;
  int64_t optimizerStep(const std::string& name) const;
  torch::Tensor buffer(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  struct Unit {
    int64_t padded = 0, step = 0;
    std::vector<std::string> states;
  };
  struct Param {
    size_t unit = 0;
    int64_t offset = 0, numel = 0;
    std::vector<int64_t> shape;
  };
  [[noreturn]] void fail(const std::string& why) const;
  void verify(const std::string& file, const io::Json& recorded) const;
  std::string path_;
  int64_t world_ = 0;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::vector<Unit> units_;
  std::map<std::string, Param> params_;
  io::Json loop_;
};

// dist.zero 3's resume of a model built deferred: the checkpoint is checked against the model and
// `opt`, the components and buffers are loaded, and the model's deferred values read from it (a
// rank reads only its slices). Returns the reader, for the plan's optimizer state
// (PlanState::loadOptimizerRanges). UsageError as check()'s; nothing then changed.
std::shared_ptr<const ShardedCheckpointReader> resumeDeferred(const std::string& path,
                                                              models::Classifier& model,
                                                              const torch::optim::Optimizer& opt,
                                                              const Components& parts);
// The reader as the plan reads optimizer state.
PlanState::RangeSource rangeSource(std::shared_ptr<const ShardedCheckpointReader> r);

// Into `model`, `parts` and, when given, `opt` (CPU tensors, as loadCheckpoint gives).
// UsageError naming the checkpoint when it is incomplete, corrupt, or another model's or
// optimizer's; the model is then as it was.
void loadShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                           torch::optim::Optimizer* opt, const Components& parts);

}  // namespace ltrain::checkpoint
