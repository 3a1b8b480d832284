// How one full bucket of gradients is reduced, as c10d's DDP communication hooks decide it
// (allreduce_hook, fp16_compress_hook, bf16_compress_hook; a reduce-scatter for the sharded
// optimizers): the bucket reducer (bucket_reducer.h) lays the buckets out, tracks which gradients
// are ready and writes them, already divided by the world size, into a bucket's buffer; the
// collective picks the dtype they travel in and the buffer's length, and starts the reduction.
#pragma once
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <optional>

#include "ltrain/config/modes.h"

namespace ltrain::distributed {

class ProcessGroup;

class BucketCollective {
 public:
  virtual ~BucketCollective() = default;
  // The dtype gradients of `param_type` travel in.
  virtual torch::ScalarType wireType(torch::ScalarType param_type) const = 0;
  // The buffer's length for `numel` values.
  virtual int64_t bufferLength(int64_t numel) const = 0;
  // Whether each rank receives only its 1/world slice of the sum (in `shard`, bufferLength/world
  // long) rather than the whole sum in `buffer`.
  virtual bool scatters() const = 0;
  virtual c10::intrusive_ptr<c10d::Work> launch(torch::Tensor& buffer, torch::Tensor& shard) = 0;
};

// The sum over ranks in place, in `wire` when set (dist.grad_compression's bf16 or fp16), else in
// the parameters' dtype.
std::shared_ptr<BucketCollective> allReduceBuckets(ProcessGroup& pg,
                                                   std::optional<torch::ScalarType> wire = {});
// This rank's slice of the sum (ZeRO), the buffer padded with zeros to a multiple of the world size
// so that every rank's slice is equal; in `wire` when set (dist.reduce_dtype).
std::shared_ptr<BucketCollective> reduceScatterBuckets(ProcessGroup& pg,
                                                       std::optional<torch::ScalarType> wire = {});
// dist.grad_compression's wire dtype; none for kNone.
std::optional<torch::ScalarType> compressedType(config::Compression c);

}  // namespace ltrain::distributed
