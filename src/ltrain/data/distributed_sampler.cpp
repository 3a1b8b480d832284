#include "ltrain/data/distributed_sampler.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <numeric>

#include "ltrain/common/errors.h"

namespace ltrain::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t world_size, int64_t rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : n_(dataset_size),
      world_(world_size),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (world_ < 1 || rank_ < 0 || rank_ >= world_)
    throw UsageError(fmt::format("sampler: rank {} is outside world size {}", rank_, world_));
  if (drop_last_ && n_ % world_ != 0) {
    num_samples_ = (n_ - world_ + world_ - 1) / world_;  // ceil((N - W) / W), as PyTorch
  } else {
    num_samples_ = (n_ + world_ - 1) / world_;
  }
  total_size_ = num_samples_ * world_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t consumed) const {
  std::vector<int64_t> all(n_);
  if (shuffle_) {
    auto gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
    auto perm = torch::randperm(n_, gen, torch::kLong);
    std::copy_n(perm.data_ptr<int64_t>(), n_, all.begin());
  } else {
    std::iota(all.begin(), all.end(), 0);
  }
  // The positions ranks already took (strided dealing takes a prefix of the list) are gone; the
  // rest is padded by repeating the list from its start (possibly several times) to a multiple
  // of the world size, or truncated to one with drop_last. With nothing consumed this is
  // exactly PyTorch's padding to total_size.
  std::vector<int64_t> rest(all.begin() + std::min(consumed, n_), all.end());
  const auto left = static_cast<int64_t>(rest.size());
  if (!drop_last_) {
    for (int64_t i = 0; static_cast<int64_t>(rest.size()) % world_ != 0; ++i)
      rest.push_back(all[i % n_]);
  } else {
    rest.resize(left / world_ * world_);
  }
  std::vector<int64_t> mine;
  mine.reserve(rest.size() / world_);
  for (size_t i = static_cast<size_t>(rank_); i < rest.size(); i += static_cast<size_t>(world_))
    mine.push_back(rest[i]);
  return mine;
}

}  // namespace ltrain::data
