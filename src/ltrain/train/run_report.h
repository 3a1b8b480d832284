// report.html: one self-contained page per run directory (no script or style from elsewhere,
// opened from disk anywhere) with what a user looks at after a run: the loss and metric curves
// (metrics.jsonl), throughput and memory (summary.json), and the resolved config (config.yaml).
// A sweep directory gets sweep_report.html: its trials ranked, their metric plotted against each
// swept value, each linked to its own report.
#pragma once
#include <string>
#include <vector>

namespace ltrain::train {

// Writes RUN_DIR/report.html from the files the run wrote; what is missing is left out.
void writeRunReport(const std::string& run_dir);

struct SweepReportRow {
  int number = 0;
  std::vector<std::pair<std::string, std::string>> values;  // swept key -> value
  std::string status;                                       // completed, failed, ...
  bool has_metric = false;
  double metric = 0;
  std::string run_dir;  // relative to the sweep directory
};

// Writes DIR/sweep_report.html: `rows` in rank order, `metric` by each swept key.
void writeSweepReport(const std::string& dir, const std::string& metric,
                      const std::vector<SweepReportRow>& rows);

struct RunsReportRow {
  std::string run_dir;  // as found below the listed directory
  std::string status;
  std::vector<std::pair<std::string, std::string>> columns;  // name -> value as printed
};

// Writes `out`: every run of `ltrain runs DIR` in a table linked to its report.html, and their
// training losses in one chart. UsageError when `out` is a file ltrain did not write (kept).
void writeRunsReport(const std::string& dir, const std::vector<RunsReportRow>& rows,
                     const std::string& out);

}  // namespace ltrain::train
