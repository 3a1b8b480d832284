// DPO against the real thing: TRL's DPOTrainer, on a small transformers Llama with a chat
// tokenizer. TRL tokenises the pairs as scripts/prepare_chat.py does, and trains on them in file
// order with the same AdamW, clipping and beta; ltrain's loss and TRL's rewards/* metrics must
// equal TRL's at every step, and the validation loss and reward accuracy too: fully on one process
// (the reference a frozen copy in TRL, the kept starting values in ltrain), under ZeRO-1 and ZeRO-2
// on two, and as LoRA from a PEFT adapter under DDP on two (the reference the starting adapter in
// both).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include <cmath>
#include <filesystem>

#include "ltrain/io/safetensors.h"
#include "support/chat_models.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::kFortunes;
using ltrain::test::makeChatModel;
using ltrain::test::requireRun;
using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {

const std::string kOracle = std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/dpo_reference.py";
constexpr int kTrainPairs = 24, kSteps = 6;

// TRL's run (OUT/log.json) beside ltrain's (RUN/metrics.jsonl): every logged value, every step.
void compare(const std::string& trl, const std::string& lt) {
  const auto log = ltrain::test::readJson(trl + "/log.json");
  const auto mine = ltrain::test::metricRecords(lt + "/metrics.jsonl", "train");
  REQUIRE(log.size() == static_cast<size_t>(kSteps));
  REQUIRE(mine.size() == static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    for (const char* key :
         {"loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"}) {
      const double a = log[i][key].get<double>(), b = mine[i][key].get<double>();
      INFO("step " << i + 1 << " " << key << ": TRL " << a << ", ltrain " << b);
      CHECK(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(a)));
    }
  }
  // The tuned model left the reference after the first step: the comparisons are of real values.
  CHECK(log[0]["loss"].get<double>() == Approx(std::log(2.0)));
  for (int i = 1; i < kSteps; ++i) CHECK(std::abs(log[i]["rewards/chosen"].get<double>()) > 1e-3);
  const auto eval = ltrain::test::readJson(trl + "/eval.json");
  const double loss = ltrain::test::summaryValue(lt, "test_loss"),
               accuracy = ltrain::test::summaryValue(lt, "test_accuracy");
  INFO("validation: TRL " << eval.dump() << ", ltrain loss " << loss << " accuracy " << accuracy);
  CHECK(std::abs(eval["eval_loss"].get<double>() - loss) <= 1e-5);
  CHECK(std::abs(eval["eval_rewards/accuracies"].get<double>() - accuracy) <= 1e-6);
}

}  // namespace

