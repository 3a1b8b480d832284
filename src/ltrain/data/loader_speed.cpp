#include "ltrain/data/loader_speed.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "ltrain/common/errors.h"
#include "ltrain/data/distributed_sampler.h"
#include "ltrain/data/loader.h"

namespace ltrain::data {

LoaderSpeed measureLoader(const config::LoadedConfig& lc, int64_t max_batches) {
  const auto& cfg = lc.cfg;
  if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
  auto splits = data::loadDataset(cfg.data, static_cast<uint64_t>(cfg.seed), cfg.model.block_size,
                                  cfg.model.vocab_size);
  auto& train = splits.train;
  // Rank 0 of one process, epoch 0: the order and augmentation draws training would use.
  data::DistributedSampler sampler(train.size(), 1, 0, cfg.data.shuffle,
                                   static_cast<uint64_t>(cfg.seed), cfg.data.drop_last);
  if (train.source) train.source->setEpoch(0);
  data::Loader loader(
      train, sampler.indices(), cfg.data.batch_size, cfg.data.drop_last, cfg.data.num_workers,
      cfg.data.prefetch, 0, false,
      data::Augment{cfg.data.augment == config::Augment::kCropFlip, cfg.data.augment_pad,
                    data::augmentSeed(static_cast<uint64_t>(cfg.seed), 0, 0)});
  const int64_t n =
      max_batches > 0 ? std::min(max_batches, loader.numBatches()) : loader.numBatches();
  if (n < 2)
    throw UsageError(
        "loader-speed: the epoch has fewer than 2 batches to time (more data or a "
        "smaller data.batch_size)");
  data::Batch b;
  loader.next(b);  // the first batch waits for the threads to start: left out
  LoaderSpeed s;
  const auto t0 = std::chrono::steady_clock::now();
  while (s.batches + 1 < n && loader.next(b)) s.batches++, s.examples += b.inputs.size(0);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace ltrain::data
