// What mixtral's spec shares with qwen3_moe, the other family of routed experts on llama's
// block: the experts' keys and rules, their config.json fields in and out, FLOPs of the experts a
// token runs. Without torch.
#pragma once
#include <string>
#include <vector>

#include "ltrain/config/hf_config.h"
#include "ltrain/config/load.h"
#include "ltrain/io/json.h"
#include "ltrain/models/spec.h"

namespace ltrain::models::mixtral {

// llama's keys, and the experts' (num_experts, num_experts_per_tok, router_aux_loss_coef,
// output_router_logits).
std::vector<std::string> keys();
// llama's rules and the experts': top-k within the experts, and what the routers' loss and the
// experts without tokens do not combine with yet.
void validate(const config::LoadedConfig& lc);
// config.json's router fields (the experts' count under `experts_field`: Mixtral's
// num_local_experts, Qwen3-MoE's num_experts).
void importRouter(config::HfMerger& m, const char* experts_field);
void exportRouter(const config::ModelConfig& cfg, io::Json& c, const char* experts_field);
// 6 N_active + attention, N_active counting the k experts of each layer a token runs (of
// `width` each).
double flops(const config::ModelConfig& m, int64_t params, int64_t vocab, int64_t attended,
             int64_t width);

}  // namespace ltrain::models::mixtral
