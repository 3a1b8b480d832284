// dist.zero 3's checkpoints: a directory step-<N>.shards/ in which every rank writes its own part
// at the same time, and no rank gathers the model or the optimizer state to write it:
//   rank-<r>-of-<W>.safetensors  its slice of each unit's flattened parameters ("u<k>.param") and
//                                optimizer state ("u<k>.exp_avg", ...); rank 0's also holds the
//                                buffers ("buffer.<name>") and the components' tensors
//                                ("state.<name>": the random generators' states);
//   index.json                   written by rank 0 once every rank's file is in: the components'
//                                numbers ("loop": step, epoch, loss scale, ...), the world size,
//                                and each unit's layout (its parameters' names, shapes and offsets,
//                                its padded length), from which the slices are found again.
// The directory is written as step-<N>.shards.partial and renamed when complete: a crash or a full
// disk leaves no half checkpoint under a checkpoint's name.
// It is read back whole onto the host, as a .pt checkpoint is, so that it resumes under any zero
// stage and any world size.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <vector>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/distributed/parallel_plan.h"

namespace ltrain::distributed {
class ProcessGroup;
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
void saveShardedCheckpoint(const std::string& path,
                           const std::vector<distributed::UnitShard>& units,
                           torch::nn::Module& model, const Components& parts,
                           distributed::ProcessGroup& pg);

// Into `model`, `parts` and, when given, `opt` (CPU tensors, as loadCheckpoint gives).
// UsageError naming the checkpoint when it is incomplete, corrupt, or another model's or
// optimizer's; the model is then as it was.
void loadShardedCheckpoint(const std::string& path, torch::nn::Module& model,
                           torch::optim::Optimizer* opt, const Components& parts);

}  // namespace ltrain::checkpoint
