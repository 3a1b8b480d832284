// dist.zero: 1, 2 and 3 (ZeRO-1, ZeRO-2, ZeRO-3 / FSDP) against plain DDP on real processes:
// the same weights within 1e-5 after 20 steps (AdamW with clipping and decay on matrices only on
// a GPT, with grad accumulation under ZeRO-2 and -3, dropout under ZeRO-3; SGD with momentum on
// an MLP over three ranks, whose buckets do not split evenly; a llama under ZeRO-3), about
// 1/world of the optimizer state per rank (and of the gradients under ZeRO-2, and the parameters
// under ZeRO-3), and checkpoints that resume across zero stages and world sizes.
#include <torch/torch.h>

#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "support/text_corpus.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::summaryValue;
using ltrain::test::TempDir;

namespace {

// 20 steps of a small GPT on `dir`/t.txt with `dir`/c.yaml.
std::vector<std::string> gpt(const TempDir& dir, const std::string& out, int procs,
                             std::vector<std::string> extra) {
  std::vector<std::string> a{"train",
                             "--nproc-per-node",
                             std::to_string(procs),
                             dir / "c.yaml",
                             "data.dataset=text",
                             "data.path=" + (dir / "t.txt"),
                             "data.batch_size=4",
                             "model.name=gpt",
                             "model.n_layer=2",
                             "model.n_head=2",
                             "model.n_embd=32",
                             "model.block_size=32",
                             "optimizer.name=adamw",
                             "optimizer.lr=0.003",
                             "optimizer.weight_decay=0.1",
                             "train.clip_grad_norm=0.5",
                             "train.max_steps=20",
                             "train.log_every=5",
                             "train.threads=1",
                             "--output-dir",
                             out};
  a.insert(a.end() - 2, extra.begin(), extra.end());
  return a;
}

void ok(const ltrain::test::ProcessResult& r) {
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("dist.zero=1 trains a GPT to plain DDP's weights with half the optimizer state",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto ddp = runLtrain(gpt(dir, dir / "ddp", 2, {"dist.zero=0"}));
  INFO(ddp.out << ddp.err);
  REQUIRE(ddp.exit_code == 0);
  auto zero = runLtrain(gpt(dir, dir / "zero", 2, {"dist.zero=1"}));
  INFO(zero.out << zero.err);
  REQUIRE(zero.exit_code == 0);
  const double diff =
      ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "zero/model.safetensors");
  INFO("max |ddp - zero| = " << diff);
  CHECK(diff < 1e-5);
  const double ddp_mb = summaryValue(dir / "ddp", "optimizer_state_mb");
  const double zero_mb = summaryValue(dir / "zero", "optimizer_state_mb");
  INFO("optimizer state per rank: ddp " << ddp_mb << " MiB, zero " << zero_mb << " MiB");
  CHECK(zero_mb == Approx(ddp_mb / 2).epsilon(0.02));  // padding adds a few elements
  // The untrained model would not be within 1e-5 of either: the runs did train.
  CHECK(summaryValue(dir / "zero", "train_loss") < 3.0);
  // GPT's weight decay is on matrices only (optimizer.decay's default): ZeRO's flat slices mix
  // matrices with biases and norms, and decaying them all would end elsewhere.
  auto all = runLtrain(gpt(dir, dir / "zero-all", 2, {"dist.zero=1", "optimizer.decay=all"}));
  INFO(all.out << all.err);
  REQUIRE(all.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors",
                                    dir / "zero-all/model.safetensors") > 1e-4);
}

TEST_CASE("dist.zero=1 resumes a killed run exactly, and checkpoints cross between zero stages",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto full = runLtrain(gpt(dir, dir / "full", 2, {"dist.zero=1"}));
  REQUIRE(full.exit_code == 0);
  // Killed after step 12; the launcher restarts from the step-10 checkpoint.
  auto a = gpt(dir, dir / "killed", 2, {"dist.zero=1", "train.checkpoint_every=10"});
  a.insert(a.begin() + 3, {"--max-restarts", "1"});
  auto killed = runLtrain(a, {{"LTRAIN_FAULT_KILL_AT_STEP", "12:1"}});
  INFO(killed.out << killed.err);
  REQUIRE(killed.exit_code == 0);
  CHECK_THAT(killed.out + killed.err, Contains("resuming from"));
  CHECK(ltrain::test::maxWeightDiff(dir / "full/model.safetensors",
                                    dir / "killed/model.safetensors") == 0.0);

  // The first 10 steps without ZeRO, the next 10 with it (and the other way round): the
  // optimizer state moves through the checkpoint whole. A constant learning rate keeps the
  // schedule independent of where the run stops.
  auto ref = runLtrain(gpt(dir, dir / "ref", 2, {"dist.zero=0", "scheduler.name=constant"}));
  REQUIRE(ref.exit_code == 0);
  for (auto [first, second] :
       {std::pair{"0", "1"}, std::pair{"1", "0"}, std::pair{"2", "0"}, std::pair{"1", "2"}}) {
    const std::string run = dir / (std::string("cross") + first + second);
    auto p1 = runLtrain(
        gpt(dir, run, 2,
            {std::string("dist.zero=") + first, "scheduler.name=constant", "train.max_steps=10"}));
    REQUIRE(p1.exit_code == 0);
    // A finished run is not extended in place: the second part starts from its checkpoint.
    auto p2 = runLtrain(gpt(dir, run + "b", 2,
                            {std::string("dist.zero=") + second, "scheduler.name=constant",
                             "train.resume=" + run + "/checkpoints/step-00000010.pt"}));
    INFO(p2.out << p2.err);
    REQUIRE(p2.exit_code == 0);
    CHECK_THAT(p2.out + p2.err, Contains("resuming from"));
    CHECK(ltrain::test::maxWeightDiff(dir / "ref/model.safetensors", run + "b/model.safetensors") <
          1e-5);
  }
}

