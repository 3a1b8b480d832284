#include "ltrain/config/model_families.h"

#include "ltrain/models/spec.h"

namespace ltrain::config {

const std::vector<ModelFamily>& modelFamilies() {
  static const std::vector<ModelFamily> families = [] {
    std::vector<ModelFamily> out;
    for (const auto& s : models::modelSpecs()) out.push_back(s.traits);
    return out;
  }();
  return families;
}

const ModelFamily& modelFamily(const std::string& name) {
  for (const auto& f : modelFamilies())
    if (f.name == name) return f;
  static const ModelFamily none{};
  return none;
}

}  // namespace ltrain::config
