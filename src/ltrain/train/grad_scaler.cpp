#include "ltrain/train/grad_scaler.h"

namespace ltrain::train {

void GradScaler::update(bool finite) {
  if (!finite) {
    scale_ *= backoff_;
    tracker_ = 0;
  } else if (++tracker_ >= interval_) {
    scale_ *= growth_;
    tracker_ = 0;
  }
}

}  // namespace ltrain::train
