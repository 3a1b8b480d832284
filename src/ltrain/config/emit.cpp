#include "ltrain/config/emit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ltrain/config/schema.h"

namespace ltrain::config {
namespace {

std::string flow(const YAML::Node& n) {
  YAML::Emitter e;
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

bool shown(const Option& o, const ExperimentConfig& cfg) {
  return o.appliesTo(cfg.model.name);
}

std::string section(const std::string& path) {
  auto dot = path.find('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string render(const ExperimentConfig& cfg, const LoadedConfig* explain) {
  // Options are declared grouped by section, top-level keys first, so one pass suffices.
  std::string out, current;
  for (const auto& o : schema()) {
    if (!shown(o, cfg)) continue;
    std::string sec = section(o.path);
    if (sec != current) {
      out += sec + ":\n";
      current = sec;
    }
    std::string key = sec.empty() ? o.path : o.path.substr(sec.size() + 1);
    std::string line = fmt::format("{}{}: {}", sec.empty() ? "" : "  ", key, flow(o.read(cfg)));
    if (explain) line = fmt::format("{:<48} # {}", line, explain->sources.at(o.path));
    out += line + "\n";
  }
  return out;
}

std::string constraints(const Option& o) {
  std::vector<std::string> parts;
  if (!o.choices.empty()) parts.push_back(fmt::format("one of {}", fmt::join(o.choices, ", ")));
  if (o.min) parts.push_back(fmt::format("{} {:g}", o.min_exclusive ? ">" : ">=", *o.min));
  if (o.max) parts.push_back(fmt::format("<= {:g}", *o.max));
  if (!o.model.empty()) parts.push_back(fmt::format("model {} only", o.model));  // "gpt|llama"
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

std::string toYaml(const ExperimentConfig& cfg) {
  return render(cfg, nullptr);
}

std::string toYamlExplained(const LoadedConfig& lc) {
  return render(lc.cfg, &lc);
}

std::string referenceMarkdown() {
  const ExperimentConfig d = defaults();
  std::string out =
      "# ltrain configuration reference\n\n"
      "Generated from the schema (`src/ltrain/config/schema.cpp`) by `ltrain config --reference`;\n"
      "a test fails when this page and the schema disagree. Precedence: defaults < config file <\n"
      "`KEY=VALUE` overrides on the command line (dotted paths, values in YAML: "
      "`model.hidden=[512,256]`).\n\n"
      "| key | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& o : schema())
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", o.path, o.type_name, flow(o.read(d)),
                       constraints(o), o.help);
  return out;
}

std::string optionSummary() {
  const ExperimentConfig d = defaults();
  std::string out;
  for (const auto& o : schema())
    out += fmt::format("  {:<34} {} (default {})\n", o.path, o.help, flow(o.read(d)));
  return out;
}

}  // namespace ltrain::config
