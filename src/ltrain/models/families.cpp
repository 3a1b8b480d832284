// The list of model specs, from models/families.def.
#include <fmt/format.h>

#include "ltrain/models/spec.h"

#define LTRAIN_FAMILY(F)        \
  namespace ltrain::models::F { \
  ModelSpec spec();             \
  }
#include "ltrain/models/families.def"
#undef LTRAIN_FAMILY

namespace ltrain::models {

const std::vector<ModelSpec>& modelSpecs() {
  static const std::vector<ModelSpec> specs{
#define LTRAIN_FAMILY(F) F::spec(),
#include "ltrain/models/families.def"
#undef LTRAIN_FAMILY
  };
  return specs;
}

const ModelSpec* findModelSpec(const std::string& name) {
  for (const auto& s : modelSpecs())
    if (s.traits.name == name) return &s;
  return nullptr;
}

std::vector<std::string> familiesWhere(bool (*has)(const ModelSpec&)) {
  std::vector<std::string> out;
  for (const auto& s : modelSpecs())
    if (has(s)) out.push_back(s.traits.name);
  return out;
}

std::string listed(const std::vector<std::string>& names, const std::string& last_word) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " " + last_word + " " : ", ") + names[i];
  return out;
}

}  // namespace ltrain::models
