// Mixed precision for the forward pass: bf16 autocast on the step's device, off for fp32.
#pragma once
#include <ATen/autocast_mode.h>

#include "ltrain/config/modes.h"

namespace ltrain::compute {

class AutocastScope {
 public:
  AutocastScope(config::Precision precision, c10::DeviceType device)
      : device_(device), on_(precision != config::Precision::kFp32) {
    if (!on_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(device_);
    prev_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_dtype(
        device_, precision == config::Precision::kFp16 ? at::kHalf : at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~AutocastScope() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool on_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

}  // namespace ltrain::compute
