// The option table. Each LT_OPT names the struct member once: its dotted path is the member path
// stringified, so a key and the field it fills cannot drift apart.
#include "ltrain/config/schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "ltrain/common/errors.h"
#include "ltrain/config/model_families.h"
#include "ltrain/config/option_builder.h"
#include "ltrain/models/spec.h"
#include "ltrain/models/transformer.h"

namespace ltrain::config {
namespace {

using namespace options;  // NOLINT: the table's vocabulary

// model.name's help: each family's entry.
std::string modelHelp() {
  std::vector<std::string> parts;
  for (const auto& s : models::modelSpecs()) parts.push_back(s.help);
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The model families' keys: the transformer group's, then each family's own in the list's order,
// each marked with the families that take it ("model gpt|llama only") and its help led by their
// names.
std::vector<Option> familyOptions() {
  const auto& specs = models::modelSpecs();
  std::vector<std::pair<Option, std::vector<bool>>> all;  // an option, which specs take it
  for (auto& o : models::transformerOptions()) all.emplace_back(o, std::vector<bool>(specs.size()));
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].options)
      for (auto& o : specs[i].options()) {
        all.emplace_back(o, std::vector<bool>(specs.size()));
        all.back().second[i] = true;
      }
  for (size_t i = 0; i < specs.size(); ++i)
    for (const auto& path : specs[i].takes) {
      auto it =
          std::find_if(all.begin(), all.end(), [&](const auto& a) { return a.first.path == path; });
      if (it == all.end())  // a spec's mistake, not the user's
        throw std::logic_error("model " + specs[i].traits.name + " takes " + path +
                               ", which no spec declares");
      it->second[i] = true;
    }
  std::vector<Option> out;
  for (auto& [o, by] : all) {
    std::vector<std::string> names;
    for (size_t i = 0; i < specs.size(); ++i)
      if (by[i]) names.push_back(specs[i].traits.name);
    o.model = fmt::format("{}", fmt::join(names, "|"));
    o.help = fmt::format("{}: {}", fmt::join(names, ", "), o.help);
    out.push_back(std::move(o));
  }
  return out;
}
std::vector<Option> buildSchema() {
  using S = std::string;
  return {
      LT_OPT(name, "Run name; the run directory is <output_dir>/<name>", S("run")),
      LT_OPT(seed, "Seed for weight init, dropout and the sampler", int64_t{0}).atLeast(0),
      LT_OPT(output_dir, "Directory under which run directories are made", S("runs")),

      LT_OPT(data.dataset,
             "Dataset: IDX images (fashion_mnist, mnist), CIFAR binary files (cifar10, cifar100), "
             "a table (csv: train.csv and test.csv), a text file for language modelling (text), "
             "pre-tokenised shards (tokens: nanoGPT's .bin or llm.c's, memory-mapped), "
             "instruction and chat examples with a loss mask (chat: scripts/prepare_chat.py's "
             "train.safetensors and val.safetensors), preference pairs for finetune.method dpo "
             "(preference: prepare_chat.py's files of prompt/chosen/rejected records), image "
             "files (image_folder: class folders of JPEG/PNG as torchvision's ImageFolder; "
             "image_list: CSV manifests of path,label), or synthetic",
             S("fashion_mnist"))
          .oneOf({"fashion_mnist", "mnist", "cifar10", "cifar100", "csv", "text", "tokens", "chat",
                  "preference", "image_folder", "image_list", "synthetic"}),
      LT_OPT(data.label_column, "csv: the column that holds the class", S("label")),
      LT_OPT(data.tokenizer,
             "text: tokens are the file's characters (UTF-8; the vocabulary is the characters it "
             "holds) or its bytes (256 tokens, any file)",
             Tokenizer::kChar),
      LT_OPT(data.train_files,
             "tokens: the training shards, a glob under data.path (fineweb_train_*.bin)",
             S("*train*.bin")),
      LT_OPT(data.val_files, "tokens: the validation shards, a glob under data.path",
             S("*val*.bin")),
      LT_OPT(data.token_format,
             "tokens: llm_c (a 256-int32 header, magic 20240520 for uint16 tokens or 20240801 "
             "for uint32), nanogpt (raw uint16), or auto (llm_c when the file starts with its "
             "header)",
             TokenFormat::kAuto),
      LT_OPT(data.train_dir, "image_folder: the training class folders, under data.path",
             S("train")),
      LT_OPT(data.val_dir, "image_folder: the validation class folders, under data.path", S("val")),
      LT_OPT(data.train_list,
             "image_list: the training manifest under data.path, a CSV of path,label with a "
             "header row (paths relative to it)",
             S("train.csv")),
      LT_OPT(data.val_list, "image_list: the validation manifest under data.path", S("val.csv")),
      LT_OPT(data.channels,
             "image_folder, image_list: channels the images are converted to (3: RGB, 1: gray), "
             "as Pillow's convert",
             int64_t{3})
          .atLeast(1)
          .atMost(3),
      LT_OPT(data.image_size, "image_folder, image_list: the square side the model sees",
             int64_t{224})
          .atLeast(1),
      LT_OPT(data.resize_size,
             "image_folder, image_list: evaluation resizes the shorter side to this, then crops "
             "the centre; 0: image_size x 256 / 224 (torchvision's ImageNet recipe)",
             int64_t{0})
          .atLeast(0),
      LT_OPT(data.mean,
             "image_folder, image_list: per-channel mean after scaling to [0, 1]; unset, "
             "ImageNet's (as listed for RGB; [0.459] for data.channels 1, the same weighted as "
             "Pillow's L conversion)",
             FloatList{0.485, 0.456, 0.406}),
      LT_OPT(data.std,
             "image_folder, image_list: per-channel std after scaling to [0, 1]; unset, "
             "ImageNet's (as listed for RGB; [0.226] for data.channels 1)",
             FloatList{0.229, 0.224, 0.225})
          .positive(),
      LT_OPT(data.on_bad_image,
             "image_folder, image_list: a file that does not decode stops the run with its name "
             "(error), or is left out of its batch and counted (skip: skipped_images in "
             "metrics.jsonl and summary.json)",
             BadImage::kError),
      LT_OPT(data.jpeg_dct_scaling,
             "image_folder, image_list: decode a JPEG at 1/2, 1/4 or 1/8 scale (libjpeg's DCT "
             "scaling) when it stays at least as large as what the transform keeps; faster on "
             "large photos, pixels then differ from Pillow's full-size decode",
             false),
      LT_OPT(data.val_fraction, "text: share of the file, from its end, held out for validation",
             0.1)
          .positive()
          .atMost(0.5),
      LT_OPT(data.augment,
             "Training-image augmentation: none, crop_flip (a random crop of the image padded by "
             "data.augment_pad pixels, and a horizontal flip half the time), seeded per rank and "
             "epoch; or, for image_folder and image_list, resized_crop_flip (torchvision's "
             "RandomResizedCrop to data.image_size and a flip, seeded per example and epoch)",
             Augment::kNone),
      LT_OPT(data.augment_pad, "crop_flip: zero padding a side before the crop", int64_t{4})
          .atLeast(0),
      LT_OPT(data.path,
             "Directory of the dataset's files (text: the text file); empty: its standard location "
             "(/usr/share/datasets/fashion-mnist for fashion_mnist, or $LTRAIN_FASHION_MNIST_DIR)",
             S("")),
      LT_OPT(data.batch_size, "Training batch size per process", int64_t{64}).atLeast(1),
      LT_OPT(data.eval_batch_size, "Evaluation batch size per process", int64_t{1000}).atLeast(1),
      LT_OPT(data.num_workers,
             "Loader threads building batches ahead of the step; 0 builds them on the training "
             "thread, "
             "best when the intra-op threads already use every core",
             int64_t{0})
          .atLeast(0)
          .atMost(64),
      LT_OPT(data.prefetch, "Batches each loader thread may have ready ahead", int64_t{2})
          .atLeast(1),
      LT_OPT(data.shuffle, "Shuffle the training set each epoch (seed + epoch)", true),
      LT_OPT(data.drop_last, "Drop the last incomplete training batch", false),
      LT_OPT(data.packing,
             "chat: pack several training examples into each block of model.block_size, in "
             "order, as many as fit; each token attends only to its own example's earlier tokens "
             "and positions restart at each example, so an example's loss is what it would be "
             "alone (the validation split stays one example a block)",
             false),
      LT_OPT(data.synthetic_train_samples, "synthetic: training examples", int64_t{2048})
          .atLeast(1),
      LT_OPT(data.synthetic_test_samples, "synthetic: test examples", int64_t{512}).atLeast(1),
      LT_OPT(data.synthetic_shape, "synthetic: shape of one example [C, H, W]", IntList{1, 28, 28})
          .atLeast(1),
      LT_OPT(data.synthetic_classes, "synthetic: number of classes", int64_t{10}).atLeast(2),

      LT_OPT(model.name, "Model family: " + modelHelp(), S("mlp")).oneOf([] {
        std::vector<std::string> names;
        for (const auto& f : modelFamilies()) names.push_back(f.name);
        return names;
      }()),
      LT_OPT(model.init_from,
             "Initial weights: a .safetensors file with the model's parameter names, or a Hugging "
             "Face model directory (config.json + model.safetensors, or sharded) whose "
             "config.json also gives the fields the file leaves out; empty: seeded init",
             S("")),
      LT_OPT(model.activation, "Activation after each hidden layer", Activation::kRelu),
      LT_OPT(model.dropout,
             "Dropout probability after each hidden layer (gpt: after embeddings, attention and "
             "each residual branch)",
             0.0)
          .atLeast(0)
          .atMost(0.99),
      // (each family's own keys follow these, from its spec: familyOptions)

      LT_OPT(model.placement,
             "single: the whole model on the process's device; pipeline: the layers split into "
             "model.pipeline_stages stages, one per device of the process (cuda:<local_rank * "
             "stages + s>; all on the CPU without CUDA), run with GPipe's micro-batch schedule, "
             "with DDP across processes",
             Placement::kSingle),
      LT_OPT(model.pipeline_stages, "pipeline: stages (devices per process)", int64_t{2})
          .atLeast(2),
      LT_OPT(model.micro_batches, "pipeline: micro-batches each batch is cut into", int64_t{4})
          .atLeast(1),
      LT_OPT(model.pipeline_schedule,
             "pipeline: gpipe (every micro-batch forward, then every one backward: all their "
             "activations alive at once) or 1f1b (after a warm-up, each stage alternates one "
             "forward and one backward: at most as many micro-batches alive as stages)",
             S("gpipe"))
          .oneOf({"gpipe", "1f1b"}),

      LT_OPT(optimizer.name, "Optimizer", OptimizerName::kSgd),
      LT_OPT(optimizer.lr, "Peak learning rate", 0.1).positive(),
      LT_OPT(optimizer.momentum, "sgd: momentum", 0.9).atLeast(0).atMost(1),
      LT_OPT(optimizer.nesterov, "sgd: Nesterov momentum", false),
      LT_OPT(optimizer.weight_decay, "L2 penalty (sgd, adam) or decoupled decay (adamw)", 0.0)
          .atLeast(0),
      LT_OPT(optimizer.betas, "adam/adamw: [beta1, beta2]", FloatList{0.9, 0.999})
          .atLeast(0)
          .atMost(1),
      LT_OPT(optimizer.eps, "adam/adamw: epsilon", 1e-8).positive(),
      LT_OPT(optimizer.decay,
             "Which parameters weight_decay applies to: matrices (weights of 2 or more dimensions; "
             "not biases, norms' scales; nanoGPT's rule and the default for the language models) "
             "or all "
             "(the default for the other models)",
             Decay::kAll),

      LT_OPT(scheduler.name, "Learning-rate schedule after warm-up", SchedulerName::kConstant),
      LT_OPT(scheduler.warmup_steps, "Steps of linear warm-up from 0 to optimizer.lr", int64_t{0})
          .atLeast(0),
      LT_OPT(scheduler.step_size, "step: multiply by gamma every step_size steps", int64_t{1000})
          .atLeast(1),
      LT_OPT(scheduler.gamma, "step: decay factor", 0.1).positive().atMost(1),
      LT_OPT(scheduler.min_lr, "cosine/linear/wsd: learning rate reached at the last step", 0.0)
          .atLeast(0),
      LT_OPT(scheduler.decay_fraction,
             "wsd (warm-up, stable, decay): the share of all steps, at the end, in which the "
             "learning rate falls linearly to min_lr",
             0.2)
          .positive()
          .atMost(1),

      LT_OPT(train.epochs, "Passes over the training set (unless train.max_steps is set)",
             int64_t{1})
          .atLeast(1),
      LT_OPT(train.max_steps,
             "The run's length in optimizer steps, the epochs repeating as needed and "
             "train.epochs ignored (Hugging Face's max_steps); 0: train.epochs decides",
             int64_t{0})
          .atLeast(0),
      LT_OPT(train.grad_accum, "Micro-batches accumulated per optimizer step", int64_t{1})
          .atLeast(1),
      LT_OPT(train.clip_grad_norm, "Clip the global gradient norm to this; 0: off", 0.0).atLeast(0),
      LT_OPT(
          train.precision,
          "Compute precision: fp32, or autocast to bf16 or fp16 (fp16 with dynamic loss scaling)",
          Precision::kFp32),
      LT_OPT(train.log_every, "Optimizer steps between training log lines", int64_t{50}).atLeast(1),
      LT_OPT(train.eval_every, "Optimizer steps between evaluations; 0: at the end of each epoch",
             int64_t{0})
          .atLeast(0),
      LT_OPT(train.checkpoint_every,
             "Optimizer steps between checkpoints; 0: at the end of each epoch", int64_t{0})
          .atLeast(0),
      LT_OPT(train.resume,
             "auto: continue from the run directory's newest checkpoint; never; "
             "or a checkpoint file",
             S("auto")),
      LT_OPT(train.keep_checkpoints,
             "Keep the newest K checkpoints, deleting older ones (a corrupt newest one falls back "
             "to the one before); 0: keep all",
             int64_t{3})
          .atLeast(0),
      LT_OPT(train.activation_checkpointing,
             "none, blocks (every transformer or residual block's forward is recomputed in "
             "backward instead of keeping its activations), or every:N (N consecutive blocks "
             "share one recomputed run: fewer saved inputs, the same extra forward)",
             S("none")),
      LT_OPT(train.threads, "Intra-op CPU threads per process; 0: torch's default", int64_t{0})
          .atLeast(0),
      LT_OPT(train.device,
             "Where a process computes: auto (cuda:<local rank> when CUDA is present, else the "
             "CPU), cpu (also on a machine with GPUs), or cuda (an error without one)",
             DeviceChoice::kAuto),
      LT_OPT(train.peak_flops,
             "The device's peak FLOP/s for the mfu metric (model FLOPs per token x tokens/s over "
             "it); 0: the bf16 peak of a known GPU, no mfu elsewhere",
             0.0)
          .atLeast(0),
      LT_OPT(train.nonfinite,
             "A step whose gradients hold inf or nan: stop the run naming the step, or skip it "
             "(counted as skipped_steps); all ranks decide together. fp16 always skips (its loss "
             "scaler)",
             NonFinite::kStop),
      LT_OPT(train.on_signal,
             "On SIGTERM or SIGINT every rank finishes its step, then: checkpoint (rank 0 saves, "
             "the next launch resumes) or stop; exit code 143 or 130",
             OnSignal::kCheckpoint),

      LT_OPT(dist.backend,
             "Collective backend: auto (nccl on CUDA, gloo on the CPU), nccl or gloo. Set "
             "explicitly, a single worker started by a launcher joins a process group of one "
             "(the multi-process path on one GPU)",
             Backend::kAuto),
      LT_OPT(dist.bucket_cap_mb, "Gradient bucket size in MiB (the first bucket is 1 MiB)", 25.0)
          .positive(),
      LT_OPT(dist.find_unused_parameters, "Reduce parameters that got no gradient as zeros", false),
      LT_OPT(dist.timeout_s, "Bound on rendezvous and every collective, seconds", int64_t{1800})
          .atLeast(1),
      LT_OPT(dist.grad_compression, "Gradient compression for the allreduce", Compression::kNone),
      LT_OPT(dist.strategy,
             "ddp: one process per device, gradients all-reduced (the default); dp: one process "
             "drives every visible GPU with LibTorch's data_parallel (replicas made each step, as "
             "torch.nn.DataParallel), for users coming from it; on the CPU one replica; fsdp: "
             "fully sharded data parallel, the same as ddp with dist.zero 3",
             Strategy::kDdp),
      LT_OPT(dist.zero,
             "ZeRO stage: 0, every rank keeps the whole optimizer state; 1, the state is sharded "
             "across ranks (gradients reduce-scattered, each rank updates its slice, parameters "
             "all-gathered), about 1/world of it per rank; 2, the gradients too: each one dropped "
             "once in its bucket, each bucket once reduce-scattered, only this rank's slice kept; "
             "3, the parameters too (FSDP): each unit's parameters all-gathered just before its "
             "forward and its backward and freed after, its gradients reduce-scattered when its "
             "backward ends",
             int64_t{0})
          .atLeast(0)
          .atMost(3),
      LT_OPT(dist.fsdp_unit,
             "dist.zero 3: block, each top-level layer (embedding, transformer or residual block, "
             "head; layers sharing a weight together) is one unit gathered at a time; model, the "
             "whole model is one",
             FsdpUnit::kBlock),
      LT_OPT(dist.fsdp_prefetch,
             "dist.zero 3: start the next unit's all-gather (in forward and in backward) while "
             "this one computes",
             true),
      LT_OPT(dist.reduce_dtype,
             "dist.zero 3 under train.precision bf16, where each unit is gathered in bf16 (the "
             "fp32 parameters live only in the shards): the dtype its gradients are "
             "reduce-scattered in, fp32 (the default, as torchtitan) or bf16 (half the traffic)",
             ReduceDtype::kFp32),
      LT_OPT(
          dist.tensor_parallel,
          "The transformer families: ranks per tensor-parallel group (Megatron-LM). Each rank of a "
          "group "
          "holds 1/N of every attention and MLP matrix (column-parallel q/k/v and up/gate, "
          "row-parallel output and down projections, one all-reduce each in forward and "
          "backward) and of the vocabulary (embedding, head and cross-entropy); the world is "
          "data-parallel replicas (DDP, or ZeRO-3 with dist.zero 3) x N, consecutive ranks forming "
          "a group on one host",
          int64_t{1})
          .atLeast(1),
      LT_OPT(dist.sequence_parallel,
             "dist.tensor_parallel N: Megatron's sequence parallelism. Outside the attention and "
             "the MLP (norms, residual stream, dropout-free adds) each rank of a group keeps 1/N "
             "of the sequence instead of all of it; the all-reduces become all-gathers and "
             "reduce-scatters of the same size. The sequence length must divide by N",
             false),
      LT_OPT(dist.expert_parallel,
             "The mixtures of experts (mixtral, qwen3_moe): ranks per expert-parallel group. Each "
             "rank of a group holds 1/N of every layer's experts; a token goes to the ranks of its "
             "experts and its outputs come back by all-to-all (Gloo on the CPU, NCCL on GPUs). "
             "The rest of the model is replicated under DDP over the whole world; the world is "
             "replicas x N, consecutive ranks forming a group",
             int64_t{1})
          .atLeast(1),
      LT_OPT(dist.shm_allreduce,
             "On the CPU, when every rank runs on one host: all-reduces (the gradient buckets, "
             "the stop vote), and ZeRO's reduce-scatters and all-gathers, go through one "
             "shared-memory segment instead of Gloo's loopback TCP; false: all through Gloo. "
             "Where the ranks cannot share /dev/shm, Gloo anyway",
             true),

      LT_OPT(finetune.method,
             "How a model (model.init_from) is tuned: full (every parameter) or lora (low-rank "
             "adapters on the frozen linears of lora.target_modules, as PEFT's LoRA; only they "
             "train, are reduced and have optimizer state) or dpo (direct preference "
             "optimization on data.dataset preference, as TRL's DPOTrainer: the reference is the "
             "model as the run starts)",
             S("full"))
          .oneOf({"full", "lora", "dpo"}),
      LT_OPT(finetune.adapter_from,
             "A PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) to "
             "start from: its r, lora_alpha, lora_dropout and target_modules fill the lora keys",
             S("")),
      LT_OPT(lora.rank, "finetune.method lora: the adapters' rank (PEFT's r)", int64_t{8})
          .atLeast(1),
      LT_OPT(lora.alpha, "finetune.method lora: the update is scaled by alpha / rank", 16.0)
          .positive(),
      LT_OPT(lora.dropout, "finetune.method lora: dropout on the adapters' input", 0.0)
          .atLeast(0)
          .atMost(1),
      LT_OPT(lora.use_dora,
             "finetune.method lora: DoRA (PEFT's use_dora): each adapted linear also trains a "
             "magnitude per output, applied to the direction of W + scaling B A (its norm held "
             "constant in backward)",
             false),
      LT_OPT(lora.base_dtype,
             "finetune.method lora: how the frozen base's linear weights are held, fp32 or bf16 "
             "(half their memory; each product runs in the input's dtype, and under "
             "train.precision bf16 the results are fp32's bit for bit, as autocast rounds them "
             "alike)",
             S("fp32"))
          .oneOf({"fp32", "bf16"}),
      LT_OPT(lora.target_modules,
             "finetune.method lora: the linears that get adapters, by module name as PEFT's "
             "target_modules (q_proj,v_proj matches every module named or ending in .q_proj or "
             ".v_proj), or all-linear: every linear but the output head",
             S("all-linear")),
      LT_OPT(dpo.beta,
             "finetune.method dpo: how strongly the tuned model is held to the reference (TRL's "
             "beta): the loss is -log sigmoid(beta * (chosen log-ratio - rejected log-ratio))",
             0.1)
          .positive(),
      LT_OPT(dpo.lora,
             "finetune.method dpo: tune LoRA adapters (the lora keys; finetune.adapter_from) "
             "instead of every parameter",
             false),
  };
}
#undef LT_OPT

}  // namespace

