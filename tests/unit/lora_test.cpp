// finetune.method lora applied from outside (models/lora.h): the adapters go on the linears the
// targets name and nowhere else, start as a zero update (the base's logits exactly), leave every
// other parameter without a gradient, merge into weights that give the adapted logits, and travel
// through a PEFT adapter directory under PEFT's names. PEFT itself checks the same files in
// parity/peft_parity_test.cpp.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>

#include "ltrain/common/errors.h"
#include "ltrain/compute/precision.h"
#include "ltrain/config/load.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/lora.h"
#include "ltrain/models/model.h"
#include "support/process.h"

using Catch::Matchers::Contains;

namespace {

ltrain::config::ExperimentConfig small(const std::string& name, const std::string& targets) {
  auto c = ltrain::config::defaults();
  c.model.name = name;
  c.model.n_layer = 2, c.model.n_head = 2, c.model.n_embd = 16, c.model.block_size = 8;
  c.model.intermediate_size = 24, c.model.n_kv_head = name == "gpt" ? 0 : 1;
  c.finetune.method = "lora";
  c.lora.rank = 2, c.lora.alpha = 6, c.lora.dropout = 0;
  c.lora.target_modules = targets;
  return c;
}

ltrain::models::Classifier build(const ltrain::config::ExperimentConfig& c) {
  torch::manual_seed(3);
  auto m = ltrain::models::build(c.model, {8}, 11, /*tokens=*/true);
  m->eval();
  return m;
}

// Every adapter's B drawn, so that the update is not zero.
void drawB(ltrain::models::Classifier& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters())
    if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.5);
}

}  // namespace

TEST_CASE("LoRA adapts the targeted linears, starts at the base's logits and trains only itself") {
  auto c = small("llama", "q_proj, v_proj");
  auto model = build(c);
  const auto ids = torch::randint(11, {2, 8}, torch::kLong);
  const auto base = model->forward(ids).detach();
  const auto s = ltrain::models::applyLora(model, c.lora);
  CHECK(s.modules == 4);  // two layers, q and v each
  CHECK(s.names == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(s.trainable == 2 * ((2 * 16 + 16 * 2) + (2 * 16 + 8 * 2)));  // A [2,16]; B [16|8,2]
  CHECK(torch::equal(model->forward(ids).detach(), base));           // B starts at zero
  for (const auto& p : model->named_parameters())
    CHECK(p.value().requires_grad() == (p.key().find(".lora_") != std::string::npos));
  CHECK(model->named_parameters().contains("model.layers.1.self_attn.v_proj.lora_B.weight"));
  CHECK_FALSE(model->named_parameters().contains("model.layers.1.self_attn.k_proj.lora_A.weight"));

  drawB(model);
  model->forward(ids).sum().backward();
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    CHECK(p.value().grad().defined() == p.value().requires_grad());
  }
  // Merged: the plain model gives the adapted logits, and no adapter is left.
  torch::NoGradGuard no_grad;
  const auto adapted = model->forward(ids);
  CHECK_FALSE(torch::allclose(adapted, base, 1e-4, 1e-4));
  ltrain::models::mergeLora(model);
  CHECK_FALSE(ltrain::models::hasLora(model));
  for (const auto& p : model->named_parameters()) CHECK(p.key().find("lora") == std::string::npos);
  CHECK(torch::allclose(model->forward(ids), adapted, 1e-5, 1e-5));
}

