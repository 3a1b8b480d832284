#include "ltrain/config/model_families.h"

namespace ltrain::config {

const std::vector<ModelFamily>& modelFamilies() {
  //                                        name, language model, own, images, repeated blocks
  static const std::vector<ModelFamily> families{
      {"mlp", false, false, false, false},       {"cnn", false, false, true, false},
      {"resnet", false, false, true, true},      {"gpt", true, false, false, true},
      {"llama", true, false, false, true},       {"layers", false, true, false, false},
      {"torchscript", false, true, false, false}};
  return families;
}

const ModelFamily& modelFamily(const std::string& name) {
  for (const auto& f : modelFamilies())
    if (f.name == name) return f;
  static const ModelFamily none{};
  return none;
}

}  // namespace ltrain::config
