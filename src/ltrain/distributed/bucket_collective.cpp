#include "ltrain/distributed/bucket_collective.h"

#include "ltrain/distributed/process_group.h"

namespace ltrain::distributed {
namespace {

class AllReduce final : public BucketCollective {
 public:
  AllReduce(ProcessGroup& pg, std::optional<torch::ScalarType> wire) : pg_(pg), wire_(wire) {}
  torch::ScalarType wireType(torch::ScalarType param_type) const override {
    return wire_.value_or(param_type);
  }
  int64_t bufferLength(int64_t numel) const override { return numel; }
  bool scatters() const override { return false; }
  c10::intrusive_ptr<c10d::Work> launch(torch::Tensor& buffer, torch::Tensor&) override {
    std::vector<at::Tensor> io{buffer};
    return pg_.allreduce(io);
  }

 private:
  ProcessGroup& pg_;
  std::optional<torch::ScalarType> wire_;
};

class ReduceScatter final : public BucketCollective {
 public:
  ReduceScatter(ProcessGroup& pg, std::optional<torch::ScalarType> wire)
      : pg_(pg), world_(pg.runtime().world_size), wire_(wire) {}
  torch::ScalarType wireType(torch::ScalarType param_type) const override {
    return wire_.value_or(param_type);
  }
  // The padding's gradient stays 0.
  int64_t bufferLength(int64_t numel) const override {
    return (numel + world_ - 1) / world_ * world_;
  }
  bool scatters() const override { return true; }
  c10::intrusive_ptr<c10d::Work> launch(torch::Tensor& buffer, torch::Tensor& shard) override {
    return pg_.reduceScatterInto(shard, buffer);
  }

 private:
  ProcessGroup& pg_;
  int64_t world_;
  std::optional<torch::ScalarType> wire_;
};

}  // namespace

std::shared_ptr<BucketCollective> allReduceBuckets(ProcessGroup& pg,
                                                   std::optional<torch::ScalarType> wire) {
  return std::make_shared<AllReduce>(pg, wire);
}

std::shared_ptr<BucketCollective> reduceScatterBuckets(ProcessGroup& pg,
                                                       std::optional<torch::ScalarType> wire) {
  return std::make_shared<ReduceScatter>(pg, wire);
}

std::optional<torch::ScalarType> compressedType(config::Compression c) {
  switch (c) {
    case config::Compression::kBf16:
      return torch::kBFloat16;
    case config::Compression::kFp16:
      return torch::kHalf;
    case config::Compression::kNone:
      break;
  }
  return std::nullopt;
}

}  // namespace ltrain::distributed