TEST_CASE("dist.zero=1 with SGD momentum over three ranks matches DDP", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  auto run = [&](const std::string& zero) {
    return runLtrain({"train", "--nproc-per-node", "3", dir / "c.yaml", "data.dataset=synthetic",
                      "data.synthetic_shape=[1,5,5]", "data.synthetic_train_samples=480",
                      "data.batch_size=8", "model.hidden=[7]", "optimizer.momentum=0.9",
                      "optimizer.nesterov=true", "optimizer.weight_decay=0.01",
                      "train.max_steps=20", "train.threads=1", "dist.zero=" + zero, "--output-dir",
                      dir / ("z" + zero)});
  };
  REQUIRE(run("0").exit_code == 0);
  auto z = run("1");
  INFO(z.out << z.err);
  REQUIRE(z.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "z0/model.safetensors", dir / "z1/model.safetensors") <
        1e-5);
  const double ratio = summaryValue(dir / "z1", "optimizer_state_mb") /
                       summaryValue(dir / "z0", "optimizer_state_mb");
  CHECK(ratio == Approx(1.0 / 3).epsilon(0.05));
  // ZeRO-2 over the same three ranks: the same weights, a third of the gradients kept.
  auto z2 = run("2");
  INFO(z2.out << z2.err);
  REQUIRE(z2.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "z0/model.safetensors", dir / "z2/model.safetensors") <
        1e-5);
  // DDP keeps each gradient once (.grad is a view of its bucket), ZeRO-2 a third of it.
  const double grads =
      summaryValue(dir / "z2", "gradient_mb") / summaryValue(dir / "z0", "gradient_mb");
  CHECK(grads == Approx(1.0 / 3).epsilon(0.1));
}

TEST_CASE("dist.zero=2 trains a GPT to plain DDP's weights holding 1/world of the gradients",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  // Grad accumulation too: the micro-steps before the last accumulate locally, as under DDP.
  auto ddp = runLtrain(gpt(dir, dir / "ddp", 2, {"dist.zero=0", "train.grad_accum=2"}));
  INFO(ddp.out << ddp.err);
  REQUIRE(ddp.exit_code == 0);
  // Small buckets, so that backward releases them one after another.
  auto z2 = runLtrain(
      gpt(dir, dir / "z2", 2, {"dist.zero=2", "train.grad_accum=2", "dist.bucket_cap_mb=0.01"}));
  INFO(z2.out << z2.err);
  REQUIRE(z2.exit_code == 0);
  CHECK_THAT(z2.out, Contains("ZeRO-2"));
  const double diff =
      ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "z2/model.safetensors");
  INFO("max |ddp - zero2| = " << diff);
  CHECK(diff < 1e-5);
  const double ddp_g = summaryValue(dir / "ddp", "gradient_mb");
  const double z2_g = summaryValue(dir / "z2", "gradient_mb");
  INFO("gradients per rank: ddp " << ddp_g << " MiB, zero-2 " << z2_g << " MiB");
  CHECK(z2_g == Approx(ddp_g / 2).epsilon(0.05));  // DDP's .grad are views of its buckets
  CHECK(summaryValue(dir / "z2", "optimizer_state_mb") ==
        Approx(summaryValue(dir / "ddp", "optimizer_state_mb") / 2).epsilon(0.02));
}

TEST_CASE("dist.zero=1 refuses the options it does not combine with, by name") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  for (auto [opt, says] :
       {std::pair{"train.precision=fp16", "train.precision fp16"},
        std::pair{"dist.grad_compression=bf16", "dist.grad_compression"},
        std::pair{"dist.find_unused_parameters=true", "dist.find_unused_parameters"}}) {
    auto r = runLtrain({"train", dir / "c.yaml", "data.dataset=synthetic", "dist.zero=1", opt,
                        "--output-dir", dir / "r"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(std::string("dist.zero: 1 does not combine with ") + says));
  }
  // dist.strategy fsdp is stage 3: another stage set with it is a contradiction.
  auto fsdp = runLtrain({"config", dir / "c.yaml", "dist.strategy=fsdp", "dist.zero=1"});
  CHECK(fsdp.exit_code == 2);
  CHECK_THAT(fsdp.err, Contains("dist.strategy fsdp shards the parameters, which is dist.zero 3"));
  // dist.strategy dp copies the whole model to every GPU each step: no shards to keep.
  for (const std::string zero : {"1", "3"}) {
    auto dp = runLtrain({"config", dir / "c.yaml", "dist.strategy=dp", "dist.zero=" + zero});
    CHECK(dp.exit_code == 2);
    CHECK_THAT(dp.err, Contains("dist.strategy dp does not combine with dist.zero " + zero));
  }
  auto shown = runLtrain({"config", dir / "c.yaml", "dist.strategy=fsdp"});
  CHECK(shown.exit_code == 0);
  CHECK_THAT(shown.out, Contains("zero: 3"));
}

