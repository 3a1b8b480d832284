// Config loading: walk the YAML tree against the schema, apply overrides, validate.
#include "ltrain/config/load.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ltrain/common/errors.h"
#include "ltrain/config/adapter_config.h"
#include "ltrain/config/hf_config.h"
#include "ltrain/config/model_families.h"
#include "ltrain/config/schema.h"
#include "ltrain/config/validate.h"

namespace ltrain::config {
namespace {

std::string unknownKey(const std::string& key) {
  std::string hint = closestKey(key);
  return hint.empty() ? fmt::format("unknown key '{}'", key)
                      : fmt::format("unknown key '{}' (did you mean '{}'?)", key, hint);
}

// The line of a "---" that starts a second document, or 0. The first "---" is allowed when
// nothing but comments comes before it.
int secondDocumentLine(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  bool content = false;
  for (int n = 1; std::getline(in, line); ++n) {
    const bool marker = line.rfind("---", 0) == 0 &&
                        (line.size() == 3 || std::isspace(static_cast<unsigned char>(line[3])));
    if (marker && content) return n;
    const auto first = line.find_first_not_of(" \t\r");
    if (!marker && first != std::string::npos && line[first] != '#') content = true;
  }
  return 0;
}

// The YAML of one config file, checked to hold a single mapping of keys.
YAML::Node parseConfigText(const std::string& text, const std::string& origin) {
  // A second document would be ignored by Load. (yaml-cpp 0.7's LoadAll, which could count them,
  // loops forever on some malformed input: found by tests/fuzz/fuzz_config.)
  if (int line = secondDocumentLine(text))
    throw UsageError(
        fmt::format("{}:{}: a second YAML document ('---'); expected one mapping of config keys",
                    origin, line));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UsageError(fmt::format("{}:{}: invalid YAML: {}", origin, e.mark.line + 1, e.msg));
  }
  if (root.IsDefined() && !root.IsNull() && !root.IsMap())
    throw UsageError(fmt::format("{}: expected a mapping of config keys at the top level", origin));
  return root;
}

std::string readConfigFile(const std::string& file, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw UsageError(fmt::format("{} '{}' not found", what, file));
  if (std::filesystem::is_directory(file, ec))
    throw UsageError(fmt::format("{} '{}' is a directory, expected a YAML file", what, file));
  std::ifstream in(file);
  if (!in) throw UsageError(fmt::format("{} '{}' cannot be read", what, file));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Builder {
  LoadedConfig out;
  std::map<std::string, bool> explicitly_set;  // by a file or an override, not a default

  void set(const Option& opt, const YAML::Node& value, const std::string& where) {
    try {
      opt.assign(out.cfg, value);
    } catch (const UsageError& e) {
      const std::string why = e.what();
      throw UsageError(fmt::format("{}: {}{} {}", where, opt.path,
                                   why.rfind("must be", 0) == 0 ? "" : ":", why));
    }
    out.sources[opt.path] = where;
    explicitly_set[opt.path] = true;
  }

  // A config file's keys over what its base chain set: `base: other.yaml` (relative to the file
  // naming it) is applied first, recursively; `chain` holds the files above, to refuse cycles.
  void applyText(const std::string& text, const std::string& origin,
                 std::vector<std::string> chain) {
    const YAML::Node root = parseConfigText(text, origin);
    if (!root.IsDefined() || root.IsNull()) return;
    if (const YAML::Node base = root["base"]) {
      const std::string where = fmt::format("{}:{}", origin, base.Mark().line + 1);
      if (!base.IsScalar() || base.Scalar().empty())
        throw UsageError(where + ": base: expected the path of another config file");
      namespace fs = std::filesystem;
      const fs::path dir = fs::path(origin).parent_path();
      const std::string path =
          (fs::path(base.Scalar()).is_absolute() ? fs::path(base.Scalar()) : dir / base.Scalar())
              .lexically_normal()
              .string();
      chain.push_back(origin);
      std::error_code ec;
      for (const auto& f : chain)
        if (fs::equivalent(f, path, ec)) {
          std::string cycle;
          for (const auto& c : chain) cycle += c + " -> ";
          throw UsageError(fmt::format("{}: base: the chain of base files has a cycle: {}{}", where,
                                       cycle, path));
        }
      std::string base_text;
      try {
        base_text = readConfigFile(path, "base config file");
      } catch (const UsageError& e) {
        throw UsageError(fmt::format("{}: base: {}", where, e.what()));
      }
      applyText(base_text, path, chain);
    }
    walk(root, "", origin);
  }

  void walk(const YAML::Node& map, const std::string& prefix, const std::string& origin) {
    std::map<std::string, int> seen;  // key -> line: YAML parsers keep the last of two silently
    for (auto it = map.begin(); it != map.end(); ++it) {
      const auto mark = it->first.Mark();
      const std::string where = fmt::format("{}:{}", origin, mark.line + 1);
      if (!it->first.IsScalar()) throw UsageError(where + ": keys must be plain names");
      auto [first, fresh] = seen.emplace(it->first.Scalar(), mark.line + 1);
      if (!fresh)
        throw UsageError(fmt::format("{}: duplicate key '{}' (already set on line {})", where,
                                     it->first.Scalar(), first->second));
      if (prefix.empty() && it->first.Scalar() == "base") continue;  // applied before the rest
      const std::string path =
          prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
      if (const Option* opt = findOption(path)) {
        set(*opt, it->second, where);
      } else if (isSection(path)) {
        if (it->second.IsNull()) continue;  // "data:" with nothing under it
        if (!it->second.IsMap())
          throw UsageError(fmt::format("{}: section '{}' must be a mapping of keys", where, path));
        walk(it->second, path, origin);
      } else {
        throw UsageError(fmt::format("{}: {}", where, unknownKey(path)));
      }
    }
  }

  // Hydra's forms: KEY=VALUE sets any key; +KEY=VALUE adds one the files do not set; ~KEY takes
  // one the files set back to its default.
  void applyOverride(const std::string& text) {
    const bool add = !text.empty() && text[0] == '+', remove = !text.empty() && text[0] == '~';
    if (remove) {
      const std::string key = text.substr(1);
      const Option* opt = findOption(key);
      if (!opt) throw UsageError(fmt::format("override '{}': {}", text, unknownKey(key)));
      if (!explicitly_set.count(key))
        throw UsageError(fmt::format(
            "override '{}': {} is not set by the config file, so there is nothing to remove", text,
            key));
      ExperimentConfig fresh = defaults();
      opt->assign(out.cfg, opt->read(fresh));
      out.sources[key] = fmt::format("default (override {})", text);
      explicitly_set.erase(key);
      return;
    }
    auto [key, value] = parseOverride(add ? text.substr(1) : text);
    const Option* opt = findOption(key);
    if (!opt) {
      if (isSection(key))
        throw UsageError(
            fmt::format("override '{}': '{}' is a section; set one of its keys "
                        "(KEY.FIELD=VALUE)",
                        text, key));
      throw UsageError(fmt::format("override '{}': {}", text, unknownKey(key)));
    }
    if (add && explicitly_set.count(key))
      throw UsageError(fmt::format("override '{}': {} is already set ({}); use {}=... to change it",
                                   text, key, out.sources.at(key), key));
    set(*opt, value, fmt::format("override {}", text));
  }
};

// Rules on single options beyond their bounds; cross-option rules are in validate.cpp.
void checkOptions(const LoadedConfig& lc, const std::map<std::string, bool>& explicitly_set) {
  const ExperimentConfig& c = lc.cfg;
  for (const auto& opt : schema()) {
    try {
      checkConstraints(opt, c);
    } catch (const UsageError& e) {
      auto src = lc.sources.find(opt.path);
      throw UsageError(src == lc.sources.end() || !explicitly_set.count(opt.path)
                           ? std::string(e.what())
                           : fmt::format("{}: {}", src->second, e.what()));
    }
    if (!opt.appliesTo(c.model.name) && explicitly_set.count(opt.path))
      throw UsageError(fmt::format("{}: {} is a field of model '{}', but model.name is '{}'",
                                   lc.sources.at(opt.path), opt.path, opt.model, c.model.name));
  }
  if (c.optimizer.betas.size() != 2)
    throw UsageError(fmt::format("optimizer.betas must have 2 values [beta1, beta2], got {}",
                                 c.optimizer.betas.size()));
  if (c.data.synthetic_shape.size() != 3)
    throw UsageError(fmt::format("data.synthetic_shape must be [C, H, W] (3 values), got {}",
                                 c.data.synthetic_shape.size()));
  if (c.model.depth != 18 && c.model.depth != 34)
    throw UsageError(fmt::format("model.depth must be 18 or 34, got {}", c.model.depth));
  if (c.model.kernel_size % 2 == 0)
    throw UsageError(fmt::format("model.kernel_size must be odd, got {}", c.model.kernel_size));
  if (c.name.empty() || c.name.find('/') != std::string::npos)
    throw UsageError(
        fmt::format("name must be a non-empty directory name without '/', got '{}'", c.name));
}

// Defaults that depend on another key, filled in only where the user left them out (so that only
// a value the user wrote can be refused). Language models decay matrices only (nanoGPT's
// parameter groups, as most LLM recipes), the others every parameter (torch.optim's default).
void derivedDefaults(LoadedConfig& lc) {
  const bool lm = modelFamily(lc.cfg.model.name).language_model;
  if (lm && !lc.explicitly_set.count("optimizer.decay")) {
    lc.cfg.optimizer.decay = Decay::kMatrices;
    lc.sources["optimizer.decay"] = fmt::format("default (model {})", lc.cfg.model.name);
  }
  // Gray images take ImageNet's statistics through Pillow's L weights (0.299 R + 0.587 G +
  // 0.114 B, the conversion the loader applies), one value each: the RGB default would be refused
  // for a list length the user never wrote.
  if (lc.cfg.data.channels == 1) {
    const std::vector<double> luma{0.299, 0.587, 0.114};
    for (auto* key : {"data.mean", "data.std"}) {
      if (lc.explicitly_set.count(key)) continue;
      auto& v = std::string(key) == "data.mean" ? lc.cfg.data.mean : lc.cfg.data.std;
      double gray = 0;
      for (size_t c = 0; c < luma.size(); ++c) gray += luma[c] * v[c];
      v = {std::round(gray * 1000) / 1000};
      lc.sources[key] = "default (data.channels 1)";
    }
  }
  // dist.strategy fsdp is ZeRO-3 by its other name (an explicit other stage is refused by
  // validate()).
  if (lc.cfg.dist.strategy == Strategy::kFsdp && !lc.explicitly_set.count("dist.zero")) {
    lc.cfg.dist.zero = 3;
    lc.sources["dist.zero"] = "default (dist.strategy fsdp)";
  }
}

}  // namespace

std::pair<std::string, YAML::Node> parseOverride(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(
        fmt::format("override '{}': expected KEY=VALUE, e.g. optimizer.lr=0.01", text));
  std::string key = text.substr(0, eq), value = text.substr(eq + 1);
  if (value.empty())
    throw UsageError(fmt::format("override '{}': expected a value after '='", text));
  try {
    return {key, YAML::Load(value)};
  } catch (const YAML::Exception& e) {
    throw UsageError(fmt::format("override '{}': value is not valid YAML ({})", text, e.msg));
  }
}

LoadedConfig loadConfigText(const std::string& text, const std::string& origin,
                            const std::vector<std::string>& overrides) {
  Builder b;
  b.out.cfg = defaults();
  b.out.file = origin;
  b.out.overrides = overrides;
  for (const auto& o : schema()) b.out.sources[o.path] = "default";
  b.applyText(text, origin, {});
  for (const auto& o : overrides) b.applyOverride(o);
  b.out.explicitly_set = b.explicitly_set;
  mergeHfConfig(b.out, b.out.explicitly_set);
  mergeAdapterConfig(b.out, b.out.explicitly_set);
  derivedDefaults(b.out);
  checkOptions(b.out, b.out.explicitly_set);
  validate(b.out);
  return b.out;
}

LoadedConfig loadConfig(const std::string& file, const std::vector<std::string>& overrides) {
  return loadConfigText(readConfigFile(file, "config file"), file, overrides);
}

}  // namespace ltrain::config
