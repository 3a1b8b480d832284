#include "ltrain/models/module_paths.h"

#include <vector>

namespace ltrain::models {
namespace {

std::vector<std::string> pathElements(const std::string& path) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t dot; (dot = path.find('.', from)) != std::string::npos; from = dot + 1)
    out.push_back(path.substr(from, dot - from));
  out.push_back(path.substr(from));
  return out;
}

}  // namespace

void forEachModule(const Classifier& model,
                   const std::function<void(const std::string& path, torch::nn::Module&)>& visit) {
  for (size_t i = 0; i < model->layers->size(); ++i) {
    const std::string prefix = model->layerPrefix(i);
    for (const auto& item : model->layers->ptr(i)->named_modules())
      visit(item.key().empty() ? prefix.substr(0, prefix.size() - 1) : prefix + item.key(),
            *item.value());
  }
}

bool pathMatches(const std::string& pattern, const std::string& path) {
  const auto want = pathElements(pattern), have = pathElements(path);
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != "*" && want[i] != have[i]) return false;
  return true;
}

}  // namespace ltrain::models