TEST_CASE("dist.zero=3 trains a GPT to plain DDP's weights holding 1/world of the parameters",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  // Four blocks, dropout drawn as DDP draws it, and grad accumulation (the micro-steps before the
  // last accumulate locally, as under DDP's no_sync).
  const std::vector<std::string> common{"model.n_layer=4", "model.dropout=0.1",
                                        "train.grad_accum=2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  auto ddp = runLtrain(gpt(dir, dir / "ddp", 2, with({"dist.zero=0"})));
  INFO(ddp.out << ddp.err);
  REQUIRE(ddp.exit_code == 0);
  auto z3 = runLtrain(gpt(dir, dir / "z3", 2, with({"dist.zero=3"})));
  INFO(z3.out << z3.err);
  REQUIRE(z3.exit_code == 0);
  // The embedding with its tied head, four blocks, the final norm.
  CHECK_THAT(z3.out, Contains("ZeRO-3 over 6 unit(s) with prefetch"));
  const double diff =
      ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "z3/model.safetensors");
  INFO("max |ddp - zero3| = " << diff);
  CHECK(diff < 1e-5);
  for (const char* key : {"parameter_mb", "gradient_mb", "optimizer_state_mb"}) {
    INFO(key << ": ddp " << summaryValue(dir / "ddp", key) << ", zero-3 "
             << summaryValue(dir / "z3", key));
    CHECK(summaryValue(dir / "z3", key) ==
          Approx(summaryValue(dir / "ddp", key) / 2).epsilon(0.05));
  }
  // Gathered a unit or two at a time (with the embedding, held through the forward for its
  // tied head), never the whole model.
  CHECK(summaryValue(dir / "z3", "gathered_peak_mb") <
        0.75 * summaryValue(dir / "ddp", "parameter_mb"));
}

TEST_CASE(
    "one launched worker with an explicit dist.backend shards under dist.zero 1, 2 and 3 "
    "and trains to the plain run's weights",
    "[dist]") {
  // What scripts/gpu_check.sh runs on one GPU: the reduce-scatters, all-gathers and unit hooks of
  // the sharded path in a group of one, here over Gloo.
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(200));
  auto plain = runLtrain(gpt(dir, dir / "plain", 1, {"train.grad_accum=2"}));
  INFO(plain.out << plain.err);
  REQUIRE(plain.exit_code == 0);
  for (const std::string zero : {"1", "2", "3"}) {
    auto r = runLtrain(gpt(dir, dir / ("z" + zero), 1,
                           {"train.grad_accum=2", "dist.backend=gloo", "dist.zero=" + zero}));
    INFO("zero " << zero << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("ZeRO-" + zero));
    const double diff = ltrain::test::maxWeightDiff(dir / "plain/model.safetensors",
                                                    dir / ("z" + zero + "/model.safetensors"));
    INFO("max |plain - zero" << zero << "| = " << diff);
    CHECK(diff < 1e-5);
  }
  // ZeRO-3's checkpoint is sharded (one rank's part and the index) even with one rank.
  bool sharded = false;
  for (const auto& e : std::filesystem::directory_iterator(dir / "z3/checkpoints"))
    sharded = sharded || std::filesystem::exists(e.path() / "index.json");
  CHECK(sharded);
}

TEST_CASE(
    "dist.strategy=fsdp over three ranks matches DDP: whole-model units, checkpointed "
    "blocks without prefetch, uneven evaluation shards, a llama",
    "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto train = [&](const std::string& name, int procs, std::vector<std::string> extra) {
    auto r = runLtrain(gpt(dir, dir / name, procs, std::move(extra)));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  // Evaluation in batches of 8: the three ranks' shards of the validation set take 4 and 5
  // batches, and every rank must still take part in each unit's all-gather.
  train("ddp", 3, {"model.dropout=0.1", "data.eval_batch_size=8"});
  auto model = train("model", 3,
                     {"model.dropout=0.1", "data.eval_batch_size=8", "dist.strategy=fsdp",
                      "dist.fsdp_unit=model"});
  CHECK_THAT(model.out, Contains("ZeRO-3 over 1 unit(s)"));
  train("ckpt", 3,
        {"model.dropout=0.1", "data.eval_batch_size=8", "dist.zero=3",
         "train.activation_checkpointing=blocks", "dist.fsdp_prefetch=false"});
  for (const char* run : {"model", "ckpt"}) {
    INFO(run);
    CHECK(ltrain::test::readJson(dir / "ddp/summary.json")["test_loss"].get<double>() ==
          Approx(ltrain::test::readJson(std::string(dir / run) + "/summary.json")["test_loss"]
                     .get<double>())
              .epsilon(1e-4));
    const double diff = ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors",
                                                    std::string(dir / run) + "/model.safetensors");
    INFO(run << ": max |ddp - fsdp| = " << diff);
    CHECK(diff < 1e-5);
  }
  train("llama-ddp", 2, {"model.name=llama"});
  train("llama-z3", 2, {"model.name=llama", "dist.zero=3"});
  CHECK(ltrain::test::maxWeightDiff(dir / "llama-ddp/model.safetensors",
                                    dir / "llama-z3/model.safetensors") < 1e-5);
}

