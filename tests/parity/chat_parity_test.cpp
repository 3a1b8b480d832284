// Chat and instruction data against the real thing. transformers makes a small Llama with a
// tokenizer whose chat template marks the assistant's turns for return_assistant_tokens_mask;
// scripts/prepare_chat.py, which masks from the plain rendering, must mark exactly those tokens.
// Trained on the examples, ltrain's loss equals PyTorch's cross-entropy over Hugging Face-style
// labels (-100 where the mask does not learn) step for step, fully and with LoRA under DDP, and
// data made with another tokenizer or template than the model's is refused.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/io/safetensors.h"
#include "support/chat_models.h"
#include "support/process.h"
#include "support/reference_run.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::kFortunes;
using ltrain::test::makeChatModel;
using ltrain::test::requireRun;
using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {

// ltrain and the Python reference on `config` with `n` processes: the same loss at every step.
void trainBoth(const TempDir& dir, const std::string& config, const std::string& base,
               const std::string& n, const std::string& tag) {
  const std::string py = dir / ("py_" + tag), lt = dir / ("lt_" + tag);
  const auto losses =
      ltrain::test::trainBesideReference(config, base + "/model.safetensors", std::stoi(n), py, lt);
  const auto& a = losses.reference;
  REQUIRE(a.size() == 12);
  INFO(tag << ": " << losses.describe());
  CHECK(losses.worstRelative() <= 1e-5);
  CHECK(a.at(12) < a.at(1));
  // The validation loss, over the learned tokens only.
  const double va = ltrain::test::summaryValue(py, "test_loss"),
               vb = ltrain::test::summaryValue(lt, "test_loss");
  INFO("validation loss " << va << " vs " << vb);
  CHECK(std::abs(va - vb) <= 1e-5 * std::abs(va));
}

}  // namespace

TEST_CASE(
    "chat examples are masked as transformers marks the assistant's tokens, and train as "
    "PyTorch's cross-entropy over -100 labels does",
    "[parity][slow][hf]") {
  TempDir dir;
  const std::string base = dir / "base", jsonl = dir / "chats.jsonl";
  makeChatModel(base);
  requireRun({LTRAIN_PYTHON, ltrain::test::kHfTools, "make-chats", jsonl, kFortunes, "60"});

  // Every example kept: the masks against return_assistant_tokens_mask's, token for token.
  requireRun(
      {LTRAIN_PYTHON, ltrain::test::kPrepareChat, jsonl, "--model", base, "--out", dir / "all"});
  requireRun({LTRAIN_PYTHON, ltrain::test::kHfTools, "chat-masks", base, jsonl,
              dir / "oracle.safetensors"});
  auto oracle = ltrain::io::loadSafetensors(dir / "oracle.safetensors");
  auto train = ltrain::io::loadSafetensors(dir / "all/train.safetensors");
  auto val = ltrain::io::loadSafetensors(dir / "all/val.safetensors");
  CHECK(torch::equal(torch::cat({train.at("tokens"), val.at("tokens")}), oracle.at("tokens")));
  const auto mask = torch::cat({train.at("mask"), val.at("mask")});
  CHECK(torch::equal(mask, oracle.at("mask")));
  CHECK(mask.sum().item<int64_t>() > 0);
  CHECK(mask.sum().item<int64_t>() < mask.numel());  // the prompts are not learned

  // Examples up to 120 tokens (the model's context is 128), trained fully on one process...
  const std::string data = dir / "chats";
  requireRun({LTRAIN_PYTHON, ltrain::test::kPrepareChat, jsonl, "--model", base, "--out", data,
              "--max-length", "120"});
  const std::string common =
      "seed: 1\n"
      "data: {dataset: chat, path: " +
      data +
      ", batch_size: 4}\n"
      "model: {init_from: " +
      base +
      ", block_size: 120}\n"
      "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.01}\n"
      "scheduler: {name: cosine, warmup_steps: 3}\n"
      "train: {max_steps: 12, log_every: 1, threads: 1, eval_every: 0,\n"
      "        checkpoint_every: 0, clip_grad_norm: 1.0}\n";
  ltrain::test::writeText(dir / "full.yaml", common);
  trainBoth(dir, dir / "full.yaml", base, "1", "full");
  // ... and as LoRA from a PEFT adapter under DDP on two.
  requireRun({LTRAIN_PYTHON, ltrain::test::kHfTools, "make-adapter", base, dir / "adapter",
              "--targets", "q_proj,k_proj,v_proj,o_proj", "--rank", "4", "--alpha", "8"});
  ltrain::test::writeText(dir / "lora.yaml",
                          common + "finetune: {adapter_from: " + (dir / "adapter") + "}\n");
  trainBoth(dir, dir / "lora.yaml", base, "2", "lora");

  // The merged export keeps the model's tokenizer files: its chat template renders as the base's.
  requireRun({LTRAIN_BINARY, "export", "--run", dir / "lt_lora", "--hf", dir / "merged"});
  requireRun({LTRAIN_PYTHON, "-c",
              "import sys; from transformers import AutoTokenizer as A\n"
              "m = [{'role': 'user', 'content': 'hi'}]\n"
              "a, b = (A.from_pretrained(d).apply_chat_template(m) for d in sys.argv[1:])\n"
              "sys.exit(0 if a == b else f'{a} != {b}')",
              base, dir / "merged"});
}

