// report.html and sweep_report.html opened in a real browser (Debian's chromium, headless): the
// page a run leaves is read as a user's browser reads it, and the points its charts draw are
// counted by the browser's own SVG layer (the page's script writes the count into the page), so
// a page that a browser cannot lay out fails here.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <sstream>

#include "ltrain/io/json.h"
#include "support/process.h"
#include "support/run_files.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::runProcess;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {

// The page as chromium leaves it once its script ran.
std::string browserDom(const std::string& page) {
  auto r = runProcess({"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                       "--dump-dom", "file://" + page});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

// The points of every polyline in the page's source.
int pointsInSource(const std::string& html) {
  const std::regex polyline(R"(<polyline[^>]*points="([^"]*)\")");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    std::istringstream pts((*it)[1].str());
    for (std::string p; pts >> p;) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("a run leaves report.html: curves, throughput, memory and config, drawn by a browser",
          "[browser]") {
  TempDir dir;
  writeText(dir / "c.yaml", "seed: 1\n");
  writeText(dir / "t.txt", ltrain::test::textCorpus(200));
  auto r = runLtrain({"train", dir / "c.yaml", "data.dataset=text", "data.path=" + (dir / "t.txt"),
                      "model.name=gpt", "model.n_layer=1", "model.n_embd=32", "model.n_head=2",
                      "model.block_size=16", "train.max_steps=12", "train.log_every=2",
                      "train.eval_every=4", "train.threads=1", "--nproc-per-node", "2",
                      "--output-dir", dir / "run"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = readText(dir / "run/report.html");
  CHECK_THAT(html, Contains("ltrain run run <span class=\"completed\">completed</span>"));
  CHECK_THAT(html, Contains("<th>peak RSS (MiB)</th>"));
  CHECK_THAT(html, Contains("Memory by phase"));
  CHECK_THAT(html, Contains("<td>first step</td>"));
  CHECK_THAT(html, Contains("Resolved config"));
  CHECK_THAT(html, Contains("n_embd: 32"));
  // Self-contained: nothing fetched from elsewhere.
  CHECK(html.find("src=\"http") == std::string::npos);
  CHECK(html.find("href=\"http") == std::string::npos);
  // Six logged steps (loss, learning rate, throughput, gradient norm) and three evaluations
  // (loss, accuracy, perplexity).
  const int points = pointsInSource(html);
  CHECK(points == 6 * 4 + 3 * 3);
  const std::string dom = browserDom(dir / "run/report.html");
  CHECK_THAT(dom, Contains(std::to_string(points) + " points drawn"));
  // summary.json keeps the phases the page shows.
  const auto summary = ltrain::test::readJson(dir / "run/summary.json");
  REQUIRE(summary.contains("memory_phases"));
  CHECK(summary["memory_phases"].size() >= 3);  // build, place, first step
}

TEST_CASE("a sweep leaves sweep_report.html: trials ranked, linked, the metric by each value",
          "[browser]") {
  TempDir dir;
  writeText(dir / "base.yaml",
            "name: cnn\n"
            "model: {name: cnn, channels: [4, 8], fc: [16]}\n"
            "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_train_samples: 256, "
            "synthetic_test_samples: 64}\n");
  auto r = runLtrain({"train", dir / "base.yaml", "-m", "optimizer.lr=0.001,0.01,0.1",
                      "train.epochs=1", "--output-dir", dir / "sweep"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = readText(dir / "sweep/sweep_report.html");
  CHECK_THAT(html, Contains("3 trials, ranked by test_accuracy"));
  CHECK_THAT(html, Contains("<th>optimizer.lr</th>"));
  // Learning rates three decades apart: plotted on a log axis.
  CHECK_THAT(html, Contains("log10 optimizer.lr"));
  for (const auto& e : std::filesystem::directory_iterator(dir / "sweep"))
    if (e.is_directory()) {
      const std::string trial = e.path().filename().string();
      CHECK_THAT(html, Contains("href=\"" + trial + "/report.html\""));
      CHECK(std::filesystem::exists(e.path() / "report.html"));
    }
  const int points = pointsInSource(html);
  CHECK(points == 3);
  CHECK_THAT(browserDom(dir / "sweep/sweep_report.html"), Contains("3 points drawn"));
}

TEST_CASE("ltrain runs --html: every run linked to its report, their losses in one chart",
          "[browser]") {
  TempDir dir;
  writeText(dir / "c.yaml", "seed: 1\n");
  for (const std::string lr : {"0.1", "0.01"}) {
    auto args = ltrain::test::syntheticRun(dir / "c.yaml", dir / ("runs/lr" + lr),
                                           {"optimizer.lr=" + lr, "train.epochs=1"});
    auto r = runLtrain(args);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  auto r = runLtrain({"runs", dir / "runs", "--html", dir / "index.html"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("lr0.1"));  // the table is printed as before
  const std::string html = readText(dir / "index.html");
  CHECK_THAT(html, Contains("2 run(s)"));
  CHECK_THAT(html, Contains("href=\"runs/lr0.1/report.html\""));
  CHECK_THAT(html, Contains("href=\"runs/lr0.01/report.html\""));
  // 256 examples of batch 32, logged every 2 steps: 4 points a run.
  const int points = pointsInSource(html);
  CHECK(points == 2 * 4);
  CHECK_THAT(browserDom(dir / "index.html"), Contains(std::to_string(points) + " points drawn"));
  // Written again over its own page; a file of the user's is kept and named.
  CHECK(runLtrain({"runs", dir / "runs", "--html", dir / "index.html"}).exit_code == 0);
  writeText(dir / "notes.html", "<p>mine</p>\n");
  auto foreign = runLtrain({"runs", dir / "runs", "--html", dir / "notes.html"});
  CHECK(foreign.exit_code == 2);
  CHECK_THAT(foreign.err, Contains("'" + (dir / "notes.html") +
                                   "' exists and ltrain did not "
                                   "write it: not replacing it"));
  CHECK(readText(dir / "notes.html") == "<p>mine</p>\n");
}
