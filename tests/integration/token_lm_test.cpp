// Language models on token shards through the binary: fortunes tokenised by
// scripts/prepare_tokens.py train configs/llama_tokens.yaml's llama (validation loss falls, MFU is
// reported against train.peak_flops, and the run samples text with its own tokenizer); and a llama
// on llm.c shards killed mid-epoch resumes to the weights of an uninterrupted run.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>

#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
const std::string kConfig = std::string(LTRAIN_SOURCE_DIR) + "/configs/llama_tokens.yaml";

void writeShard(const std::string& path, size_t n, unsigned seed, int vocab) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = static_cast<int32_t>(n);
  std::mt19937 rng(seed);
  std::vector<uint16_t> tokens(n);
  // A learnable stream: mostly the previous token + 1, sometimes a jump.
  for (size_t i = 0; i < n; ++i)
    tokens[i] = static_cast<uint16_t>(i && rng() % 4 ? (tokens[i - 1] + 1) % vocab : rng() % vocab);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(2 * n));
}
}  // namespace

TEST_CASE(
    "fortunes tokenised by prepare_tokens.py train a llama whose validation loss falls, and "
    "it samples with its tokenizer",
    "[slow][hf]") {
  TempDir dir;
  auto prep = ltrain::test::runProcess(
      {LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/scripts/prepare_tokens.py",
       "/usr/share/games/fortunes/cookie", "/usr/share/games/fortunes/wisdom", "--out",
       dir / "data", "--vocab-size", "1024"});
  INFO(prep.err);
  REQUIRE(prep.exit_code == 0);
  auto r = runLtrain({"train", kConfig, "data.path=" + (dir / "data"), "train.max_steps=300",
                      "train.eval_every=100", "train.checkpoint_every=0", "+train.peak_flops=1e11",
                      "--output-dir", dir / "run"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err + r.out, Contains("vocabulary 1024"));
  const auto evals = ltrain::test::metricRecords(dir / "run/metrics.jsonl", "val");
  REQUIRE(evals.size() == 3);
  const double first = evals.front()["loss"].get<double>(),
               last = evals.back()["loss"].get<double>();
  INFO("validation loss " << first << " -> " << last);
  CHECK(last < first - 0.3);
  CHECK(last < std::log(1024.0) - 1.5);  // well below a uniform guess
  // MFU: FLOPs per token (6 N + 12 L H Q T, N without the tied embedding's double count) times
  // tokens/s over train.peak_flops.
  int64_t params = 0;
  for (const auto& [name, t] : ltrain::io::loadSafetensors(dir / "run/model.safetensors"))
    params += t.numel();
  const double flops = 6.0 * static_cast<double>(params) + 12.0 * 4 * 4 * 32 * 128;
  const auto train = ltrain::test::metricRecords(dir / "run/metrics.jsonl", "train");
  REQUIRE(!train.empty());
  const auto& w = train.back();
  REQUIRE(w.contains("mfu"));
  CHECK(w["mfu"].get<double>() ==
        Approx(flops * w["tokens_per_s"].get<double>() / 1e11).epsilon(1e-6));
  CHECK(std::filesystem::exists(dir / "run/tokenizer.json"));

  auto g = runLtrain({"generate", "--run", dir / "run", "--prompt", "The best", "--max-new-tokens",
                      "30", "--temperature", "0.8", "--top-k", "40", "--seed", "1"});
  INFO(g.err);
  REQUIRE(g.exit_code == 0);
  CHECK_THAT(g.out, StartsWith("The best"));
  CHECK(g.out.size() > std::string("The best").size() + 20);
  CHECK_THAT(g.err, Contains("generated 30 tokens"));
}

TEST_CASE("a llama on llm.c shards killed mid-epoch resumes to the uninterrupted weights",
          "[dist]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "data");
  writeShard(dir / "data/train_000000.bin", 900, 1, 64);
  writeShard(dir / "data/train_000001.bin", 700, 2, 64);
  writeShard(dir / "data/val_000000.bin", 300, 3, 64);
  auto args = [&](const std::string& out) {
    return std::vector<std::string>{"train",
                                    kConfig,
                                    "data.path=" + (dir / "data"),
                                    "model.vocab_size=64",
                                    "model.n_layer=2",
                                    "model.n_embd=32",
                                    "model.intermediate_size=64",
                                    "model.block_size=16",
                                    "data.batch_size=8",
                                    "train.epochs=3",
                                    "train.max_steps=30",
                                    "train.checkpoint_every=7",
                                    "train.eval_every=0",
                                    "train.log_every=5",
                                    "train.threads=1",
                                    "--output-dir",
                                    out};
  };
  auto full = runLtrain(args(dir / "full"));
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  // (900 - 16) / 16 + (700 - 16) / 16 = 55 + 42 = 97 blocks: 13 steps an epoch; killed in the
  // second epoch, after step 20, and restarted from the step-14 checkpoint.
  auto a = args(dir / "cut");
  a.insert(a.begin() + 1, {"--nproc-per-node", "1", "--max-restarts", "1"});
  auto r = runLtrain(a, {{"LTRAIN_FAULT_KILL_AT_STEP", "20"}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Contains("step-00000014.pt"));
  CHECK(readText(dir / "cut/model.safetensors") == readText(dir / "full/model.safetensors"));
}

TEST_CASE(
    "ltrain export refuses a directory of someone else's files and leaves them as they were") {
  TempDir dir;
  ltrain::test::writeText(dir / "t.txt", std::string(400, 'a') + std::string(400, 'b'));
  auto t = runLtrain({"train", kConfig, "data.dataset=text", "data.path=" + (dir / "t.txt"),
                      "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.n_kv_head=1",
                      "model.intermediate_size=16", "model.block_size=8", "train.max_steps=2",
                      "train.threads=1", "--output-dir", dir / "run"});
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  std::filesystem::create_directories(dir / "hf");
  ltrain::test::writeText(dir / "hf/config.json", "{\"mine\": true}\n");
  auto e = runLtrain({"export", "--run", dir / "run", "--hf", dir / "hf"});
  CHECK(e.exit_code == 2);
  CHECK_THAT(e.err, Contains("export directory '" + (dir / "hf") +
                             "' holds files that ltrain did not write ('config.json')"));
  CHECK(readText(dir / "hf/config.json") == "{\"mine\": true}\n");
  // A new directory is written, with the run's vocabulary beside the weights.
  auto ok = runLtrain({"export", "--run", dir / "run", "--hf", dir / "hf2"});
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK_THAT(ok.out, Contains("exported llama"));
  for (const char* f :
       {"config.json", "model.safetensors", "generation_config.json", "vocabulary.json"})
    CHECK(std::filesystem::exists(dir / ("hf2/" + std::string(f))));
}

TEST_CASE("prepare_tokens.py writes only into a new or empty directory, or over its own output",
          "[hf]") {
  TempDir dir;
  const std::string script = std::string(LTRAIN_SOURCE_DIR) + "/scripts/prepare_tokens.py";
  const std::string text = "/usr/share/games/fortunes/cookie";
  auto prepare = [&](const std::string& out, bool overwrite) {
    std::vector<std::string> a{LTRAIN_PYTHON, script, text, "--out", out, "--vocab-size", "300"};
    if (overwrite) a.push_back("--overwrite");
    return ltrain::test::runProcess(a);
  };
  std::filesystem::create_directories(dir / "mine");
  ltrain::test::writeText(dir / "mine/tokenizer.json", "my own");
  ltrain::test::writeText(dir / "mine/notes.md", "keep");
  auto refused = prepare(dir / "mine", true);
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Contains("holds files this script did not write ('notes.md')"));
  CHECK(readText(dir / "mine/tokenizer.json") == "my own");
  CHECK(readText(dir / "mine/notes.md") == "keep");

  auto first = prepare(dir / "data", false);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  auto again = prepare(dir / "data", false);
  CHECK(again.exit_code != 0);
  CHECK_THAT(again.err, Contains("pass --overwrite"));
  CHECK(prepare(dir / "data", true).exit_code == 0);
  CHECK(std::filesystem::exists(dir / "data/train_000000.bin"));

  // One text of no '%' separators (a book): cut into paragraphs, validation among them.
  ltrain::test::writeText(dir / "book.txt",
                          "The first paragraph.\nIt goes on.\n\nThe second "
                          "one.\n\nAnd a third, at the end.\n");
  auto book = ltrain::test::runProcess(
      {LTRAIN_PYTHON, script, dir / "book.txt", "--out", dir / "book", "--vocab-size", "300"});
  INFO(book.err);
  CHECK(book.exit_code == 0);
  CHECK_THAT(book.err, Contains("cut into 3 at blank lines"));
  CHECK(std::filesystem::exists(dir / "book/val_000000.bin"));
}
