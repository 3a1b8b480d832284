// Error types that decide ltrain's exit code: a UsageError (bad usage, config or data) exits 2,
// anything else raised while training exits 1. Messages are one line naming the thing and what was
// expected.
#pragma once
#include <stdexcept>
#include <string>

namespace ltrain {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ltrain
