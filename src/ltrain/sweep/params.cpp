#include "ltrain/sweep/params.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "ltrain/common/errors.h"
#include "ltrain/config/yaml_scalar.h"

namespace ltrain::sweep {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Splits at commas outside brackets and quotes, so that "[512,256],[128]" is two values.
std::vector<std::string> splitTopLevel(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  char quote = 0;
  std::string cur;
  for (char c : s) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{' || c == '(') {
      ++depth;
    } else if (c == ']' || c == '}' || c == ')') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  return out;
}

double number(const std::string& key, const std::string& text) {
  if (const auto v = config::yamlNumber(config::yamlOf(text))) return *v;
  throw UsageError(fmt::format("sweep parameter {}: '{}' is not a number", key, text));
}

bool integral(const std::string& text) {
  return !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos;
}

// "name(args)" -> {name, args}; {"", ""} when the text is not a call.
std::pair<std::string, std::string> call(const std::string& text) {
  const auto open = text.find('(');
  if (open == std::string::npos || text.back() != ')') return {};
  const std::string name = text.substr(0, open);
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos)
    return {};
  return {name, text.substr(open + 1, text.size() - open - 2)};
}

std::string formatNumber(double v) {
  return fmt::format("{}", v);
}

}  // namespace

bool isSweepValue(const std::string& value) {
  return splitTopLevel(value).size() > 1 || !call(trim(value)).first.empty();
}

Param parseParam(const std::string& key, const std::string& expression) {
  Param p;
  p.key = key;
  const std::string text = trim(expression);
  auto [fn, args_text] = call(text);
  const auto args = fn.empty() ? std::vector<std::string>{} : splitTopLevel(args_text);
  auto expectArgs = [&](size_t lo, size_t hi, const char* form) {
    if (args.size() < lo || args.size() > hi)
      throw UsageError(fmt::format("sweep parameter {}: expected {}, got '{}'", key, form, text));
  };
  if (fn.empty()) {
    p.values = splitTopLevel(text);
  } else if (fn == "choice") {
    p.values = args;
  } else if (fn == "range") {
    expectArgs(2, 3, "range(start, stop[, step])");
    const bool ints =
        integral(args[0]) && integral(args[1]) && (args.size() < 3 || integral(args[2]));
    const double start = number(key, args[0]), stop = number(key, args[1]),
                 step = args.size() == 3 ? number(key, args[2]) : 1;
    if (step == 0 || (stop - start) / step <= 0 || (stop - start) / step > 10000)
      throw UsageError(fmt::format(
          "sweep parameter {}: '{}' gives no values or too many (more than 10000)", key, text));
    // Python's range: start, start + step, ... while short of stop (stop excluded).
    const auto n = static_cast<int64_t>(std::ceil((stop - start) / step - 1e-9));
    for (int64_t i = 0; i < n; ++i) {
      const double v = start + static_cast<double>(i) * step;
      p.values.push_back(ints ? std::to_string(std::llround(v)) : formatNumber(v));
    }
  } else if (fn == "uniform" || fn == "loguniform" || fn == "int") {
    expectArgs(2, 2, (fn + "(low, high)").c_str());
    p.kind = fn == "uniform"      ? Param::Kind::kUniform
             : fn == "loguniform" ? Param::Kind::kLogUniform
                                  : Param::Kind::kInt;
    p.lo = number(key, args[0]), p.hi = number(key, args[1]);
    if (!(p.lo < p.hi) || (p.kind == Param::Kind::kLogUniform && p.lo <= 0))
      throw UsageError(fmt::format("sweep parameter {}: '{}' needs low < high{}", key, text,
                                   p.kind == Param::Kind::kLogUniform ? " and low > 0" : ""));
  } else {
    throw UsageError(fmt::format(
        "sweep parameter {}: unknown function '{}'; expected a,b,c or choice, range, uniform, "
        "loguniform or int",
        key, fn));
  }
  if (p.kind == Param::Kind::kValues) {
    for (const auto& v : p.values)
      if (v.empty())
        throw UsageError(fmt::format("sweep parameter {}: an empty value in '{}'", key, text));
  }
  return p;
}