TEST_CASE("dist.zero=3 resumes a killed run exactly, and across zero stages and world sizes",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto full = runLtrain(gpt(dir, dir / "full", 2, {"dist.zero=3"}));
  ok(full);
  auto a = gpt(dir, dir / "killed", 2, {"dist.zero=3", "train.checkpoint_every=10"});
  a.insert(a.begin() + 3, {"--max-restarts", "1"});
  auto killed = runLtrain(a, {{"LTRAIN_FAULT_KILL_AT_STEP", "12:1"}});
  ok(killed);
  CHECK_THAT(killed.out + killed.err, Contains("resuming from"));
  CHECK(ltrain::test::maxWeightDiff(dir / "full/model.safetensors",
                                    dir / "killed/model.safetensors") == 0.0);

  // Ten steps under one stage, ten under another, against twenty without ZeRO.
  auto ref = runLtrain(gpt(dir, dir / "ref", 2, {"dist.zero=0", "scheduler.name=constant"}));
  ok(ref);
  for (auto [first, second] : {std::pair{"3", "0"}, std::pair{"0", "3"}, std::pair{"3", "1"}}) {
    const std::string run = dir / (std::string("cross") + first + second);
    ok(runLtrain(
        gpt(dir, run, 2,
            {std::string("dist.zero=") + first, "scheduler.name=constant", "train.max_steps=10"})));
    // ZeRO-3 writes a directory in which every rank wrote its part.
    const std::string ckpt =
        run + "/checkpoints/step-00000010" + (std::string(first) == "3" ? ".shards" : ".pt");
    auto p2 = runLtrain(gpt(
        dir, run + "b", 2,
        {std::string("dist.zero=") + second, "scheduler.name=constant", "train.resume=" + ckpt}));
    ok(p2);
    CHECK(ltrain::test::maxWeightDiff(dir / "ref/model.safetensors", run + "b/model.safetensors") <
          1e-5);
  }
  // A ZeRO-3 checkpoint of two ranks resumed by three, with ZeRO-3 and without: the rest of the
  // epoch is dealt over three ranks either way, and the two end at the same weights.
  const std::string ckpt = dir / "cross30/checkpoints/step-00000010.shards";
  for (int r = 0; r < 2; ++r)
    CHECK(std::filesystem::is_regular_file(ckpt + "/rank-0000" + std::to_string(r) +
                                           "-of-00002.safetensors"));
  for (const char* zero : {"0", "3"})
    ok(runLtrain(gpt(
        dir, dir / (std::string("three") + zero), 3,
        {std::string("dist.zero=") + zero, "scheduler.name=constant", "train.resume=" + ckpt})));
  CHECK(ltrain::test::maxWeightDiff(dir / "three0/model.safetensors",
                                    dir / "three3/model.safetensors") < 1e-5);

  // `ltrain eval` reads a sharded checkpoint as it reads the streamed model.safetensors: the
  // same weights, the same report.
  auto eval = [&](const std::string& weights) {
    auto args = gpt(dir, "", 1, {});
    args.resize(args.size() - 2);  // no --output-dir
    args[0] = "eval";
    args.erase(args.begin() + 1, args.begin() + 3);  // nor --nproc-per-node
    args.insert(args.end(), {"--checkpoint", weights});
    return runLtrain(args);
  };
  auto from_shards = eval(dir / "full/checkpoints/step-00000020.shards");
  auto from_weights = eval(dir / "full/model.safetensors");
  INFO(from_shards.out << from_shards.err);
  REQUIRE(from_shards.exit_code == 0);
  REQUIRE(from_weights.exit_code == 0);
  CHECK_THAT(from_shards.out, Contains("perplexity"));
  CHECK(from_shards.out == from_weights.out);

  // A run killed after its last checkpoint but before its summary, relaunched, saves that step
  // again: the old copy is swapped out only once the new one is complete, and a file of the
  // user's in it is kept (moved aside with the old copy).
  const std::string last = dir / "full/checkpoints/step-00000020.shards";
  ltrain::test::writeText(last + "/notes.txt", "mine");
  std::filesystem::remove(dir / "full/summary.json");
  auto relaunched = runLtrain(gpt(dir, dir / "full", 2, {"dist.zero=3"}));
  ok(relaunched);
  CHECK(std::filesystem::is_regular_file(last + "/index.json"));
  CHECK(ltrain::test::readText(dir / "full/checkpoints/step-00000020.shards.old/notes.txt") ==
        "mine");
  CHECK_FALSE(std::filesystem::exists(dir / "full/checkpoints/step-00000020.shards.partial"));

  // --overwrite clears the old run's sharded checkpoints too: none of them outranks the new run's.
  auto again = gpt(dir, dir / "full", 2, {"dist.zero=3", "train.max_steps=10"});
  again.push_back("--overwrite");
  ok(runLtrain(again));
  CHECK(std::filesystem::is_directory(dir / "full/checkpoints/step-00000010.shards"));
  CHECK_FALSE(std::filesystem::exists(dir / "full/checkpoints/step-00000020.shards"));

  // A damaged sharded checkpoint is named with what is wrong, and nothing trains from it.
  auto resume = [&](const std::string& from, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"dist.zero=3", "train.resume=" + from});
    return runLtrain(gpt(dir, dir / "bad", 2, extra));
  };
  auto other = resume(ckpt, {"model.n_embd=48"});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("is from another model: 'layers.0.wte.weight' has shape"));
  const std::string broken = dir / "broken.shards";
  std::filesystem::copy(ckpt, broken);
  std::filesystem::remove(broken + "/rank-00001-of-00002.safetensors");
  auto missing = resume(broken);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("lacks rank-00001-of-00002.safetensors"));
  std::filesystem::remove(broken + "/index.json");
  auto partial = resume(broken);
  CHECK(partial.exit_code == 2);
  CHECK_THAT(partial.err, Contains("no complete sharded checkpoint (it has no index.json"));
}

