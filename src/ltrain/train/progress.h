// The live one-line progress bar on rank 0 when stdout is a terminal (epoch, step/total, loss,
// samples/s, ETA), redrawn at most ten times a second. Elsewhere (a pipe, a file, a launcher's
// prefixed output) it stays off and the periodic log lines say the same, with no control
// characters.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace ltrain::train {

// "m:ss", or "h:mm:ss" from an hour; "--:--" for a time not known (NaN, negative).
std::string clockTime(double seconds);

class ProgressBar {
 public:
  explicit ProgressBar(bool main_rank);
  ~ProgressBar();
  bool enabled() const { return enabled_; }
  void update(int64_t epoch, int64_t epochs, int64_t step, int64_t total, double loss,
              double samples_per_s, double eta_s);
  // Erases the bar so that a log line can be printed; the next update draws it again.
  void clear();
  // The bar's text: "ep 1/3 [######..] 40/120 | loss 2.3026 | 812 samples/s | ETA 00:01:05";
  // "loss -" until the first logging window has a loss (NaN).
  static std::string line(int64_t epoch, int64_t epochs, int64_t step, int64_t total, double loss,
                          double samples_per_s, double eta_s);

 private:
  bool enabled_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace ltrain::train
