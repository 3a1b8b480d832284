#include "ltrain/train/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"

namespace ltrain::train {
namespace {

namespace fs = std::filesystem;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), finite only
};

// A line chart as inline SVG (hand-written: a page with no script or library to fetch); x and y
// ranges from the data, five labelled ticks on each axis, a legend.
std::string chart(const std::string& title, const std::string& x_label,
                  const std::vector<Series>& series) {
  constexpr double W = 640, H = 260, left = 70, right = 20, top = 30, bottom = 40;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t n = 0;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points)
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y), ++n;
  if (n == 0) return "";
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0)
    y0 -= std::max(1e-12, std::abs(y0) * 0.05), y1 += std::max(1e-12, std::abs(y1) * 0.05);
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return H - bottom - (y - y0) / (y1 - y0) * (H - top - bottom); };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  std::string svg = fmt::format(
      R"(<figure><svg viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">)"
      R"(<text x="{}" y="18" class="title">{}</text>)",
      W, H, W, H, escape(title), left, escape(title));
  svg += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" class="axis"/>)", left,
                     H - bottom, W - right);
  svg += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" class="axis"/>)", left, top,
                     H - bottom);
  for (int k = 0; k <= 4; ++k) {
    const double x = x0 + (x1 - x0) * k / 4, y = y0 + (y1 - y0) * k / 4;
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{:.4g}</text>)",
                       px(x), H - bottom + 16, x);
    svg += fmt::format(R"(<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{:.4g}</text>)",
                       left - 6, py(y) + 4, y);
    svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="grid"/>)", left,
                       py(y), W - right, py(y));
  }
  svg += fmt::format(R"(<text x="{}" y="{}" class="tick" text-anchor="middle">{}</text>)",
                     (left + W - right) / 2, H - 6, escape(x_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    if (s.points.empty()) continue;
    const char* color = colors[i % 5];
    std::string pts;
    for (const auto& [x, y] : s.points) pts += fmt::format("{:.2f},{:.2f} ", px(x), py(y));
    svg += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)",
                       color, pts);
    if (s.points.size() == 1)  // a lone point (one evaluation) as a dot
      svg += fmt::format(R"(<circle cx="{:.2f}" cy="{:.2f}" r="3" fill="{}"/>)",
                         px(s.points[0].first), py(s.points[0].second), color);
    svg += fmt::format(R"(<text x="{}" y="{}" class="legend" fill="{}">{}</text>)", W - right - 150,
                       top + 14 * static_cast<double>(i + 1), color, escape(s.name));
  }
  return svg + "</svg></figure>\n";
}