const std::vector<Option>& schema() {
  static const std::vector<Option> table = [] {
    auto t = buildSchema();
    const auto after =
        std::find_if(t.begin(), t.end(), [](const Option& o) { return o.path == "model.dropout"; });
    auto fam = familyOptions();
    t.insert(after + 1, fam.begin(), fam.end());
    return t;
  }();
  return table;
}

const Option* findOption(const std::string& path) {
  for (const auto& o : schema())
    if (o.path == path) return &o;
  return nullptr;
}

bool isSection(const std::string& path) {
  const std::string prefix = path + ".";
  return std::any_of(schema().begin(), schema().end(),
                     [&](const Option& o) { return o.path.rfind(prefix, 0) == 0; });
}

ExperimentConfig defaults() {
  ExperimentConfig c;
  for (const auto& o : schema()) o.set_default(c);
  return c;
}

namespace {
void checkNumber(const Option& opt, double v) {
  auto num = [](double x) { return fmt::format("{:g}", x); };
  if (opt.min && (opt.min_exclusive ? v <= *opt.min : v < *opt.min))
    throw UsageError(fmt::format("{} must be {} {}, got {}", opt.path,
                                 opt.min_exclusive ? ">" : ">=", num(*opt.min), num(v)));
  if (opt.max && v > *opt.max)
    throw UsageError(fmt::format("{} must be <= {}, got {}", opt.path, num(*opt.max), num(v)));
}
}  // namespace

void checkConstraints(const Option& opt, const ExperimentConfig& cfg) {
  const YAML::Node v = opt.read(cfg);
  if (!opt.choices.empty()) {
    const auto& s = v.Scalar();
    if (std::find(opt.choices.begin(), opt.choices.end(), s) == opt.choices.end())
      throw UsageError(
          fmt::format("{} must be one of {}, got '{}'", opt.path, fmt::join(opt.choices, "|"), s));
  }
  if (!opt.min && !opt.max) return;
  if (v.IsSequence()) {
    for (const auto& x : v) checkNumber(opt, x.as<double>());
  } else if (opt.type_name == "int" || opt.type_name == "float") {
    checkNumber(opt, v.as<double>());
  }
}

}  // namespace ltrain::config
