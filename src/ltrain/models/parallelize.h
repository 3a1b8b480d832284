// dist.tensor_parallel applied to a plain model from outside, as torchtitan's parallelize_llama
// applies PyTorch's parallelize_module: the family's spec names which module paths are column-,
// row- or vocabulary-parallel (TpRule, models/spec.h), and this pass gives those modules
// (models/parallel_modules.h) their style and this rank's slice of their parameters.
#pragma once
#include <memory>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/model.h"
#include "ltrain/models/spec.h"

namespace ltrain::models {

struct TensorParallelism;

// Gives each module `plan` names its style on `tp`, makes its split parameters this rank's shape
// (without memory: tp->fill makes the values) and records every parameter's split in tp->splits;
// replicated parameters whose gradient is partial on each rank (kPartialGradient, and all of them
// under sequence parallelism) get it summed over the group. std::logic_error for a rule that names
// no module, or a style on a module that cannot take it.
void parallelize(Classifier& model, const std::vector<TpRule>& plan,
                 const std::shared_ptr<TensorParallelism>& tp);

// A transformer family as rank `rank` of a tensor-parallel group of `size` holds it: built plain,
// then parallelize() by its spec's plan; its values not yet made (tp->fill). `deferred` (dist.zero
// 3 across the groups): its parameters keep no memory, and model->deferred makes a layer's part
// when ZeRO-3 shards it. The config's rules (heads and MLP width divisible by `size`) hold already;
// UsageError when the data's vocabulary (or, under `sequence_parallel`, its sequence) does not
// divide by `size`.
Classifier buildTensorParallel(const config::ModelConfig& cfg,
                               const std::vector<int64_t>& input_shape, int64_t num_classes,
                               int64_t rank, int64_t size, bool deferred = false,
                               bool sequence_parallel = false);

}  // namespace ltrain::models
