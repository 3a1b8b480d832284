// Reading a sweep file (sweep.h's loadSweepFile): every error names the file, the line and the
// key.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/config/yaml_scalar.h"
#include "ltrain/sweep/sweep.h"

namespace fs = std::filesystem;

namespace ltrain::sweep {
namespace {

std::string where(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}", file, n.Mark().line + 1);
}

std::string scalar(const std::string& file, const std::string& key, const YAML::Node& n) {
  if (!n.IsScalar())
    throw UsageError(fmt::format("{}: {}: expected a single value", where(file, n), key));
  return n.Scalar();
}

int64_t integer(const std::string& file, const std::string& key, const YAML::Node& n, int64_t lo) {
  const std::string s = scalar(file, key, n);
  const auto v = config::yamlInt(n);
  if (!v || *v < lo)
    throw UsageError(
        fmt::format("{}: {}: expected an integer >= {}, got '{}'", where(file, n), key, lo, s));
  return *v;
}

}  // namespace

SweepSpec loadSweepFile(const std::string& path, const std::string& output_dir_flag) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw UsageError(fmt::format("sweep file '{}' not found", path));
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw UsageError(fmt::format("{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap())
    throw UsageError(fmt::format("{}: expected a mapping (base, params, sweep)", path));
  SweepSpec s;
  s.source = path;
  std::string name = fs::path(path).stem().string(), output_dir = "runs/sweeps";
  const fs::path here = fs::path(path).parent_path();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node v = it->second;
    if (key == "base") {
      s.base = (here / scalar(path, key, v)).lexically_normal().string();
    } else if (key == "overrides") {
      if (!v.IsSequence())
        throw UsageError(
            fmt::format("{}: overrides: expected a list of KEY=VALUE", where(path, v)));
      for (const auto& o : v) s.overrides.push_back(scalar(path, key, o));
    } else if (key == "params") {
      if (!v.IsMap())
        throw UsageError(
            fmt::format("{}: params: expected a mapping of config keys", where(path, v)));
      for (auto p = v.begin(); p != v.end(); ++p)
        s.params.push_back(paramFromYaml(p->first.Scalar(), p->second));
    } else if (key == "sweep") {
      if (!v.IsMap())
        throw UsageError(fmt::format("{}: sweep: expected a mapping", where(path, v)));
      for (auto o = v.begin(); o != v.end(); ++o) {
        const std::string k = o->first.Scalar();
        const YAML::Node x = o->second;
        if (k == "name")
          name = scalar(path, "sweep.name", x);
        else if (k == "output_dir")
          output_dir = scalar(path, "sweep.output_dir", x);
        else if (k == "parallel")
          s.parallel = integer(path, "sweep.parallel", x, 1);
        else if (k == "metric")
          s.metric = scalar(path, "sweep.metric", x);
        else if (k == "mode")
          s.mode = scalar(path, "sweep.mode", x);
        else if (k == "samples")
          s.samples = integer(path, "sweep.samples", x, 0);
        else if (k == "seed")
          s.seed = static_cast<uint64_t>(integer(path, "sweep.seed", x, 0));
        else if (k == "nproc_per_node")
          s.nproc_per_node = scalar(path, "sweep.nproc_per_node", x);
        else
          throw UsageError(fmt::format(
              "{}: unknown key 'sweep.{}' (expected name, output_dir, parallel, metric, mode, "
              "samples, seed or nproc_per_node)",
              where(path, o->first), k));
      }
    } else {
      throw UsageError(fmt::format(
          "{}: unknown key '{}' in a sweep file (expected base, overrides, params or sweep)",
          where(path, it->first), key));
    }
  }
  if (s.base.empty())
    throw UsageError(fmt::format("{}: 'base' (the experiment config) is missing", path));
  if (s.params.empty())
    throw UsageError(fmt::format("{}: 'params' (what to sweep) is missing", path));
  s.dir = output_dir_flag.empty() ? output_dir + "/" + name : output_dir_flag;
  return s;
}

}  // namespace ltrain::sweep
