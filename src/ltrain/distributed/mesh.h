// The ranks of a job as a dp x tp mesh (torchtitan's ParallelDims): consecutive ranks form a
// tensor-parallel group (on one host), and the ranks at the same place in each group form a
// data-parallel group. The trainer's data shard, evaluation's shard and the tensor-parallel
// plan's groups all ask it, instead of each dividing ranks its own way.
#pragma once
#include <cstdint>
#include <vector>

namespace ltrain::distributed {

struct Mesh {
  int64_t rank = 0, world = 1;
  int64_t tp = 1;  // ranks per tensor-parallel group

  int64_t dp() const { return world / tp; }  // data-parallel replicas
  int64_t dpRank() const { return rank / tp; }
  int64_t tpRank() const { return rank % tp; }
  // The ranks of this rank's tensor-parallel group, and of its data-parallel group.
  std::vector<int64_t> tpGroup() const {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < tp; ++i) r.push_back(dpRank() * tp + i);
    return r;
  }
  std::vector<int64_t> dpGroup() const {
    std::vector<int64_t> r;
    for (int64_t i = tpRank(); i < world; i += tp) r.push_back(i);
    return r;
  }
};

}  // namespace ltrain::distributed
