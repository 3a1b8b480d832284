// The index order of torch.utils.data.DistributedSampler, reproduced exactly: the same generator
// (CPU MT19937 seeded with seed + epoch), the same randperm, padding, truncation and striding.
#pragma once
#include <cstdint>
#include <vector>

namespace ltrain::data {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t world_size, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  void setEpoch(int64_t epoch) { epoch_ = epoch; }
  int64_t numSamples() const { return num_samples_; }  // indices this rank gets per epoch
  // This rank's indices of the epoch. `consumed`: the epoch's first positions that every rank of
  // the run together already took (by a run that may have had another world size: a resume on
  // more or fewer processes); the rest is dealt out over this world size, so that no example of
  // the epoch is skipped or repeated beyond the padding.
  std::vector<int64_t> indices(int64_t consumed = 0) const;

 private:
  int64_t n_, world_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_, total_size_;
};

}  // namespace ltrain::data
