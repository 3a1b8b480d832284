// CPU tensors whose memory is mapped from the kernel when it is made and unmapped when it is
// freed, whatever its size: for the memory ZeRO takes and gives back within every step (a unit's
// gathered parameters, a bucket being reduced, the reduced gradient slices). From the heap, below
// the 32 MiB under which training keeps blocks there (allocator.h), what such a buffer gives back
// stays resident, and a rank's peak never falls by what its freeing saved (bench/RESULTS.md).
// Written here because LibTorch's CPU allocator has one policy for every tensor.
#pragma once
#include <torch/types.h>

#include "ltrain/common/tensor_memory.h"

namespace ltrain {

// Zeros (fresh pages are zero), on the CPU; elsewhere torch::zeros. Its storage keeps the mapping
// allocator, so memory given back and taken again (tensor_storage.h) is mapped again.
torch::Tensor mappedZeros(int64_t numel, const torch::TensorOptions& options);
// The same, counted as transient memory of `kind` until its owner frees it
// (tensor_storage.h's freeStorage with the same kind).
torch::Tensor mappedZeros(int64_t numel, const torch::TensorOptions& options, Transient kind);

}  // namespace ltrain