TEST_CASE(
    "dist.zero=3 makes and reads only each rank's slices: one process's initial weights bit for "
    "bit, init_from by byte ranges, export streamed from a sharded checkpoint",
    "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(200));
  // One SGD step with a learning rate far below any weight's rounding step: a llama (no zero
  // biases) ends at its initial weights exactly, so the runs' model.safetensors are those.
  auto still = [&](const std::string& out, int procs, const std::string& zero,
                   std::vector<std::string> extra = {}) {
    std::vector<std::string> a{"train",
                               "--nproc-per-node",
                               std::to_string(procs),
                               dir / "c.yaml",
                               "data.dataset=text",
                               "data.path=" + (dir / "t.txt"),
                               "data.batch_size=4",
                               "model.name=llama",
                               "model.n_layer=3",
                               "model.n_head=2",
                               "model.n_embd=32",
                               "model.block_size=32",
                               "optimizer.name=sgd",
                               "optimizer.lr=1e-30",
                               "optimizer.weight_decay=0",
                               "train.max_steps=1",
                               "train.threads=1",
                               "dist.zero=" + zero,
                               "--output-dir",
                               dir / out};
    a.insert(a.end() - 2, extra.begin(), extra.end());
    auto r = runLtrain(a);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  still("z0", 2, "0");
  still("z3", 2, "3");
  CHECK(ltrain::test::maxWeightDiff(dir / "z0/model.safetensors", dir / "z3/model.safetensors") ==
        0.0);

  // Exported from the sharded checkpoint (a tensor at a time, read by ranges from both ranks'
  // files) and from the whole run's weights: the same Hugging Face tensors.
  auto exported = [&](std::vector<std::string> from, const std::string& out) {
    std::vector<std::string> a{"export"};
    a.insert(a.end(), from.begin(), from.end());
    a.insert(a.end(), {"--hf", dir / out});
    auto r = runLtrain(a);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  };
  exported({"--run", dir / "z0"}, "hf0");
  exported({"--run", dir / "z3", "--checkpoint", dir / "z3/checkpoints/step-00000001.shards"},
           "hf3");
  CHECK(ltrain::test::maxWeightDiff(dir / "hf0/model.safetensors", dir / "hf3/model.safetensors") ==
        0.0);

  // init_from under ZeRO-3 over three ranks (units that split across rank files) reads each
  // rank's ranges of the Hugging Face file: the weights it was given, exactly.
  still("init3", 3, "3", {"model.init_from=" + (dir / "hf3")});
  CHECK(ltrain::test::maxWeightDiff(dir / "z0/model.safetensors",
                                    dir / "init3/model.safetensors") == 0.0);
}

TEST_CASE("a memory cap too small for even a rank's shard fails naming the phase and the bytes",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 7\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(100));
  // A GPT of 806M parameters (3.2 GB of fp32): each of two ranks' slices (1.6 GB) alone is over
  // the 1.5 GiB each process may write (RLIMIT_DATA). Under DDP the whole build is.
  for (const std::string zero : {"3", "0"}) {
    auto r = ltrain::test::runProcess({"prlimit",
                                       "--data=" + std::to_string(int64_t{1536} << 20),
                                       LTRAIN_BINARY,
                                       "train",
                                       "--nproc-per-node",
                                       "2",
                                       dir / "c.yaml",
                                       "data.dataset=text",
                                       "data.path=" + (dir / "t.txt"),
                                       "data.batch_size=1",
                                       "model.name=gpt",
                                       "model.n_layer=4",
                                       "model.n_head=32",
                                       "model.n_embd=4096",
                                       "model.block_size=16",
                                       "optimizer.name=sgd",
                                       "optimizer.momentum=0",
                                       "train.max_steps=1",
                                       "train.threads=1",
                                       "dist.zero=" + zero,
                                       "--output-dir",
                                       dir / ("run" + zero)});
    INFO("dist.zero " << zero << "\n" << r.out << r.err);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Contains("out of memory in phase build: an allocation of"));
    CHECK_THAT(r.err, Contains("RLIMIT_DATA 1536 MiB"));
  }
}