TEST_CASE("DoRA starts at the base's logits, trains its magnitudes and merges into the weights") {
  auto c = small("llama", "q_proj, v_proj");
  c.lora.use_dora = true;
  auto model = build(c);
  const auto ids = torch::randint(11, {2, 8}, torch::kLong);
  const auto base = model->forward(ids).detach();
  const auto s = ltrain::models::applyLora(model, c.lora);
  // A, B and a magnitude per output: 16 for q, 8 for v.
  CHECK(s.trainable == 2 * ((2 * 16 + 16 * 2 + 16) + (2 * 16 + 8 * 2 + 8)));
  CHECK(torch::allclose(model->forward(ids).detach(), base, 1e-6, 1e-6));  // m = ||W||, B = 0
  drawB(model);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find("lora_magnitude_vector") != std::string::npos) p.value().mul_(1.5);
  }
  model->forward(ids).sum().backward();
  const auto m = model->named_parameters()["model.layers.0.self_attn.q_proj.lora_magnitude_vector"];
  CHECK(m.grad().defined());
  CHECK(m.grad().abs().sum().item<double>() > 0);
  torch::NoGradGuard no_grad;
  const auto adapted = model->forward(ids);
  ltrain::models::mergeLora(model);
  for (const auto& p : model->named_parameters()) CHECK(p.key().find("lora") == std::string::npos);
  CHECK(torch::allclose(model->forward(ids), adapted, 1e-5, 1e-5));
}

TEST_CASE("all-linear adapts every linear but the head, and a target that names none is refused") {
  auto c = small("gpt", "all-linear");
  auto model = build(c);
  const auto s = ltrain::models::applyLora(model, c.lora);
  CHECK(s.modules == 2 * 4);  // c_attn, attn.c_proj, c_fc, mlp.c_proj per block
  CHECK(s.names == std::vector<std::string>{"c_attn", "c_fc", "c_proj"});

  auto wrong = small("llama", "q_proj,q_prj");
  auto other = build(wrong);
  CHECK_THROWS_WITH(ltrain::models::applyLora(other, wrong.lora),
                    Contains("lora.target_modules: 'q_prj' names no linear of the model") &&
                        Contains("down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"));
  // A whole module name matches; a part of an element does not.
  auto part = small("llama", "proj");
  auto third = build(part);
  CHECK_THROWS_AS(ltrain::models::applyLora(third, part.lora), ltrain::UsageError);
  auto whole = small("llama", "model.layers.0.mlp.up_proj");
  auto fourth = build(whole);
  CHECK(ltrain::models::applyLora(fourth, whole.lora).modules == 1);
}

TEST_CASE("a PEFT adapter directory carries the adapters out and back under PEFT's names") {
  ltrain::test::TempDir dir;
  for (const std::string name : {"llama", "gpt"}) {
    INFO(name);
    auto c = small(name, name == "gpt" ? "c_attn" : "q_proj,v_proj");
    auto model = build(c);
    ltrain::models::applyLora(model, c.lora);
    drawB(model);
    const auto ids = torch::randint(11, {2, 8}, torch::kLong);
    const auto mine = model->forward(ids).detach();
    const std::string out = dir / name;
    ltrain::models::exportPeft(model, c, out);
    const auto j = ltrain::io::readJsonFile(out + "/adapter_config.json");
    CHECK(j["peft_type"] == "LORA");
    CHECK(j["r"] == 2);
    CHECK(j["lora_alpha"] == 6);
    CHECK(j["fan_in_fan_out"] == (name == "gpt"));  // GPT-2's Conv1D
    const auto tensors = ltrain::io::loadSafetensors(out + "/adapter_model.safetensors");
    const std::string first = name == "gpt" ? "base_model.model.transformer.h.0.attn.c_attn"
                                            : "base_model.model.model.layers.0.self_attn.q_proj";
    REQUIRE(tensors.count(first + ".lora_A.weight"));
    CHECK(tensors.at(first + ".lora_B.weight").sizes() ==
          torch::IntArrayRef({name == "gpt" ? 48 : 16, 2}));
    CHECK(tensors.size() == (name == "gpt" ? 4u : 8u));

    auto again = build(c);
    ltrain::models::applyLora(again, c.lora);
    ltrain::models::loadAdapter(again, c.model, out);
    CHECK(torch::equal(again->forward(ids).detach(), mine));
  }
  // An adapter for other modules, or for a base of another width.
  auto c = small("llama", "q_proj,k_proj");
  auto model = build(c);
  ltrain::models::applyLora(model, c.lora);
  CHECK_THROWS_WITH(ltrain::models::loadAdapter(model, c.model, dir / "llama"),
                    Contains("has no tensor 'base_model.model.model.layers.0.self_attn.k_proj"));
  auto wide = small("llama", "q_proj,v_proj");
  wide.model.n_embd = 32;
  auto other = ltrain::models::build(wide.model, {8}, 11, true);
  ltrain::models::applyLora(other, wide.lora);
  CHECK_THROWS_WITH(ltrain::models::loadAdapter(other, wide.model, dir / "llama"),
                    Contains("has shape [2, 16], the model's is [2, 32]: an adapter made for "
                             "another base model"));
  CHECK_THROWS_WITH(ltrain::models::loadAdapter(other, wide.model, dir.path()),
                    Contains("has no adapter_model.safetensors"));
}

