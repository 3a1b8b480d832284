// The typed, validated experiment configuration every module reads. Fields only: defaults, help and
// constraints live in schema.cpp, the one place each option is declared.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ltrain/config/modes.h"

namespace ltrain::config {

struct DataConfig {
  std::string dataset;
  std::string path;
  std::string label_column;  // csv: the class column
  Augment augment;
  Tokenizer tokenizer;                 // text
  double val_fraction;                 // text: the end of the file held out for validation
  std::string train_files, val_files;  // tokens: globs of shards under path
  TokenFormat token_format;
  std::string train_dir, val_dir;    // image_folder: class folders under path
  std::string train_list, val_list;  // image_list: manifests under path
  int64_t channels;                  // image_folder, image_list
  int64_t image_size, resize_size;
  std::vector<double> mean, std;
  BadImage on_bad_image;
  bool jpeg_dct_scaling;
  int64_t augment_pad;
  int64_t batch_size;
  int64_t eval_batch_size;
  int64_t num_workers;
  int64_t prefetch;
  bool shuffle;
  bool drop_last;
  bool packing;  // chat: several examples to a training block, attention and positions reset
  int64_t synthetic_train_samples;
  int64_t synthetic_test_samples;
  std::vector<int64_t> synthetic_shape;
  int64_t synthetic_classes;
};

// One entry of model.layers (model.name layers): its type, its arguments as written (YAML
// scalars or flow lists, checked by models/layer_graph.cpp against the type), and for the
// containers (residual, sequential) the layers inside.
struct LayerSpec {
  std::string type;
  std::vector<std::pair<std::string, std::string>> args;  // "" names a lone value (dropout: 0.2)
  std::vector<LayerSpec> children;
  int line = 0;  // where it is written in the config file; 0 for an override
};

struct ModelConfig {
  std::string name;
  std::string init_from;
  std::string path;               // torchscript: the module file
  std::vector<LayerSpec> layers;  // layers: the network
  std::vector<int64_t> hidden;
  Activation activation;
  double dropout;
  std::vector<int64_t> channels;
  int64_t kernel_size;
  Pool pool;
  bool batch_norm;
  bool channels_last;
  std::vector<int64_t> fc;
  int64_t depth;                                // resnet: 18 or 34
  std::string stem;                             // resnet: auto, cifar or imagenet
  int64_t width;                                // resnet: channels of the first stage
  int64_t n_layer, n_head, n_embd, block_size;  // gpt, llama
  bool tie_weights;           // gpt, llama: the head multiplies by the token embedding
  int64_t vocab_size;         // gpt, llama: 0 = the data's
  Gelu gelu;                  // gpt: GELU exact or tanh-approximated (GPT-2's gelu_new)
  int64_t n_kv_head;          // llama: key/value heads (grouped-query attention); 0 = n_head
  int64_t intermediate_size;  // llama: SwiGLU width
  double rope_theta;          // llama
  double norm_eps;            // llama: RMSNorm epsilon
  int64_t head_dim;           // llama, qwen3, mistral: width of one head; 0 = n_embd / n_head
  int64_t sliding_window;     // mistral: keys a query attends to (itself included); 0 = all
  // mixtral, qwen3_moe: a router sends each token to num_experts_per_tok of num_experts SwiGLU
  // experts, each moe_intermediate_size wide (0: intermediate_size).
  int64_t num_experts, num_experts_per_tok, moe_intermediate_size;
  bool norm_topk_prob;          // qwen3_moe: the chosen experts' weights renormalised to sum to 1
  double router_aux_loss_coef;  // the load-balancing loss's weight in the training loss
  bool output_router_logits;    // as transformers: the load-balancing loss joins the training loss
  Placement placement;
  int64_t pipeline_stages, micro_batches;
  std::string pipeline_schedule;  // gpipe | 1f1b
};

struct OptimizerConfig {
  OptimizerName name;
  double lr;
  double momentum;
  bool nesterov;
  double weight_decay;
  std::vector<double> betas;
  double eps;
  Decay decay;  // which parameters weight_decay applies to
};

struct SchedulerConfig {
  SchedulerName name;
  int64_t warmup_steps;
  int64_t step_size;
  double gamma;
  double min_lr;
  double decay_fraction;  // wsd: the share of steps, at the end, that decay to min_lr
};

struct TrainConfig {
  int64_t epochs;
  int64_t max_steps;
  int64_t grad_accum;
  double clip_grad_norm;
  Precision precision;
  int64_t log_every;
  int64_t eval_every;
  int64_t checkpoint_every;
  std::string resume;
  int64_t keep_checkpoints;
  int64_t threads;
  NonFinite nonfinite;  // what a step with inf/nan gradients does
  OnSignal on_signal;   // what SIGTERM/SIGINT do
  DeviceChoice device;  // auto: CUDA when present
  double peak_flops;    // the device's peak for MFU; 0: from the table of known GPUs
  std::string activation_checkpointing;  // none | blocks | every:N (validate.h reads it)
};

struct DistConfig {
  Backend backend;
  double bucket_cap_mb;
  bool find_unused_parameters;
  int64_t timeout_s;
  Compression grad_compression;
  int64_t zero;        // 0: every rank holds the whole optimizer state; 1: ZeRO-1, sharded;
                       // 2: gradients too; 3: parameters too (dist.strategy fsdp sets it)
  Strategy strategy;   // ddp (a process per device) | dp (one process, every local GPU) | fsdp
  FsdpUnit fsdp_unit;  // dist.zero 3: what one all-gathered unit is
  bool fsdp_prefetch;  // dist.zero 3: the next unit's all-gather issued while this one computes
  bool shm_allreduce;  // CPU ranks all on one host: all-reduce through shared memory, not Gloo
  // dist.zero 3 under train.precision bf16 (units gathered in bf16): the dtype the gradients are
  // reduce-scattered in (FSDP2's MixedPrecisionPolicy.reduce_dtype)
  ReduceDtype reduce_dtype;
  // Ranks per tensor-parallel group (gpt, llama): each splits every attention and MLP matrix and
  // the vocabulary N ways; world = data-parallel replicas x N, each group on one host
  int64_t tensor_parallel;
  // dist.tensor_parallel: norms and the residual stream hold 1/N of the sequence on each rank
  bool sequence_parallel;
  // Ranks per expert-parallel group (mixtral, qwen3_moe): each holds 1/N of every layer's experts,
  // tokens sent to them and back by all-to-all; world = replicas x N, consecutive ranks a group
  int64_t expert_parallel;
};

// Fine-tuning an existing model (finetune.method): the whole of it, LoRA adapters on a frozen
// base (models/lora.h), or preference tuning by DPO (train/dpo.h).
struct FinetuneConfig {
  std::string method;        // full | lora | dpo
  std::string adapter_from;  // a PEFT adapter directory (adapter_config.json) to start from
};

// finetune.method lora, as PEFT's LoraConfig names them.
struct LoraConfig {
  int64_t rank;                // r
  double alpha;                // lora_alpha: the update is scaled by alpha / rank
  double dropout;              // lora_dropout, on the adapter's input
  std::string target_modules;  // module names, comma-separated, or all-linear
  bool use_dora;               // DoRA: a trained magnitude per output, the direction normalised
  std::string base_dtype;      // how the frozen linears' weights are held: fp32 or bf16
};

// finetune.method dpo, as TRL's DPOConfig names it.
struct DpoConfig {
  double beta;  // the weight of the log-ratio against the reference (TRL's beta)
  bool lora;    // tune LoRA adapters (the lora keys) rather than every parameter
};

struct ExperimentConfig {
  std::string name;
  int64_t seed;
  std::string output_dir;
  DataConfig data;
  ModelConfig model;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  TrainConfig train;
  DistConfig dist;
  FinetuneConfig finetune;
  LoraConfig lora;
  DpoConfig dpo;
};

// Whether the run trains LoRA adapters on a frozen base: finetune.method lora, or dpo with
// dpo.lora.
inline bool trainsLora(const ExperimentConfig& c) {
  return c.finetune.method == "lora" || (c.finetune.method == "dpo" && c.dpo.lora);
}

}  // namespace ltrain::config