TEST_CASE("dist.zero=3 under bf16 gathers each unit in bf16 and reduces in dist.reduce_dtype",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto train = [&](const std::string& name, std::vector<std::string> extra) {
    auto r = runLtrain(gpt(dir, dir / name, 2, std::move(extra)));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  train("z3-fp32", {"dist.zero=3"});
  train("ddp", {"dist.zero=0", "train.precision=bf16"});
  const double ddp_loss = summaryValue(dir / "ddp", "test_loss");
  for (const std::string reduce : {"fp32", "bf16"}) {
    INFO("dist.reduce_dtype " << reduce);
    auto r = train(reduce, {"dist.zero=3", "train.precision=bf16", "dist.reduce_dtype=" + reduce});
    CHECK_THAT(r.out, Contains("gathered in bf16, reduced in " + reduce));
    // Half the bytes of the fp32 run's gathered units; the fp32 slices as they were.
    CHECK(summaryValue(dir / reduce, "gathered_peak_mb") ==
          Approx(summaryValue(dir / "z3-fp32", "gathered_peak_mb") / 2).epsilon(0.05));
    CHECK(summaryValue(dir / reduce, "parameter_mb") ==
          Approx(summaryValue(dir / "z3-fp32", "parameter_mb")));
    // It trains as DDP's bf16 autocast does, to bf16's precision.
    CHECK(summaryValue(dir / reduce, "test_loss") == Approx(ddp_loss).epsilon(0.02));
    // Checkpoints and model.safetensors hold the fp32 values of the slices.
    for (const auto& [k, t] : ltrain::io::loadSafetensors(dir / (reduce + "/model.safetensors")))
      CHECK(t.scalar_type() == torch::kFloat);
  }
}

TEST_CASE(
    "LoRA under dist.zero=3 shards the frozen base too, trains to DDP's weights and resumes "
    "across stages",
    "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  // GPT ties its embedding and head: one frozen unit held from the first layer to the last.
  auto lora = [](std::vector<std::string> extra) {
    for (const char* o : {"finetune.method=lora", "lora.target_modules=all-linear", "lora.rank=4",
                          "lora.dropout=0.1", "model.dropout=0.1", "scheduler.name=constant"})
      extra.emplace_back(o);
    return extra;
  };
  ok(runLtrain(gpt(dir, dir / "ddp", 2, lora({"dist.zero=0"}))));
  auto z3 = runLtrain(gpt(dir, dir / "z3", 2, lora({"dist.zero=3"})));
  ok(z3);
  CHECK_THAT(z3.out, Contains("ZeRO-3 over"));
  const double diff =
      ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "z3/model.safetensors");
  INFO("max |ddp - zero3| = " << diff);
  CHECK(diff < 1e-6);
  // Each rank keeps half the base and half the adapters' moments.
  for (const char* key : {"parameter_mb", "optimizer_state_mb"}) {
    INFO(key << ": ddp " << summaryValue(dir / "ddp", key) << ", zero-3 "
             << summaryValue(dir / "z3", key));
    CHECK(summaryValue(dir / "z3", key) ==
          Approx(summaryValue(dir / "ddp", key) / 2).epsilon(0.05));
  }
  // The adapters trained (B starts at zero).
  const auto weights = ltrain::io::loadSafetensors(dir / "z3/model.safetensors");
  double moved = 0;
  for (const auto& [name, t] : weights)
    if (name.find("lora_B") != std::string::npos)
      moved = std::max(moved, t.abs().max().item<double>());
  CHECK(moved > 1e-3);

  // Ten steps under one stage, ten under the other: the frozen base and the adapters cross.
  for (auto [first, second] : {std::pair{"3", "0"}, std::pair{"0", "3"}}) {
    const std::string run = dir / (std::string("cross") + first + second);
    ok(runLtrain(
        gpt(dir, run, 2, lora({std::string("dist.zero=") + first, "train.max_steps=10"}))));
    const std::string ckpt =
        run + "/checkpoints/step-00000010" + (std::string(first) == "3" ? ".shards" : ".pt");
    ok(runLtrain(gpt(dir, run + "b", 2,
                     lora({std::string("dist.zero=") + second, "train.resume=" + ckpt}))));
    INFO(first << " then " << second);
    CHECK(ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", run + "b/model.safetensors") <
          1e-6);
  }
}