constexpr const char* kStyle = R"(<style>
body{font:14px system-ui,sans-serif;margin:2em;max-width:1000px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:1.5em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
pre{background:#f6f6f6;padding:1em;overflow:auto}figure{margin:0.5em 0}
.axis{stroke:#444}.grid{stroke:#eee}.tick{font-size:11px;fill:#555}
.title{font-size:13px;font-weight:600}.legend{font-size:12px}
.completed{color:#2a7}.failed{color:#c33}.interrupted{color:#c80}
</style>
)";

// Counts what the browser drew: the page says so once a real browser laid out its charts.
constexpr const char* kDrawnScript = R"(<script>
const drawn=[...document.querySelectorAll('polyline')].reduce((n,p)=>n+p.points.numberOfItems,0);
document.getElementById('drawn').textContent=drawn+' points drawn';
</script>
)";

// Marks ltrain's pages: `runs --html` replaces only a file that carries it.
constexpr const char* kGenerator = R"(<meta name="generator" content="ltrain">)";

std::string page(const std::string& title, const std::string& body) {
  return std::string("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">") +
         kGenerator + "<title>" + escape(title) + "</title>\n" + kStyle + "</head><body>\n" + body +
         "<p class=\"tick\" id=\"drawn\"></p>\n" + kDrawnScript + "</body></html>\n";
}

std::string number(const io::Json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return fmt::format("{:.6g}", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// What a run's summary.json says, the figures people read first.
std::string summaryTable(const io::Json& s) {
  static const std::vector<std::pair<const char*, const char*>> rows{
      {"status", "status"},
      {"steps", "steps"},
      {"epochs", "epochs"},
      {"world_size", "processes"},
      {"wall_s", "wall time (s)"},
      {"samples_per_s", "samples/s"},
      {"train_loss", "train loss (last epoch)"},
      {"test_loss", "held-out loss"},
      {"test_accuracy", "held-out accuracy"},
      {"val_perplexity", "validation perplexity"},
      {"skipped_steps", "skipped steps"},
      {"peak_rss_mb", "peak RSS (MiB)"},
      {"peak_cuda_memory_mb", "peak GPU memory (MiB)"},
      {"parameter_mb", "parameters per rank (MiB)"},
      {"gradient_mb", "gradients per rank (MiB)"},
      {"optimizer_state_mb", "optimizer state per rank (MiB)"},
      {"gathered_peak_mb", "ZeRO-3 gathered peak (MiB)"},
      {"error", "error"}};
  std::string t = "<table>\n";
  for (const auto& [key, label] : rows)
    if (s.contains(key))
      t += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", label, escape(number(s[key])));
  return t + "</table>\n";
}

// summary.json's memory_phases (rank 0's): resident memory through build, init_from, resume,
// first step and save.
std::string memoryTable(const io::Json& summary) {
  if (!summary.contains("memory_phases") || !summary["memory_phases"].is_array()) return "";
  std::string rows;
  for (const auto& j : summary["memory_phases"]) {
    if (!j.is_object() || !j.contains("phase")) continue;
    rows +=
        fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                    escape(number(j["phase"])), escape(number(j.value("start_rss_mb", io::Json()))),
                    escape(number(j.value("peak_rss_mb", io::Json()))),
                    escape(number(j.value("end_rss_mb", io::Json()))));
  }
  if (rows.empty()) return "";
  return "<h2>Memory by phase (rank 0)</h2>\n<table><tr><th>phase</th><th>start RSS "
         "(MiB)</th><th>peak RSS (MiB)</th><th>end RSS (MiB)</th></tr>\n" +
         rows + "</table>\n";
}

}  // namespace

void writeRunReport(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::error_code ec;
  const io::Json summary =
      fs::exists(dir / "summary.json", ec)
          ? io::parseJsonOrDiscard(io::readFile((dir / "summary.json").string()))
          : io::Json::object();
  // Curves: the training loss, learning rate, throughput and gradient norm by step; each held-out
  // split's loss and metrics by step.
  Series loss{"train loss", {}}, lr{"learning rate", {}}, speed{"", {}}, grad{"grad norm", {}};
  std::map<std::string, Series> held_loss, held_accuracy, held_perplexity;
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  auto add = [](Series& s, double x, const io::Json& j, const char* key) {
    if (j.contains(key) && j[key].is_number() && std::isfinite(j[key].get<double>()))
      s.points.emplace_back(x, j[key].get<double>());
  };
  while (std::getline(metrics, line)) {
    const auto j = io::parseJsonOrDiscard(line);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
    const double step = j["step"].get<double>();
    const std::string split = j.value("split", "");
    if (split == "train") {
      add(loss, step, j, "loss"), add(lr, step, j, "lr"), add(grad, step, j, "grad_norm");
      const char* rate = j.contains("tokens_per_s") ? "tokens_per_s" : "samples_per_s";
      speed.name = j.contains("tokens_per_s") ? "tokens/s" : "samples/s";
      add(speed, step, j, rate);
    } else if (!split.empty()) {
      held_loss[split].name = split + " loss";
      add(held_loss[split], step, j, "loss");
      held_accuracy[split].name = split + " accuracy";
      add(held_accuracy[split], step, j, "accuracy");
      held_perplexity[split].name = split + " perplexity";
      add(held_perplexity[split], step, j, "perplexity");
    }
  }
  std::vector<Series> losses{loss}, accuracies, perplexities;
  for (auto& [split, s] : held_loss) losses.push_back(s);
  for (auto& [split, s] : held_accuracy) accuracies.push_back(s);
  for (auto& [split, s] : held_perplexity) perplexities.push_back(s);

  const std::string name =
      dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  const std::string status = summary.value("status", "running");
  std::string body = fmt::format("<h1>ltrain run {} <span class=\"{}\">{}</span></h1>\n",
                                 escape(name), escape(status), escape(status));
  body += "<p class=\"tick\">" + escape(fs::absolute(dir, ec).string()) + "</p>\n";
  body += summaryTable(summary);
  body += "<h2>Curves</h2>\n";
  body += chart("loss", "step", losses);
  body += chart("held-out accuracy", "step", accuracies);
  body += chart("held-out perplexity", "step", perplexities);
  body += chart("learning rate", "step", {lr});
  body += chart("throughput (" + speed.name + ")", "step", {speed});
  body += chart("gradient norm (before clipping)", "step", {grad});
  body += memoryTable(summary);
  if (fs::exists(dir / "config.yaml", ec))
    body += "<h2>Resolved config</h2>\n<pre>" +
            escape(io::readFile((dir / "config.yaml").string())) + "</pre>\n";
  io::writeFileAtomic((dir / "report.html").string(), page("ltrain run " + name, body));
}

void writeSweepReport(const std::string& dir, const std::string& metric,
                      const std::vector<SweepReportRow>& rows) {
  std::string body =
      fmt::format("<h1>ltrain sweep {}</h1>\n<p>{} trials, ranked by {}</p>\n",
                  escape(fs::path(dir).filename().string()), rows.size(), escape(metric));
  body += "<table><tr><th>rank</th><th>trial</th>";
  std::vector<std::string> keys;
  if (!rows.empty())
    for (const auto& [k, v] : rows.front().values) keys.push_back(k);
  for (const auto& k : keys) body += "<th>" + escape(k) + "</th>";
  body += fmt::format("<th>{}</th><th>status</th><th>report</th></tr>\n", escape(metric));
  int rank = 0;
  for (const auto& r : rows) {
    body += fmt::format("<tr><td>{}</td><td>{}</td>", r.has_metric ? std::to_string(++rank) : "-",
                        r.number);
    for (const auto& [k, v] : r.values) body += "<td>" + escape(v) + "</td>";
    body += fmt::format(
        "<td>{}</td><td class=\"{}\">{}</td><td><a href=\"{}/report.html\">report</a></td></tr>\n",
        r.has_metric ? fmt::format("{:.6g}", r.metric) : "-", escape(r.status), escape(r.status),
        escape(r.run_dir));
  }
  body += "</table>\n<h2>" + escape(metric) + " by each swept value</h2>\n";
  // A swept value that reads as a number is an axis; a learning rate spans decades: log10 then.
  for (size_t k = 0; k < keys.size(); ++k) {
    Series s{metric, {}};
    bool numeric = true;
    for (const auto& r : rows) {
      if (!r.has_metric) continue;
      try {
        size_t used = 0;
        const double v = std::stod(r.values[k].second, &used);
        numeric = numeric && used == r.values[k].second.size();
        s.points.emplace_back(v, r.metric);
      } catch (const std::exception&) {
        numeric = false;
      }
    }
    if (!numeric || s.points.empty()) continue;
    std::sort(s.points.begin(), s.points.end());
    const bool decades =
        s.points.front().first > 0 && s.points.back().first / s.points.front().first >= 100;
    if (decades)
      for (auto& p : s.points) p.first = std::log10(p.first);
    body += chart(metric + " by " + keys[k], decades ? "log10 " + keys[k] : keys[k], {s});
  }
  io::writeFileAtomic(dir + "/sweep_report.html", page("ltrain sweep", body));
}

void writeRunsReport(const std::string& dir, const std::vector<RunsReportRow>& rows,
                     const std::string& out) {
  std::error_code ec;
  if (fs::exists(out, ec) &&
      (!fs::is_regular_file(out, ec) || io::readFile(out).find(kGenerator) == std::string::npos))
    throw UsageError(fmt::format(
        "runs --html: '{}' exists and ltrain did not write it: not replacing it (name another "
        "file)",
        out));
  const fs::path out_dir = fs::absolute(out, ec).parent_path();
  std::string body =
      fmt::format("<h1>ltrain runs below {}</h1>\n<p>{} run(s)</p>\n", escape(dir), rows.size());
  body += "<table><tr><th>run</th><th>status</th>";
  if (!rows.empty())
    for (const auto& [name, v] : rows.front().columns) body += "<th>" + escape(name) + "</th>";
  body += "<th>report</th></tr>\n";
  // The training loss of each run, one line per run (the first ten: a legend stays readable).
  std::vector<Series> losses;
  for (const auto& r : rows) {
    std::string name = fs::relative(r.run_dir, dir, ec).string();
    if (name.empty() || name == ".") name = fs::path(r.run_dir).filename().string();
    body += fmt::format("<tr><td>{}</td><td class=\"{}\">{}</td>", escape(name), escape(r.status),
                        escape(r.status));
    for (const auto& [k, v] : r.columns) body += "<td>" + escape(v) + "</td>";
    const fs::path report = fs::path(r.run_dir) / "report.html";
    body += fs::exists(report, ec)
                ? fmt::format("<td><a href=\"{}\">report</a></td></tr>\n",
                              escape(fs::relative(fs::absolute(report, ec), out_dir, ec).string()))
                : std::string("<td>-</td></tr>\n");
    if (losses.size() >= 10) continue;
    Series s{name, {}};
    std::ifstream metrics(fs::path(r.run_dir) / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto j = io::parseJsonOrDiscard(line);
      if (j.is_object() && j.value("split", "") == "train" && j.contains("step") &&
          j.contains("loss") && j["loss"].is_number() && std::isfinite(j["loss"].get<double>()))
        s.points.emplace_back(j["step"].get<double>(), j["loss"].get<double>());
    }
    losses.push_back(std::move(s));
  }
  body += "</table>\n<h2>Training loss</h2>\n" + chart("train loss", "step", losses);
  io::writeFileAtomic(out, page("ltrain runs", body));
}

}  // namespace ltrain::train