Param paramFromYaml(const std::string& key, const YAML::Node& node) {
  if (node.IsSequence()) {
    Param p;
    p.key = key;
    for (const auto& v : node) {
      YAML::Emitter e;
      e.SetSeqFormat(YAML::Flow);
      e.SetMapFormat(YAML::Flow);
      e << v;
      p.values.push_back(e.c_str());
    }
    if (p.values.empty()) throw UsageError(fmt::format("sweep parameter {}: an empty list", key));
    return p;
  }
  if (node.IsScalar()) return parseParam(key, node.Scalar());
  throw UsageError(fmt::format(
      "sweep parameter {}: expected a list of values or an expression such as range(1,4)", key));
}

std::string Param::describe() const {
  switch (kind) {
    case Kind::kValues: {
      std::string s;
      for (const auto& v : values) s += (s.empty() ? "" : ", ") + v;
      return "choice(" + s + ")";
    }
    case Kind::kUniform:
      return fmt::format("uniform({}, {})", lo, hi);
    case Kind::kLogUniform:
      return fmt::format("loguniform({}, {})", lo, hi);
    case Kind::kInt:
      return fmt::format("int({}, {})", lo, hi);
  }
  return "";
}

std::vector<std::string> Trial::overrides() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : values) out.push_back(k + "=" + v);
  return out;
}

std::string Trial::shortName() const {
  std::string s;
  for (const auto& [k, v] : values) {
    const auto dot = k.rfind('.');
    s += (s.empty() ? "" : ",") + (dot == std::string::npos ? k : k.substr(dot + 1)) + "=" + v;
  }
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string("._=,+-").find(c) == std::string::npos)
      c = '_';
  if (s.size() > 60) s = s.substr(0, 60);
  return fmt::format("{:03d}-{}", number, s);
}

std::vector<Trial> expandTrials(const std::vector<Param>& params, int64_t samples, uint64_t seed) {
  bool random = false;
  for (const auto& p : params) random = random || p.random();
  std::vector<Trial> out;
  if (!random) {
    std::vector<size_t> idx(params.size(), 0);
    while (true) {
      Trial t;
      t.number = static_cast<int>(out.size()) + 1;
      for (size_t i = 0; i < params.size(); ++i)
        t.values.emplace_back(params[i].key, params[i].values[idx[i]]);
      out.push_back(std::move(t));
      // The last parameter varies fastest, as in itertools.product.
      size_t i = params.size();
      while (i > 0 && ++idx[i - 1] == params[i - 1].values.size()) idx[--i] = 0;
      if (i == 0) break;
    }
    return out;
  }
  if (samples <= 0)
    throw UsageError(
        "a sweep with uniform, loguniform or int parameters needs sweep.samples (the number of "
        "random trials) > 0");
  std::mt19937_64 rng(seed);
  for (int64_t s = 0; s < samples; ++s) {
    Trial t;
    t.number = static_cast<int>(s) + 1;
    for (const auto& p : params) {
      std::string v;
      switch (p.kind) {
        case Param::Kind::kValues:
          v = p.values[std::uniform_int_distribution<size_t>(0, p.values.size() - 1)(rng)];
          break;
        case Param::Kind::kUniform:
          v = fmt::format("{:.6g}", std::uniform_real_distribution<double>(p.lo, p.hi)(rng));
          break;
        case Param::Kind::kLogUniform:
          v = fmt::format("{:.6g}", std::exp(std::uniform_real_distribution<double>(
                                        std::log(p.lo), std::log(p.hi))(rng)));
          break;
        case Param::Kind::kInt:
          v = std::to_string(std::uniform_int_distribution<int64_t>(
              static_cast<int64_t>(std::ceil(p.lo)), static_cast<int64_t>(std::floor(p.hi)))(rng));
          break;
      }
      t.values.emplace_back(p.key, v);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace ltrain::sweep
