#include "ltrain/config/validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "ltrain/common/errors.h"
#include "ltrain/config/model_families.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/spec.h"

namespace ltrain::config {

DataKind dataKind(const std::string& dataset) {
  if (dataset == "text" || dataset == "tokens" || dataset == "chat" || dataset == "preference")
    return DataKind::kTokens;
  if (dataset == "csv") return DataKind::kFeatures;
  // Every other dataset the schema knows holds images; a name it does not know is no image set.
  const auto& known = findOption("data.dataset")->choices;
  if (std::find(known.begin(), known.end(), dataset) != known.end()) return DataKind::kImages;
  throw UsageError(fmt::format("data.dataset: unknown dataset '{}', expected {}", dataset,
                               fmt::join(known, "|")));
}

void refuse(const LoadedConfig& lc, const std::string& key, const std::string& why) {
  throw UsageError(lc.where(key) + why);
}

std::string setOne(const LoadedConfig& lc, const std::string& a, const std::string& b) {
  return lc.explicitly_set.count(a) || !lc.explicitly_set.count(b) ? a : b;
}

namespace {

// The refusals of one rule: each names the key that breaks it (or the rule's own key, where the
// YAML leaves that one to its default) and leads with the rule ("dist.tensor_parallel 2 ...").
std::function<void(const std::string&, const std::string&)> refusalsOf(const LoadedConfig& lc,
                                                                       std::string rule_key,
                                                                       std::string lead) {
  return [&lc, rule_key = std::move(rule_key), lead = std::move(lead)](const std::string& key,
                                                                       const std::string& why) {
    refuse(lc, setOne(lc, key, rule_key), lead + " " + why);
  };
}

void modelAgainstData(const LoadedConfig& lc) {
  const ExperimentConfig& c = lc.cfg;
  const DataKind kind = dataKind(c.data.dataset);
  const ModelFamily& family = modelFamily(c.model.name);
  const bool language_model = family.language_model;
  // Networks of the user's own (layers, torchscript) take whatever their layers take.
  const bool own = family.users_own;
  if (kind == DataKind::kTokens && !language_model && !own)
    refuse(lc, setOne(lc, "model.name", "data.dataset"),
           fmt::format("data.dataset {} needs model.name: {} (or a network of your own: "
                       "layers, torchscript), got '{}'",
                       c.data.dataset,
                       models::listed(models::familiesWhere(
                           [](const models::ModelSpec& s) { return s.traits.language_model; })),
                       c.model.name));
  if (language_model && kind != DataKind::kTokens)
    refuse(lc, setOne(lc, "model.name", "data.dataset"),
           fmt::format("model.name {} needs token sequences (data.dataset: text or tokens), "
                       "got data.dataset '{}'",
                       c.model.name, c.data.dataset));
  if (family.needs_images && kind == DataKind::kFeatures)
    refuse(lc, setOne(lc, "model.name", "data.dataset"),
           fmt::format("model {}: expected inputs [C, H, W] (images), got feature vectors [F] "
                       "from data.dataset {}",
                       c.model.name, c.data.dataset));
  const bool image_files = c.data.dataset == "image_folder" || c.data.dataset == "image_list";
  if (c.data.augment == Augment::kResizedCropFlip && !image_files)
    refuse(lc, "data.augment",
           fmt::format("data.augment resized_crop_flip is for image files (image_folder, "
                       "image_list); data.dataset {} takes none or crop_flip",
                       c.data.dataset));
  if (c.data.augment == Augment::kCropFlip && image_files)
    refuse(lc, "data.augment",
           fmt::format("data.augment crop_flip is for IDX and CIFAR arrays; data.dataset {} "
                       "takes none or resized_crop_flip",
                       c.data.dataset));
  if (image_files) {
    if (c.data.channels == 2)
      refuse(lc, "data.channels", "data.channels is 2, expected 1 (gray) or 3 (RGB)");
    for (const char* key : {"data.mean", "data.std"}) {
      const auto& v = std::string(key) == "data.mean" ? c.data.mean : c.data.std;
      if (static_cast<int64_t>(v.size()) != c.data.channels)
        refuse(lc, key,
               fmt::format("{} has {} values, expected one per channel (data.channels {})", key,
                           v.size(), c.data.channels));
    }
    if (c.data.path.empty())
      refuse(lc, "data.path",
             fmt::format("data.path must name the directory of the {} for data.dataset {}",
                         c.data.dataset == "image_folder" ? "class folders" : "manifests",
                         c.data.dataset));
  }
  // Their defaults (what a resolved config spells out) pass anywhere.
  for (const char* key : {"data.on_bad_image", "data.jpeg_dct_scaling"})
    if (!image_files &&
        (std::string(key) == "data.on_bad_image" ? c.data.on_bad_image != BadImage::kError
                                                 : c.data.jpeg_dct_scaling))
      refuse(lc, key,
             fmt::format("{} is for image files (image_folder, image_list); data.dataset {} "
                         "reads none",
                         key, c.data.dataset));
  if (c.data.augment != Augment::kNone && kind != DataKind::kImages)
    refuse(lc, "data.augment",
           fmt::format("data.augment {} crops and flips images; data.dataset {} has none",
                       toString(c.data.augment), c.data.dataset));
  if (c.data.dataset == "mnist" && c.data.path.empty())
    refuse(lc, "data.dataset",
           "data.path must name the directory of the MNIST IDX files for dataset 'mnist'");
}

// The family's own rules on its keys (models/<family>/spec.cpp).
void modelShape(const LoadedConfig& lc) {
  const auto* spec = models::findModelSpec(lc.cfg.model.name);
  if (spec && spec->validate) spec->validate(lc);
}

void activationCheckpointing(const LoadedConfig& lc) {
  const ExperimentConfig& c = lc.cfg;
  const std::string& v = c.train.activation_checkpointing;
  if (v == "none") return;
  int64_t n = 0;
  if (v == "blocks") {
    n = 1;
  } else if (v.rfind("every:", 0) == 0) {
    size_t used = 0;
    try {
      n = std::stoll(v.substr(6), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size() - 6) n = 0;
  }
  if (n < 1)
    refuse(lc, "train.activation_checkpointing",
           fmt::format("train.activation_checkpointing is '{}', expected none, blocks or every:N "
                       "(N a whole number from 1)",
                       v));
  if (!modelFamily(c.model.name).repeated_blocks) {
    const std::string names = models::listed(
        models::familiesWhere([](const models::ModelSpec& s) { return s.traits.repeated_blocks; }));
    refuse(lc, setOne(lc, "train.activation_checkpointing", "model.name"),
           fmt::format("train.activation_checkpointing recomputes repeated blocks: model.name "
                       "{}, not {}",
                       names, c.model.name));
  }
  if (c.dist.strategy == Strategy::kDp)
    refuse(lc, setOne(lc, "train.activation_checkpointing", "dist.strategy"),
           "train.activation_checkpointing does not combine with dist.strategy dp; use ddp");
}

// dist.expert_parallel N: the experts of a mixture-of-experts family split N ways.
void expertParallel(const LoadedConfig& lc) {
  const ExperimentConfig& c = lc.cfg;
  const int64_t n = c.dist.expert_parallel;
  if (n == 1) return;
  const auto no = refusalsOf(lc, "dist.expert_parallel", fmt::format("dist.expert_parallel {}", n));
  if (!modelFamily(c.model.name).mixture_of_experts)
    no("model.name",
       fmt::format("splits the experts of {}, not model.name {}",
                   models::listed(models::familiesWhere([](const models::ModelSpec& s) {
                                    return s.traits.mixture_of_experts;
                                  }),
                                  "and"),
                   c.model.name));
  if (c.model.num_experts % n != 0)
    no("model.num_experts",
       fmt::format(
           "needs model.num_experts ({}) to be a multiple of {}: each rank of a group holds "
           "as many experts",
           c.model.num_experts, n));
  // The experts' gradients are reduced apart from the loss scaler's check of the rest, and apart
  // from the flat slices ZeRO would shard.
  if (c.dist.zero >= 1)
    no("dist.zero",
       fmt::format("does not combine with dist.zero {} yet; use dist.zero 0 (DDP over the rest "
                   "of the model)",
                   c.dist.zero));
  if (c.train.precision == Precision::kFp16)
    no("train.precision", "does not combine with train.precision fp16 yet; use bf16");
}

void distributedOptions(const LoadedConfig& lc) {
  const ExperimentConfig& c = lc.cfg;
  expertParallel(lc);
  if (c.model.name == "torchscript") {
    if (c.model.placement == Placement::kPipeline)
      refuse(lc, "model.placement",
             "model.name torchscript does not combine with model.placement pipeline (its "
             "layers are TorchScript's, not ltrain's to split)");
    if (c.dist.strategy == Strategy::kDp)
      refuse(lc, "dist.strategy",
             "model.name torchscript does not combine with dist.strategy dp (a TorchScript "
             "module is not replicated each step); use ddp");
  }
  if (c.model.pipeline_schedule == "1f1b" && c.model.placement != Placement::kPipeline)
    refuse(lc, setOne(lc, "model.pipeline_schedule", "model.placement"),
           "model.pipeline_schedule 1f1b schedules a pipeline's stages; set model.placement "
           "pipeline, or leave the schedule gpipe");
  // dp replicates the whole module onto each GPU every step: there are no shards to keep.
  if (c.dist.strategy == Strategy::kDp && c.dist.zero >= 1)
    refuse(lc, setOne(lc, "dist.zero", "dist.strategy"),
           fmt::format("dist.strategy dp does not combine with dist.zero {} (dp copies the whole "
                       "model to every GPU each step); use dist.strategy ddp",
                       c.dist.zero));
  if (c.dist.strategy == Strategy::kDp && c.model.placement == Placement::kPipeline)
    refuse(lc, "dist.strategy", "dist.strategy dp does not combine with model.placement pipeline");
  if (c.dist.backend == Backend::kNccl && c.train.device == DeviceChoice::kCpu)
    refuse(lc, "dist.backend",
           "dist.backend nccl needs CUDA devices, but train.device is cpu; use gloo or auto");
  if (c.dist.strategy == Strategy::kFsdp && c.dist.zero != 3)
    refuse(lc, "dist.zero",
           fmt::format("dist.strategy fsdp shards the parameters, which is dist.zero 3, but "
                       "dist.zero is {}; leave dist.zero out or set it to 3",
                       c.dist.zero));
  if (c.dist.zero >= 1) {
    auto zero = [&](const std::string& key, const std::string& what) {
      refuse(lc, key, fmt::format("dist.zero: {} does not combine with {}", c.dist.zero, what));
    };
    if (c.train.precision == Precision::kFp16)
      zero(setOne(lc, "train.precision", "dist.zero"),
           "train.precision fp16 (its loss scaler checks whole gradients; use bf16)");
    if (c.dist.grad_compression != Compression::kNone)
      zero(setOne(lc, "dist.grad_compression", "dist.zero"),
           "dist.grad_compression (slices are reduced in the parameters' dtype)");
    if (c.dist.find_unused_parameters)
      zero(setOne(lc, "dist.find_unused_parameters", "dist.zero"), "dist.find_unused_parameters");
    if (c.model.placement == Placement::kPipeline)
      zero(setOne(lc, "model.placement", "dist.zero"),
           "model.placement pipeline (a bucket's slices would span the stages' devices)");
  }
  if (c.dist.reduce_dtype == ReduceDtype::kBf16 &&
      (c.dist.zero != 3 || c.train.precision != Precision::kBf16))
    refuse(lc, "dist.reduce_dtype",
           fmt::format("dist.reduce_dtype bf16 reduces the gradients of units gathered in bf16, "
                       "which needs dist.zero 3 and train.precision bf16 (dist.zero is {}, "
                       "train.precision {}); elsewhere gradients reduce in the parameters' dtype "
                       "(dist.grad_compression compresses DDP's)",
                       c.dist.zero, toString(c.train.precision)));
  if (c.dist.zero == 3 && c.model.name == "torchscript")
    refuse(lc, setOne(lc, "model.name", "dist.zero"),
           "dist.zero: 3 does not combine with model.name torchscript (its parameters are "
           "gathered around ltrain's own layers, which a TorchScript module does not have)");
}

// dist.tensor_parallel splits gpt's and llama's heads, MLP and vocabulary (the vocabulary is
// checked once the data gives it; the ranks, once the launcher gives them).
void tensorParallel(const LoadedConfig& lc) {
  const ExperimentConfig& c = lc.cfg;
  const int64_t n = c.dist.tensor_parallel;
  if (n == 1) {
    if (c.dist.sequence_parallel)
      refuse(lc, "dist.sequence_parallel",
             "dist.sequence_parallel splits the sequence over a tensor-parallel group; set "
             "dist.tensor_parallel to 2 or more");
    return;
  }
  const auto no = refusalsOf(lc, "dist.tensor_parallel", fmt::format("dist.tensor_parallel {}", n));
  const auto* spec = models::findModelSpec(c.model.name);
  if (!spec || !spec->traits.tensor_parallel)
    no("model.name",
       fmt::format("splits {}, not model.name {}",
                   models::listed(models::familiesWhere([](const models::ModelSpec& s) {
                                    return s.traits.tensor_parallel;
                                  }),
                                  "and"),
                   c.model.name));
  spec->validate_tensor_parallel(lc, n);
  // DPO keeps its reference (the starting values) before a resume loads the run's weights, but a
  // tensor-parallel model's values are made as the plan spreads it, together with a resume's.
  if (c.data.dataset == "preference")
    no("data.dataset", "does not combine with data.dataset preference (DPO) yet");
  if (c.dist.zero == 1 || c.dist.zero == 2)
    no("dist.zero", fmt::format("does not combine with dist.zero {}: across the groups it runs "
                                "DDP (dist.zero 0) or ZeRO-3 (dist.zero 3)",
                                c.dist.zero));
  if (c.dist.strategy == Strategy::kDp)
    no("dist.strategy", "needs one process per device (dist.strategy ddp or fsdp), not dp");
  if (c.model.placement == Placement::kPipeline)
    no("model.placement", "does not combine with model.placement pipeline");
  if (c.model.dropout > 0)
    no("model.dropout",
       fmt::format("needs model.dropout 0 (got {}): the ranks of a group would draw different "
                   "dropout masks for the activations they share",
                   c.model.dropout));
}

// finetune.method lora adds adapters to the models::Linear modules the transformer families are
// built of (the same modules tensor parallelism takes over), on a whole model in each process or
// sharded by ZeRO.
// finetune.method dpo learns from preference pairs, with a reference that is the model as the run
// starts, on a whole model in each process too.
void finetune(const LoadedConfig& lc) {
  const ExperimentConfig& c = lc.cfg;
  const bool dpo = c.finetune.method == "dpo";
  if (dpo && c.data.dataset != "preference")
    refuse(lc, setOne(lc, "data.dataset", "finetune.method"),
           fmt::format("finetune.method dpo learns from preference pairs, but data.dataset is {}; "
                       "set data.dataset: preference (scripts/prepare_chat.py writes the pairs "
                       "from prompt/chosen/rejected JSONL)",
                       c.data.dataset));
  if (!dpo && c.data.dataset == "preference")
    refuse(lc, setOne(lc, "finetune.method", "data.dataset"),
           fmt::format("data.dataset preference holds chosen/rejected pairs, which only "
                       "finetune.method dpo learns from (finetune.method is {}); set "
                       "finetune.method: dpo, or prepare SFT data with prepare_chat.py",
                       c.finetune.method));
  if (!c.finetune.adapter_from.empty() && !trainsLora(c))
    refuse(lc, setOne(lc, dpo ? "dpo.lora" : "finetune.method", "finetune.adapter_from"),
           dpo ? "finetune.adapter_from is a LoRA adapter, but dpo.lora is false; set dpo.lora: "
                 "true to tune the adapter by DPO"
               : fmt::format("finetune.adapter_from is a LoRA adapter, but finetune.method is "
                             "{}; set finetune.method: lora",
                             c.finetune.method));
  if (dpo) {
    const auto no = refusalsOf(lc, "finetune.method", "finetune.method dpo");
    // ZeRO-3 makes the values as it shards them, together with a resume's: the starting values
    // are never whole on a rank to keep (ZeRO-1/2 keep whole parameters on every rank).
    if (c.dist.zero == 3 && !c.dpo.lora)
      no("dist.zero",
         "does not combine with dist.zero 3 yet unless dpo.lora is true (then the "
         "reference is the base, with the adapters as they start); use dist.zero 0 "
         "(DDP), 1 or 2");
    if (c.dist.strategy == Strategy::kDp)
      no("dist.strategy", "needs one process per device (dist.strategy ddp), not dp");
    if (c.model.placement == Placement::kPipeline)
      no("model.placement", "does not combine with model.placement pipeline yet");
  }
  if (c.data.packing) {
    const auto no = refusalsOf(lc, "data.packing", "data.packing");
    if (c.data.dataset != "chat")
      no("data.dataset", fmt::format("packs chat examples (data.dataset chat), not data.dataset {}",
                                     c.data.dataset));
    if (!modelFamily(c.model.name).tensor_parallel)
      no("model.name",
         fmt::format("resets the attention and positions of {}, not model.name {}",
                     models::listed(models::familiesWhere(
                         [](const models::ModelSpec& s) { return s.traits.tensor_parallel; })),
                     c.model.name));
    // The examples' bounds reach the layers on the thread that runs the forward.
    if (c.model.placement == Placement::kPipeline)
      no("model.placement", "does not combine with model.placement pipeline yet");
    if (c.dist.strategy == Strategy::kDp)
      no("dist.strategy", "needs one process per device (dist.strategy ddp), not dp");
    if (activationCheckpointEvery(c.train) > 0)
      no("train.activation_checkpointing",
         "does not combine with train.activation_checkpointing yet (the recomputation would not "
         "see the examples' bounds)");
    if (c.dist.sequence_parallel)
      no("dist.sequence_parallel", "does not combine with dist.sequence_parallel yet");
  }
  if (c.lora.base_dtype != "fp32" && !trainsLora(c))
    refuse(lc, setOne(lc, "lora.base_dtype", dpo ? "dpo.lora" : "finetune.method"),
           fmt::format("lora.base_dtype {} holds a frozen base, but {}; set {}", c.lora.base_dtype,
                       dpo ? "dpo.lora is false: every parameter trains"
                           : "finetune.method is " + c.finetune.method + ": every parameter trains",
                       dpo ? "dpo.lora: true" : "finetune.method: lora"));
  if (!trainsLora(c)) return;
  const std::string rule = dpo ? "dpo.lora" : "finetune.method";
  const auto no = refusalsOf(lc, rule, dpo ? "dpo.lora" : "finetune.method lora");
  if (!modelFamily(c.model.name).tensor_parallel)
    no("model.name",
       fmt::format("adapts the linears of {}, not model.name {}",
                   models::listed(models::familiesWhere(
                       [](const models::ModelSpec& s) { return s.traits.tensor_parallel; })),
                   c.model.name));
  if (c.dist.tensor_parallel > 1)
    no("dist.tensor_parallel", "does not combine with dist.tensor_parallel yet");
  // Deferred under ZeRO-3, the base is never whole on a rank to take the magnitudes' norms of.
  if (c.dist.zero == 3 && c.lora.use_dora)
    refuse(lc, setOne(lc, "lora.use_dora", "dist.zero"),
           "lora.use_dora needs each base row's norm, and no rank holds the base whole under "
           "dist.zero 3; use dist.zero 0, 1 or 2");
  if (c.dist.strategy == Strategy::kDp)
    no("dist.strategy", "needs one process per device (dist.strategy ddp), not dp");
}

}  // namespace

void validate(const LoadedConfig& lc) {
  modelAgainstData(lc);
  modelShape(lc);
  distributedOptions(lc);
  tensorParallel(lc);
  activationCheckpointing(lc);
  finetune(lc);
}

int64_t activationCheckpointEvery(const TrainConfig& t) {
  if (t.activation_checkpointing == "blocks") return 1;
  if (t.activation_checkpointing.rfind("every:", 0) == 0)
    return std::stoll(t.activation_checkpointing.substr(6));
  return 0;
}

}  // namespace ltrain::config