TEST_CASE(
    "DPO tokenises, trains and scores pairs as TRL's DPOTrainer does, fully, under ZeRO-1 and "
    "ZeRO-2, and as LoRA under DDP and ZeRO-3",
    "[parity][slow][hf]") {
  TempDir dir;
  const std::string base = dir / "base", jsonl = dir / "pairs.jsonl", data = dir / "pairs";
  makeChatModel(base);
  requireRun({LTRAIN_PYTHON, ltrain::test::kHfTools, "make-pairs", jsonl, kFortunes, "30", "chat"});
  requireRun({LTRAIN_PYTHON, ltrain::test::kPrepareChat, jsonl, "--model", base, "--out", data,
              "--val-fraction", "0.2"});

  const auto oracle = [&](const std::string& out, const std::string& batch,
                          const std::vector<std::string>& extra) {
    std::vector<std::string> argv{LTRAIN_PYTHON,
                                  kOracle,
                                  base,
                                  jsonl,
                                  out,
                                  "--pairs",
                                  std::to_string(kTrainPairs),
                                  "--steps",
                                  std::to_string(kSteps),
                                  "--batch",
                                  batch,
                                  "--lr",
                                  "0.003",
                                  "--beta",
                                  "0.2",
                                  "--clip",
                                  "1.0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    requireRun(argv);
  };
  oracle(dir / "trl_full", "4", {});

  // TRL's tokens and answer masks are prepare_chat.py's, pair for pair.
  auto trl = ltrain::io::loadSafetensors(dir / "trl_full/tokens.safetensors");
  auto train = ltrain::io::loadSafetensors(data + "/train.safetensors");
  CHECK(torch::equal(trl.at("tokens"), train.at("tokens")));
  CHECK(torch::equal(trl.at("mask"), train.at("mask")));
  CHECK(torch::equal(trl.at("offsets"), train.at("offsets")));

  const auto common = [&](const std::string& batch) {
    return "seed: 1\n"
           "data: {dataset: preference, path: " +
           data + ", shuffle: false, batch_size: " + batch +
           "}\n"
           "model: {init_from: " +
           base +
           ", block_size: 128}\n"
           "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.0}\n"
           "train: {max_steps: " +
           std::to_string(kSteps) +
           ", log_every: 1, threads: 1, eval_every: 0,\n"
           "        checkpoint_every: 0, clip_grad_norm: 1.0}\n";
  };
  ltrain::test::writeText(dir / "full.yaml", common("4") +
                                                 "finetune: {method: dpo}\n"
                                                 "dpo: {beta: 0.2}\n");
  auto r = runProcess({LTRAIN_BINARY, "train", dir / "full.yaml", "--output-dir", dir / "lt_full"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("reward_accuracy"));
  compare(dir / "trl_full", dir / "lt_full");
  // ZeRO-1 and ZeRO-2 on two processes of 2 pairs each: the reference's values swapped in where
  // each rank keeps its whole parameters, the moments (and gradients) sharded.
  ltrain::test::writeText(dir / "zero.yaml", common("2") +
                                                 "finetune: {method: dpo}\n"
                                                 "dpo: {beta: 0.2}\n");
  for (const std::string zero : {"1", "2"}) {
    INFO("dist.zero " << zero);
    r = runProcess({LTRAIN_BINARY, "train", dir / "zero.yaml", "dist.zero=" + zero,
                    "--nproc-per-node", "2", "--output-dir", dir / ("lt_zero" + zero)});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    compare(dir / "trl_full", dir / ("lt_zero" + zero));
  }

  // LoRA from a PEFT adapter (B not zero): two processes of 2 pairs each are TRL's batch of 4.
  requireRun({LTRAIN_PYTHON, ltrain::test::kHfTools, "make-adapter", base, dir / "adapter",
              "--targets", "q_proj,k_proj,v_proj,o_proj", "--rank", "4", "--alpha", "8"});
  oracle(dir / "trl_lora", "4", {"--adapter", dir / "adapter"});
  ltrain::test::writeText(dir / "lora.yaml",
                          common("2") +
                              "finetune: {method: dpo, adapter_from: " + (dir / "adapter") +
                              "}\n"
                              "dpo: {beta: 0.2, lora: true}\n");
  r = runProcess({LTRAIN_BINARY, "train", dir / "lora.yaml", "--nproc-per-node", "2",
                  "--output-dir", dir / "lt_lora"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  compare(dir / "trl_lora", dir / "lt_lora");
  // Under ZeRO-3 the base is sharded, and the reference is the adapters' starting values swapped
  // in around the gathered base.
  r = runProcess({LTRAIN_BINARY, "train", dir / "lora.yaml", "dist.zero=3", "--nproc-per-node", "2",
                  "--output-dir", dir / "lt_lora_zero3"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("ZeRO-3 over"));
  compare(dir / "trl_lora", dir / "lt_lora_zero3");
  // ltrain eval makes the reference again (the base and the starting adapter) and scores the
  // validation pairs as the runs' last evaluation and TRL's did; from the config alone, the model
  // as it starts is its own reference (loss log 2, no pair ranked right).
  for (const std::string& run : {dir / "lt_full", dir / "lt_lora_zero3"}) {
    const auto e = runProcess({LTRAIN_BINARY, "eval", "--run", run});
    INFO(e.out << e.err);
    REQUIRE(e.exit_code == 0);
    double loss = 0, accuracy = 0;
    REQUIRE(std::sscanf(e.out.c_str(), "val_loss %lf  reward_accuracy %lf", &loss, &accuracy) == 2);
    const auto trl_eval = ltrain::test::readJson(
        dir / (run == dir / "lt_full" ? "trl_full" : "trl_lora") + "/eval.json");
    CHECK(std::abs(loss - trl_eval["eval_loss"].get<double>()) <= 1e-4);
    CHECK(std::abs(accuracy - trl_eval["eval_rewards/accuracies"].get<double>()) <= 1e-4);
  }
  const auto start = runProcess({LTRAIN_BINARY, "eval", dir / "lora.yaml"});
  INFO(start.out << start.err);
  CHECK_THAT(start.out, Contains("val_loss 0.6931  reward_accuracy 0.0000"));
  // The tuned adapter goes out as PEFT's files.
  requireRun({LTRAIN_BINARY, "export", "--run", dir / "lt_lora", "--peft", dir / "tuned"});
  CHECK(std::filesystem::exists(dir / "tuned/adapter_model.safetensors"));
}

TEST_CASE(
    "preference pairs that are malformed, or chat data given as pairs and pairs as chat data, "
    "are refused with one line and nothing written",
    "[hf]") {
  TempDir dir;
  const std::string base = dir / "base";
  makeChatModel(base);
  const auto prepare = [&](const std::string& name, const std::string& lines) {
    ltrain::test::writeText(dir / (name + ".jsonl"), lines);
    return runProcess({LTRAIN_PYTHON, ltrain::test::kPrepareChat, dir / (name + ".jsonl"),
                       "--model", base, "--out", dir / name});
  };
  const std::string pair = R"({"prompt": "a", "chosen": "b", "rejected": "c"})"
                           "\n";
  // A chat example among pairs.
  auto r = prepare("mixed", pair + R"({"prompt": "a", "completion": "b"})" + "\n");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("mixed.jsonl:2: a chat example among pairs"));
  CHECK_FALSE(std::filesystem::exists(dir / "mixed"));
  // An answer that adds nothing to a conversational prompt.
  r = prepare(
      "empty",
      R"({"prompt": [{"role": "user", "content": "hi"}], "chosen": [], "rejected": [{"role": "assistant", "content": "x"}]})"
      "\n");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("empty.jsonl:1: the chosen answer adds no token to the prompt"));
  CHECK_FALSE(std::filesystem::exists(dir / "empty"));

  // Chat examples read as pairs, and pairs read as chat examples.
  REQUIRE(prepare("pairs", pair + pair + pair).exit_code == 0);
  REQUIRE(prepare("chats", std::string(R"({"prompt": "a", "completion": "b"})") + "\n" +
                               R"({"prompt": "c", "completion": "d"})" + "\n")
              .exit_code == 0);
  for (const auto& [data, method, says] :
       {std::tuple{"chats", "dpo", "holds chat or instruction examples, not the pairs"},
        std::tuple{"pairs", "full", "holds preference pairs (prompt/chosen/rejected)"}}) {
    const std::string dataset = std::string(method) == "dpo" ? "preference" : "chat";
    ltrain::test::writeText(dir / "c.yaml",
                            "data: {dataset: " + dataset + ", path: " + (dir / data) + "}\n" +
                                "model: {init_from: " + base + ", block_size: 64}\n" +
                                "finetune: {method: " + method + "}\n");
    r = runProcess({LTRAIN_BINARY, "train", dir / "c.yaml", "--output-dir", dir / "run"});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(says));
    CHECK_FALSE(std::filesystem::exists(dir / "run"));
  }
}
