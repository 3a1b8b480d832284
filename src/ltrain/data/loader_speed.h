// `ltrain loader-speed`: how fast the config's training batches are built, with no model: the
// training loader (its threads, prefetch, decoding and augmentation) run for one epoch or a number
// of batches, as a DataLoader is timed alone. Says whether data loading can keep a device fed.
#pragma once
#include <cstdint>

#include "ltrain/config/load.h"

namespace ltrain::data {

struct LoaderSpeed {
  int64_t batches = 0, examples = 0;
  double seconds = 0;  // from the first batch in hand to the last (the threads' start left out)
  double examplesPerSecond() const {
    return seconds > 0 ? static_cast<double>(examples) / seconds : 0;
  }
};

// `max_batches` 0: the whole epoch (at least two batches are timed).
LoaderSpeed measureLoader(const config::LoadedConfig& lc, int64_t max_batches);

}  // namespace ltrain::data
