// The list of model builders, from models/families.def.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ltrain/common/errors.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/spec.h"

#define LTRAIN_FAMILY(F)        \
  namespace ltrain::models::F { \
  ModelBuilder builder();       \
  }
#include "ltrain/models/families.def"
#undef LTRAIN_FAMILY

namespace ltrain::models {

const ModelBuilder& modelBuilder(const std::string& name) {
  static const std::vector<std::pair<std::string, ModelBuilder>> builders{
#define LTRAIN_FAMILY(F) {#F, F::builder()},
#include "ltrain/models/families.def"
#undef LTRAIN_FAMILY
  };
  for (const auto& [n, b] : builders)
    if (n == name) return b;
  std::vector<std::string> names;
  for (const auto& [n, b] : builders) names.push_back(n);
  throw UsageError(
      fmt::format("model.name: unknown model '{}', expected {}", name, fmt::join(names, "|")));
}

}  // namespace ltrain::models