TEST_CASE(
    "lora.base_dtype bf16 halves the base: under bf16 precision fp32's adapters bit for bit, in "
    "fp32 across DDP and ZeRO-3 and their checkpoints",
    "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 7\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto lora = [](std::vector<std::string> extra) {
    for (const char* o : {"finetune.method=lora", "lora.target_modules=c_attn,c_fc", "lora.rank=4",
                          "scheduler.name=constant"})
      extra.emplace_back(o);
    return extra;
  };
  // Autocast rounds an fp32 weight to bf16 for every product: holding it so changes nothing, under
  // DDP and under ZeRO-3 (which gathers its units in bf16 either way).
  for (const std::string zero : {"0", "3"}) {
    INFO("dist.zero " << zero);
    const std::string fp32 = dir / ("fp32-" + zero), bf16 = dir / ("bf16-" + zero);
    ok(runLtrain(gpt(dir, fp32, 2, lora({"dist.zero=" + zero, "train.precision=bf16"}))));
    ok(runLtrain(gpt(dir, bf16, 2,
                     lora({"dist.zero=" + zero, "train.precision=bf16", "lora.base_dtype=bf16"}))));
    CHECK(ltrain::test::trainLosses(bf16 + "/metrics.jsonl") ==
          ltrain::test::trainLosses(fp32 + "/metrics.jsonl"));
    const auto a = ltrain::io::loadSafetensors(fp32 + "/model.safetensors");
    const auto b = ltrain::io::loadSafetensors(bf16 + "/model.safetensors");
    REQUIRE(b.size() == a.size());
    for (const auto& [name, t] : a) {
      INFO(name);
      // Every linear's weight (GPT's c_attn, c_proj and c_fc) is held in bf16.
      const bool held = name.find("c_attn.weight") != std::string::npos ||
                        name.find("c_proj.weight") != std::string::npos ||
                        name.find("c_fc.weight") != std::string::npos;
      CHECK(b.at(name).scalar_type() == (held ? torch::kBFloat16 : torch::kFloat));
      CHECK(torch::equal(b.at(name), held ? t.to(torch::kBFloat16) : t));
    }
    // The linears are most of the base: the parameters' bytes fall by nearly half.
    CHECK(summaryValue(bf16, "parameter_mb") < 0.7 * summaryValue(fp32, "parameter_mb"));
  }
  CHECK(summaryValue(dir / "bf16-3", "parameter_mb") ==
        Approx(summaryValue(dir / "bf16-0", "parameter_mb") / 2).epsilon(0.05));

  // In fp32 each product upcasts the bf16 weight: ZeRO-3 equals DDP, and checkpoints of the bf16
  // base cross between them either way.
  ok(runLtrain(gpt(dir, dir / "ddp", 2, lora({"dist.zero=0", "lora.base_dtype=bf16"}))));
  ok(runLtrain(gpt(dir, dir / "z3", 2, lora({"dist.zero=3", "lora.base_dtype=bf16"}))));
  CHECK(ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "z3/model.safetensors") <
        1e-6);
  for (auto [first, second] : {std::pair{"3", "0"}, std::pair{"0", "3"}}) {
    const std::string run = dir / (std::string("cross") + first + second);
    ok(runLtrain(gpt(
        dir, run, 2,
        lora({std::string("dist.zero=") + first, "lora.base_dtype=bf16", "train.max_steps=10"}))));
    const std::string ckpt =
        run + "/checkpoints/step-00000010" + (std::string(first) == "3" ? ".shards" : ".pt");
    ok(runLtrain(gpt(dir, run + "b", 2,
                     lora({std::string("dist.zero=") + second, "lora.base_dtype=bf16",
                           "train.resume=" + ckpt}))));
    INFO(first << " then " << second);
    CHECK(ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", run + "b/model.safetensors") <
          1e-6);
  }
  // export --hf writes the merged model in fp32, as the base came.
  auto e =
      ltrain::test::runProcess({LTRAIN_BINARY, "export", "--run", dir / "z3", "--hf", dir / "hf"});
  INFO(e.out << e.err);
  REQUIRE(e.exit_code == 0);
  for (const auto& [name, t] : ltrain::io::loadSafetensors(dir / "hf/model.safetensors")) {
    INFO(name);
    CHECK(t.scalar_type() == torch::kFloat);
  }
}

