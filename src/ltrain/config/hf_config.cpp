#include "ltrain/config/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/json.h"
#include "ltrain/models/spec.h"

namespace ltrain::config {
namespace {

bool same(const YAML::Node& a, const YAML::Node& b) {
  if (a.Scalar() == b.Scalar()) return true;
  double x, y;
  if (YAML::convert<double>::decode(a, x) && YAML::convert<double>::decode(b, y))
    return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y));
  return false;
}

}  // namespace

YAML::Node hfValue(const io::Json& v) {
  if (v.is_boolean()) return YAML::Node(v.get<bool>());
  if (v.is_number_integer()) return YAML::Node(v.get<int64_t>());
  if (v.is_number()) return YAML::Node(fmt::format("{}", v.get<double>()));
  if (v.is_string()) return YAML::Node(v.get<std::string>());
  return YAML::Node();
}

void HfMerger::take(const std::string& path, const std::string& hf_key, const YAML::Node& value) {
  const Option* opt = findOption(path);
  if (set_.count(path)) {
    const YAML::Node mine = opt->read(lc_.cfg);
    if (!same(mine, value))
      throw UsageError(fmt::format("{}{} is {} but '{}' has {} {}", lc_.where(path), path,
                                   mine.Scalar(), file_, hf_key, value.Scalar()));
    return;
  }
  try {
    opt->assign(lc_.cfg, value);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("'{}': {} {} does not fit {}: {}", file_, hf_key, value.Scalar(),
                                 path, e.what()));
  }
  lc_.sources[path] = fmt::format("{} ({})", file_, hf_key);
  set_[path] = true;
}

void HfMerger::fields(const std::vector<Field>& list) {
  for (const auto& f : list)
    if (j_.contains(f.hf_key) && !j_[f.hf_key].is_null())
      take(f.path, f.hf_key, hfValue(j_[f.hf_key]));
}

void HfMerger::unsupported(const std::string& what) const {
  throw UsageError(fmt::format("'{}': {}, which ltrain's {} does not implement", file_, what,
                               lc_.cfg.model.name));
}

bool isHfModelDir(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::is_directory(path, ec) &&
         std::filesystem::is_regular_file(std::filesystem::path(path) / "config.json", ec);
}

void mergeHfConfig(LoadedConfig& lc, std::map<std::string, bool>& explicitly_set) {
  const std::string dir = lc.cfg.model.init_from;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return;
  if (!isHfModelDir(dir))
    throw UsageError(fmt::format(
        "{}model.init_from '{}' is a directory without config.json: expected a Hugging Face "
        "model directory (config.json and model.safetensors) or a .safetensors file",
        lc.where("model.init_from"), dir));
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  io::Json j = io::readJsonFile(file);
  if (!j.is_object()) throw UsageError(fmt::format("'{}' is not a JSON object", file));
  const std::string type = j.value("model_type", "");
  const models::ModelSpec* spec = nullptr;
  std::vector<std::string> known;
  for (const auto& s : models::modelSpecs())
    for (const auto& t : s.hf.model_types) {
      known.push_back(t);
      if (t == type) spec = &s;
    }
  if (!spec)
    throw UsageError(fmt::format("'{}': model_type '{}'; ltrain imports {} models", file, type,
                                 models::listed(known, "and")));
  const std::string& name = spec->traits.name;
  if (explicitly_set.count("model.name") && lc.cfg.model.name != name)
    throw UsageError(fmt::format("{}model.name is '{}' but '{}' has model_type {} (model.name {})",
                                 lc.where("model.name"), lc.cfg.model.name, file, type, name));
  lc.cfg.model.name = name;
  if (!explicitly_set.count("model.name")) {
    lc.sources["model.name"] = fmt::format("{} (model_type)", file);
    explicitly_set["model.name"] = true;
  }
  HfMerger m(lc, explicitly_set, file, std::move(j));
  spec->hf.import_config(m);
}

}  // namespace ltrain::config
