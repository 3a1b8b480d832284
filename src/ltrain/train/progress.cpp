#include "ltrain/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ltrain::train {

std::string clockTime(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{:d}:{:02d}", s / 60, s % 60);
}

ProgressBar::ProgressBar(bool main_rank) {
  const char* term = std::getenv("TERM");
  enabled_ = main_rank && isatty(STDOUT_FILENO) && !(term && std::strcmp(term, "dumb") == 0);
}

ProgressBar::~ProgressBar() {
  clear();
}

void ProgressBar::update(int64_t epoch, int64_t epochs, int64_t step, int64_t total, double loss,
                         double samples_per_s, double eta_s) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (step != total && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  fmt::print("\r\x1b[2K{}", line(epoch, epochs, step, total, loss, samples_per_s, eta_s));
  std::fflush(stdout);
  drawn_ = true;
}

std::string ProgressBar::line(int64_t epoch, int64_t epochs, int64_t step, int64_t total,
                              double loss, double samples_per_s, double eta_s) {
  constexpr int kWidth = 24;
  const int filled = total > 0 ? static_cast<int>(kWidth * step / total) : 0;
  return fmt::format("ep {}/{} [{}{}] {}/{} | loss {} | {:.0f} samples/s | ETA {}", epoch, epochs,
                     std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kWidth - filled), '.'), step, total,
                     std::isnan(loss) ? std::string("-") : fmt::format("{:.4f}", loss),
                     samples_per_s, clockTime(eta_s));
}

void ProgressBar::clear() {
  if (!enabled_ || !drawn_) return;
  fmt::print("\r\x1b[2K");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace ltrain::train
