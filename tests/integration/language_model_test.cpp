// A character-level GPT through the binary: validation loss falls and is reported with perplexity
// (log, metrics.jsonl, summary.json, `ltrain eval`), and a run killed mid-epoch resumes to the
// weights of an uninterrupted one (each epoch's re-cut of the text into blocks repeats exactly).
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "support/process.h"
#include "support/run_files.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
std::vector<std::string> gpt(const TempDir& dir, const std::string& out,
                             std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"train",
                             dir / "c.yaml",
                             "data.dataset=text",
                             "data.path=" + (dir / "t.txt"),
                             "data.batch_size=8",
                             "model.name=gpt",
                             "model.n_layer=2",
                             "model.n_head=2",
                             "model.n_embd=32",
                             "model.block_size=32",
                             "model.dropout=0.1",
                             "optimizer.name=adamw",
                             "optimizer.lr=0.003",
                             "train.epochs=3",
                             "train.log_every=10",
                             "train.eval_every=20",
                             "train.threads=1",
                             "--output-dir",
                             out};
  a.insert(a.end() - 2, extra.begin(), extra.end());
  return a;
}
}  // namespace

TEST_CASE("a character GPT learns: validation loss falls, reported with perplexity") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 2\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(500));
  auto r = runLtrain(gpt(dir, dir / "run"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Contains("blocks of 32 tokens (vocabulary 20)"));
  CHECK_THAT(r.out + r.err, Contains("tokens/s"));
  CHECK_THAT(r.out + r.err, Contains(" elapsed, ETA "));  // a piped log's times
  std::vector<double> val;
  for (const auto& rec : ltrain::test::metricRecords(dir / "run/metrics.jsonl", "val")) {
    CHECK(rec["perplexity"].get<double>() == Approx(std::exp(rec["loss"].get<double>())));
    val.push_back(rec["loss"].get<double>());
  }
  REQUIRE(val.size() >= 3);
  INFO("val losses: " << val.front() << " ... " << val.back());
  CHECK(val.back() < val.front() - 0.5);  // from near log(20) = 3.0 towards the corpus's entropy
  auto summary = ltrain::test::readJson(dir / "run/summary.json");
  CHECK(summary["val_perplexity"].get<double>() ==
        Approx(std::exp(summary["test_loss"].get<double>())));
  // The last line names the split it scored: validation, per token.
  CHECK_THAT(r.out, Contains(fmt::format("val_loss {:.4f}  val_perplexity",
                                         summary["test_loss"].get<double>())));
  CHECK_THAT(r.out, Contains("next_token_accuracy"));
  CHECK_THAT(r.out, !Contains("test_accuracy"));
  auto e = runLtrain({"eval", dir / "c.yaml", "data.dataset=text", "data.path=" + (dir / "t.txt"),
                      "model.name=gpt", "model.n_layer=2", "model.n_head=2", "model.n_embd=32",
                      "model.block_size=32", "--checkpoint", dir / "run/model.safetensors"});
  INFO(e.out << e.err);
  REQUIRE(e.exit_code == 0);
  CHECK_THAT(e.out, Contains("val_perplexity"));
}

TEST_CASE("a GPT run killed mid-epoch resumes to the uninterrupted weights", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(300));
  REQUIRE(runLtrain(gpt(dir, dir / "full", {"train.checkpoint_every=7"})).exit_code == 0);
  // Killed after step 40, in the second epoch, and restarted from the step-35 checkpoint.
  auto a = gpt(dir, dir / "cut", {"train.checkpoint_every=7"});
  a.insert(a.begin() + 1, {"--nproc-per-node", "1", "--max-restarts", "1"});
  auto r = runLtrain(a, {{"LTRAIN_FAULT_KILL_AT_STEP", "40"}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Contains("resuming from"));
  CHECK_THAT(r.out + r.err, Contains("step-00000035.pt"));
  CHECK(readText(dir / "cut/model.safetensors") == readText(dir / "full/model.safetensors"));
}