TEST_CASE("dist.zero=3 resumes a whole .pt with only rank 0 holding it whole", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 9\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(200));
  // 12.6M parameters (50 MiB; AdamW's state 100 MiB): a step under DDP writes step-1.pt.
  const std::vector<std::string> big{"model.n_layer=4", "model.n_embd=512", "model.n_head=8",
                                     "train.checkpoint_every=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), big.begin(), big.end());
    return extra;
  };
  auto ddp = runLtrain(gpt(dir, dir / "ddp", 2, with({"dist.zero=0", "train.max_steps=1"})));
  INFO(ddp.out << ddp.err);
  REQUIRE(ddp.exit_code == 0);
  const std::string log = dir / "memory.jsonl";
  auto z3 = runLtrain(gpt(dir, dir / "z3", 2,
                          with({"dist.zero=3", "train.max_steps=2",
                                "train.resume=" + (dir / "ddp/checkpoints/step-00000001.pt")})),
                      {{"LTRAIN_MEMORY_LOG", log}});
  INFO(z3.out << z3.err);
  REQUIRE(z3.exit_code == 0);
  CHECK_THAT(z3.out, Contains("resuming from"));
  // The one-rank copy it went through is gone.
  CHECK_FALSE(std::filesystem::exists(dir / "z3/checkpoints/.resume-from-whole.shards"));
  // Each rank's first "resume" phase is the checkpoint's load: rank 0 reads the .pt whole (its
  // model and AdamW's state, 150 MiB), rank 1 only the index and its own ranges later.
  std::map<int, double> grew;
  std::istringstream lines(readText(log));
  for (std::string line; std::getline(lines, line);) {
    const auto j = ltrain::io::Json::parse(line);
    const int rank = j["rank"];
    if (j["phase"] == "resume" && !grew.count(rank))
      grew[rank] = j["peak_rss_mb"].get<double>() - j["start_rss_mb"].get<double>();
  }
  REQUIRE(grew.size() == 2);
  INFO("rank 0 grew " << grew[0] << " MiB, rank 1 " << grew[1] << " MiB");
  CHECK(grew[0] > 100);
  CHECK(grew[1] < 25);
  // Each phase's peak, split by what held it, adds up to it; the (resumed) first step's shows
  // this rank's slices, as summary.json counts them (half the parameters, AdamW's state twice
  // that), and the units gathered around the layers.
  const auto summary = ltrain::io::Json::parse(readText(dir / "z3/summary.json"));
  std::istringstream again(readText(log));
  int steps = 0;
  std::map<int, double> libraries_at_start;  // the first phase's, before the process group
  for (std::string line; std::getline(again, line);) {
    const auto j = ltrain::io::Json::parse(line);
    INFO(line);
    libraries_at_start.emplace(j["rank"].get<int>(), j["categories_mb"]["libraries"].get<double>());
    REQUIRE(j.contains("categories_mb"));
    double sum = 0;
    for (const auto& [name, mb] : j["categories_mb"].items()) sum += mb.get<double>();
    CHECK(sum == Approx(j["peak_rss_mb"].get<double>()).margin(0.5));
    if (j["phase"] != "first step") continue;
    ++steps;
    const auto& c = j["categories_mb"];
    CHECK(c["parameters"].get<double>() ==
          Approx(summary["parameter_mb"].get<double>()).margin(0.5));
    CHECK(c["optimizer_state"].get<double>() ==
          Approx(summary["optimizer_state_mb"].get<double>()).margin(0.5));
    CHECK(c["gradients"].get<double>() > 0);
    CHECK(c["gathered_units"].get<double>() > 0);
    CHECK(c["activations"].get<double>() > 0);  // the forward's, counted as tensors
    CHECK(c["libraries"].get<double>() > 30);
    // The shared-memory collectives' segment (2 buffers x 2 ranks x 4 MiB), resident from the
    // process group's start, is the library's, not a step's slack (and so is the libraries' code
    // paged in since the start).
    CHECK(c["libraries"].get<double>() - libraries_at_start.at(j["rank"].get<int>()) >= 15.9);
  }
  CHECK(steps == 2);
}

TEST_CASE("a damaged sharded checkpoint is named and the run resumes from the one before",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto args = gpt(dir, dir / "run", 2, {"dist.zero=3", "train.checkpoint_every=10"});
  auto first = runLtrain(args);
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  const std::string ckpts = dir / "run/checkpoints";
  // Four bytes of a tensor's data set to +Inf, as a bad disk or copy might: the file's size and
  // header are intact, so only its checksum tells.
  auto damage = [](const std::string& file) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-64, std::ios::end);
    const float inf = std::numeric_limits<float>::infinity();
    f.write(reinterpret_cast<const char*>(&inf), sizeof inf);
  };
  damage(ckpts + "/step-00000020.shards/rank-00001-of-00002.safetensors");
  // Killed before its summary: relaunched, it resumes from its newest whole checkpoint.
  std::filesystem::remove(dir / "run/summary.json");
  auto again = runLtrain(args);
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out + again.err,
             Contains("step-00000020.shards' is damaged: rank-00001-of-00002.safetensors does not "
                      "match its checksum"));
  CHECK_THAT(again.out + again.err, Contains("resuming from the previous checkpoint"));
  CHECK_THAT(again.out + again.err, Contains("resuming from " + ckpts + "/step-00000010.shards"));
  // Its weights are the undamaged run's.
  auto clean = runLtrain(gpt(dir, dir / "clean", 2, {"dist.zero=3"}));
  REQUIRE(clean.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "clean/model.safetensors",
                                    dir / "run/model.safetensors") == 0.0);
  // With no whole checkpoint left, the damage is an error naming the file, and nothing trains.
  damage(ckpts + "/step-00000010.shards/rank-00000-of-00002.safetensors");
  damage(ckpts + "/step-00000020.shards/rank-00000-of-00002.safetensors");
  auto explicit_resume = runLtrain(gpt(
      dir, dir / "other", 2, {"dist.zero=3", "train.resume=" + ckpts + "/step-00000010.shards"}));
  CHECK(explicit_resume.exit_code == 2);
  CHECK_THAT(explicit_resume.err,
             Contains("is damaged: rank-00000-of-00002.safetensors does not match its checksum"));
  CHECK((!std::filesystem::exists(dir / "other/checkpoints") ||
         std::filesystem::is_empty(dir / "other/checkpoints")));
  CHECK_FALSE(std::filesystem::exists(dir / "other/model.safetensors"));
}
