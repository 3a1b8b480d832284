// The progress bar's text on a terminal.
#include <catch2/catch.hpp>

#include <cmath>

#include "ltrain/train/progress.h"

using ltrain::train::ProgressBar;

TEST_CASE("the progress bar says loss - until the first window has one") {
  CHECK(ProgressBar::line(1, 3, 0, 120, std::nan(""), 0, std::nan("")) ==
        "ep 1/3 [........................] 0/120 | loss - | 0 samples/s | ETA --:--");
  CHECK(ProgressBar::line(2, 3, 60, 120, 2.30258, 812.4, 65) ==
        "ep 2/3 [############............] 60/120 | loss 2.3026 | 812 samples/s | ETA 1:05");
}
