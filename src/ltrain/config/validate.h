// Cross-option rules: combinations of otherwise valid values that cannot run together (a model
// that cannot read the data, a strategy that cannot drive a placement, ...). Checked when the
// config loads, so `ltrain config` reports each of them exactly as `ltrain train` does.
#pragma once
#include "ltrain/config/load.h"

namespace ltrain::config {

// Throws UsageError naming where the offending key was set ("file:line: ...").
void validate(const LoadedConfig& lc);

// A rule's error, prefixed with where `key` was set (the key a user would change).
[[noreturn]] void refuse(const LoadedConfig& lc, const std::string& key, const std::string& why);
// Of two keys, the one set explicitly (the file line a reader is pointed at), `a` first.
std::string setOne(const LoadedConfig& lc, const std::string& a, const std::string& b);

// The shape one example of `cfg.data` has, as far as the config alone says: [C, H, W] for image
// datasets, [F] for tables (F unknown: 0), [T] for token sequences. Used for rules that pair
// models with data.
enum class DataKind { kImages, kFeatures, kTokens };
DataKind dataKind(const std::string& dataset);

// train.activation_checkpointing as blocks per recomputed run: 0 for none, 1 for blocks, N for
// every:N (validate() has refused anything else).
int64_t activationCheckpointEvery(const TrainConfig& t);

}  // namespace ltrain::config
