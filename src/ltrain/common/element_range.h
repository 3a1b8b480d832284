// Element ranges of flat layouts (ZeRO's buckets, a sharded checkpoint's units): a rank's equal
// slice of a layout, and which elements of a tensor placed at an offset in it fall into a range.
// Every sharding path clamps the same way through these two.
#pragma once
#include <algorithm>
#include <cstdint>

namespace ltrain {

struct ElementRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
};

// Rank `rank`'s slice of a layout `padded` long (a multiple of `world`): [rank n, (rank + 1) n).
inline ElementRange rankSlice(int64_t padded, int64_t rank, int64_t world) {
  const int64_t n = padded / world;
  return {rank * n, (rank + 1) * n};
}

// Of a tensor of `numel` elements at `offset` in the layout, the elements (its own indices, in
// [0, numel)) that lie in `window`; empty when none do.
inline ElementRange overlap(const ElementRange& window, int64_t offset, int64_t numel) {
  return {std::clamp(window.begin - offset, int64_t{0}, numel),
          std::clamp(window.end - offset, int64_t{0}, numel)};
}

}  // namespace ltrain
