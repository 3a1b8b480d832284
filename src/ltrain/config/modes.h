// The modes a config selects among (precision, placement, strategies, ...), as enums: parsed once
// when the config loads, so that no module compares option strings. Each enum's names are listed
// once, below; the schema takes its choices from them. Model families and datasets stay names:
// their registries (models/registry.cpp, data/dataset.cpp) dispatch on them.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <utility>

namespace ltrain::config {

enum class Precision { kFp32, kBf16, kFp16 };
enum class Placement { kSingle, kPipeline };
enum class Strategy { kDdp, kDp, kFsdp };
enum class FsdpUnit { kBlock, kModel };
enum class Backend { kAuto, kNccl, kGloo };
enum class Compression { kNone, kBf16, kFp16 };
enum class ReduceDtype { kFp32, kBf16 };
enum class NonFinite { kStop, kSkip };
enum class OnSignal { kCheckpoint, kStop };
enum class Augment { kNone, kCropFlip, kResizedCropFlip };
enum class Tokenizer { kChar, kByte };
enum class OptimizerName { kSgd, kAdam, kAdamw };
enum class SchedulerName { kConstant, kStep, kCosine, kLinear, kWsd };
enum class Activation { kRelu, kGelu, kTanh, kSigmoid };
enum class Pool { kMax, kAvg, kNone };
enum class DeviceChoice { kAuto, kCpu, kCuda };
enum class TokenFormat { kAuto, kLlmC, kNanoGpt };
enum class Gelu { kExact, kTanh };
enum class Decay { kMatrices, kAll };
enum class BadImage { kError, kSkip };

template <class E>
struct EnumNames;

#define LT_ENUM_NAMES(E, ...)                                                \
  template <>                                                                \
  struct EnumNames<E> {                                                      \
    static constexpr std::pair<E, std::string_view> table[] = {__VA_ARGS__}; \
  }
LT_ENUM_NAMES(Precision, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"},
              {Precision::kFp16, "fp16"});
LT_ENUM_NAMES(Placement, {Placement::kSingle, "single"}, {Placement::kPipeline, "pipeline"});
LT_ENUM_NAMES(Strategy, {Strategy::kDdp, "ddp"}, {Strategy::kDp, "dp"}, {Strategy::kFsdp, "fsdp"});
LT_ENUM_NAMES(FsdpUnit, {FsdpUnit::kBlock, "block"}, {FsdpUnit::kModel, "model"});
LT_ENUM_NAMES(Backend, {Backend::kAuto, "auto"}, {Backend::kNccl, "nccl"},
              {Backend::kGloo, "gloo"});
LT_ENUM_NAMES(Compression, {Compression::kNone, "none"}, {Compression::kBf16, "bf16"},
              {Compression::kFp16, "fp16"});
LT_ENUM_NAMES(ReduceDtype, {ReduceDtype::kFp32, "fp32"}, {ReduceDtype::kBf16, "bf16"});
LT_ENUM_NAMES(NonFinite, {NonFinite::kStop, "stop"}, {NonFinite::kSkip, "skip"});
LT_ENUM_NAMES(OnSignal, {OnSignal::kCheckpoint, "checkpoint"}, {OnSignal::kStop, "stop"});
LT_ENUM_NAMES(Augment, {Augment::kNone, "none"}, {Augment::kCropFlip, "crop_flip"},
              {Augment::kResizedCropFlip, "resized_crop_flip"});
LT_ENUM_NAMES(BadImage, {BadImage::kError, "error"}, {BadImage::kSkip, "skip"});
LT_ENUM_NAMES(Tokenizer, {Tokenizer::kChar, "char"}, {Tokenizer::kByte, "byte"});
LT_ENUM_NAMES(OptimizerName, {OptimizerName::kSgd, "sgd"}, {OptimizerName::kAdam, "adam"},
              {OptimizerName::kAdamw, "adamw"});
LT_ENUM_NAMES(SchedulerName, {SchedulerName::kConstant, "constant"}, {SchedulerName::kStep, "step"},
              {SchedulerName::kCosine, "cosine"}, {SchedulerName::kLinear, "linear"},
              {SchedulerName::kWsd, "wsd"});
LT_ENUM_NAMES(Activation, {Activation::kRelu, "relu"}, {Activation::kGelu, "gelu"},
              {Activation::kTanh, "tanh"}, {Activation::kSigmoid, "sigmoid"});
LT_ENUM_NAMES(Pool, {Pool::kMax, "max"}, {Pool::kAvg, "avg"}, {Pool::kNone, "none"});
LT_ENUM_NAMES(DeviceChoice, {DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"},
              {DeviceChoice::kCuda, "cuda"});
LT_ENUM_NAMES(TokenFormat, {TokenFormat::kAuto, "auto"}, {TokenFormat::kLlmC, "llm_c"},
              {TokenFormat::kNanoGpt, "nanogpt"});
LT_ENUM_NAMES(Gelu, {Gelu::kExact, "exact"}, {Gelu::kTanh, "tanh"});
LT_ENUM_NAMES(Decay, {Decay::kMatrices, "matrices"}, {Decay::kAll, "all"});
#undef LT_ENUM_NAMES

template <class E>
std::string toString(E e) {
  for (const auto& [v, name] : EnumNames<E>::table)
    if (v == e) return std::string(name);
  return "?";
}

// The value named `name`; false when no value has that name.
template <class E>
bool fromString(std::string_view name, E& out) {
  for (const auto& [v, n] : EnumNames<E>::table)
    if (n == name) {
      out = v;
      return true;
    }
  return false;
}

}  // namespace ltrain::config