TEST_CASE(
    "chat data that masks everything, or made for another tokenizer or template, is "
    "refused with one line and nothing written",
    "[slow][hf]") {
  TempDir dir;
  const std::string base = dir / "base";
  makeChatModel(base);
  // Only the user speaks: nothing to learn.
  ltrain::test::writeText(dir / "mute.jsonl",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}\n");
  auto r = runProcess({LTRAIN_PYTHON, ltrain::test::kPrepareChat, dir / "mute.jsonl", "--model",
                       base, "--out", dir / "mute"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("mute.jsonl:1: the loss mask leaves no token to learn from"));
  CHECK_FALSE(std::filesystem::exists(dir / "mute"));
  // A record of no known shape.
  ltrain::test::writeText(dir / "odd.jsonl", "{\"question\": \"a\", \"answer\": \"b\"}\n");
  r = runProcess({LTRAIN_PYTHON, ltrain::test::kPrepareChat, dir / "odd.jsonl", "--model", base,
                  "--out", dir / "odd"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("odd.jsonl:1: expected \"messages\""));

  requireRun(
      {LTRAIN_PYTHON, ltrain::test::kHfTools, "make-chats", dir / "chats.jsonl", kFortunes, "12"});
  requireRun({LTRAIN_PYTHON, ltrain::test::kPrepareChat, dir / "chats.jsonl", "--model", base,
              "--out", dir / "chats"});
  // Another tokenizer (a smaller vocabulary), and the same one with another template.
  const std::string other = dir / "other", retemplated = dir / "retemplated";
  makeChatModel(other, "300");
  std::filesystem::copy(base, retemplated);
  ltrain::test::writeText(retemplated + "/chat_template.jinja",
                          "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  for (const auto& [model, says] :
       {std::pair{other, "was tokenised with another tokenizer than model.init_from's"},
        std::pair{retemplated, "was rendered with a chat template"}}) {
    const std::string out = dir / "run";
    ltrain::test::writeText(dir / "c.yaml", "data: {dataset: chat, path: " + (dir / "chats") +
                                                "}\nmodel: {init_from: " + model + "}\n");
    auto t = runProcess({LTRAIN_BINARY, "train", dir / "c.yaml", "--output-dir", out});
    INFO(t.err);
    CHECK(t.exit_code == 2);
    CHECK_THAT(t.err, Contains(says));
    CHECK(std::count(t.err.begin(), t.err.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(out));
  }
}