TEST_CASE(
    "lora.base_dtype bf16 holds the base's linears in bf16: autocast's outputs and gradients bit "
    "for bit, and in fp32 those of the base rounded to bf16") {
  auto c = small("llama", "q_proj, v_proj");
  const auto ids = torch::randint(11, {2, 8}, torch::kLong);
  struct Result {
    torch::Tensor out;
    std::map<std::string, torch::Tensor> grads;  // the adapters'
    ltrain::models::Classifier model{nullptr};
  };
  // `held`: lora.base_dtype; `rounded`: the fp32 base's linear weights rounded to bf16 first.
  auto run = [&](const std::string& held, bool autocast, bool rounded) {
    auto cfg = c;
    cfg.lora.base_dtype = held;
    Result r;
    r.model = build(cfg);
    if (rounded) {
      torch::NoGradGuard no_grad;
      for (auto& p : r.model->named_parameters())
        if (p.key().find("_proj.weight") != std::string::npos)
          p.value().copy_(p.value().to(torch::kBFloat16).to(torch::kFloat));
    }
    ltrain::models::applyLora(r.model, cfg.lora);
    drawB(r.model);
    {
      ltrain::compute::AutocastScope scope(
          autocast ? ltrain::config::Precision::kBf16 : ltrain::config::Precision::kFp32,
          torch::kCPU);
      r.out = r.model->forward(ids);
    }
    r.out.to(torch::kFloat).pow(2).mean().backward();
    for (const auto& p : r.model->named_parameters())
      if (p.value().requires_grad()) r.grads[p.key()] = p.value().grad();
    return r;
  };
  const auto held = run("bf16", false, false);
  const auto params = held.model->named_parameters();
  // Every linear's weight is bf16 (the frozen k and o too); the norms, the embedding, the head and
  // the adapters stay fp32.
  for (const auto& p : params) {
    INFO(p.key());
    const bool linear = p.key().find("_proj.weight") != std::string::npos;
    CHECK(p.value().scalar_type() == (linear ? torch::kBFloat16 : torch::kFloat));
  }
  CHECK(held.grads.size() == 8);

  auto same = [](const Result& a, const Result& b, double tolerance) {
    INFO("outputs max abs diff " << (a.out - b.out).abs().max().item<double>());
    CHECK(torch::allclose(a.out, b.out, 0, tolerance));
    for (const auto& [name, g] : a.grads) {
      INFO(name << " max abs diff " << (g - b.grads.at(name)).abs().max().item<double>());
      CHECK(torch::allclose(g, b.grads.at(name), 0, tolerance));
    }
  };
  SECTION("in fp32, the rounded base's") {
    same(held, run("fp32", false, true), 1e-6);
  }
  SECTION("under autocast, the fp32 base's: autocast rounds its weights alike") {
    same(run("bf16", true, false), run("fp32", true, false), 0);
  }
  SECTION("merged, the weights go back to fp32 and give the adapted logits") {
    auto m = held.model;
    torch::NoGradGuard no_grad;
    const auto adapted = m->forward(ids);
    ltrain::models::mergeLora(m);
    for (const auto& p : m->named_parameters()) {
      INFO(p.key());
      CHECK(p.value().scalar_type() == torch::kFloat);
    }
    CHECK(torch::allclose(m->forward(ids), adapted, 1e-5, 1e-5));
  }
}
