// What the option table is written with: each value type's YAML parser and printer
// (ValueTraits), makeOption and the LT_OPT macro, which names a config field once so that its
// dotted path and the field it fills cannot drift apart. schema.cpp declares the general options
// with it, and each model family's spec (models/<family>/spec.cpp) its own.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/config/yaml_scalar.h"

namespace ltrain::config::options {

template <class T>
struct ValueTraits;

inline std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

[[noreturn]] inline void expected(const std::string& what, const YAML::Node& n) {
  throw UsageError(fmt::format("expected {}, got {}", what, shown(n)));
}

template <>
struct ValueTraits<bool> {
  static constexpr const char* name = "bool";
  static bool parse(const YAML::Node& n) {
    const auto v = yamlBool(n);
    if (!v) expected("a boolean (true or false)", n);
    return *v;
  }
  static YAML::Node emit(bool v) { return YAML::Node(v); }
};

template <>
struct ValueTraits<int64_t> {
  static constexpr const char* name = "int";
  static int64_t parse(const YAML::Node& n) {
    const auto v = yamlInt(n);
    if (!v) expected("an integer", n);
    return *v;
  }
  static YAML::Node emit(int64_t v) { return YAML::Node(v); }
};

template <>
struct ValueTraits<double> {
  static constexpr const char* name = "float";
  static double parse(const YAML::Node& n) {
    const auto v = yamlNumber(n);
    if (!v) expected("a finite number", n);
    return *v;
  }
  // Shortest form that reads back to the same double ("0.1", not "0.10000000000000001"), with a
  // '.' in the mantissa ("1.0e-08") so that YAML 1.1 readers such as PyYAML see a float too.
  static YAML::Node emit(double v) {
    std::string s = fmt::format("{}", v);
    auto e = s.find('e');
    if (e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
    return YAML::Node(s);
  }
};

template <>
struct ValueTraits<std::string> {
  static constexpr const char* name = "string";
  static std::string parse(const YAML::Node& n) {
    if (!n.IsScalar()) expected("a string", n);
    return n.Scalar();
  }
  static YAML::Node emit(const std::string& v) { return YAML::Node(v); }
};

template <class E>
struct ValueTraits<std::vector<E>> {
  static std::string listName() { return std::string("list of ") + ValueTraits<E>::name; }
  static std::vector<E> parse(const YAML::Node& n) {
    if (!n.IsSequence()) expected(fmt::format("a {} like [1, 2]", listName()), n);
    std::vector<E> out;
    for (const auto& item : n) {
      try {
        out.push_back(ValueTraits<E>::parse(item));
      } catch (const UsageError&) {
        expected(fmt::format("a {}", listName()), n);
      }
    }
    return out;
  }
  static YAML::Node emit(const std::vector<E>& v) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& x : v) n.push_back(ValueTraits<E>::emit(x));
    n.SetStyle(YAML::EmitterStyle::Flow);
    return n;
  }
};

// A mode: one of its enum's names (modes.h), which are also the option's choices.
template <class E>
struct EnumTraits {
  static constexpr const char* name = "string";
  static E parse(const YAML::Node& n) {
    E v{};
    // Worded as the choice check of other options: "<key> must be one of a|b, got 'c'".
    if (!n.IsScalar() || !fromString(n.Scalar(), v))
      throw UsageError(
          fmt::format("must be one of {}, got {}", fmt::join(choiceList(), "|"), shown(n)));
    return v;
  }
  static YAML::Node emit(E v) { return YAML::Node(toString(v)); }
  static std::vector<std::string> choiceList() {
    std::vector<std::string> out;
    for (const auto& [v, n] : EnumNames<E>::table) out.emplace_back(n);
    return out;
  }
};
#define LT_ENUM_TRAITS(E) \
  template <>             \
  struct ValueTraits<E> : EnumTraits<E> {}
LT_ENUM_TRAITS(Precision);
LT_ENUM_TRAITS(ReduceDtype);
LT_ENUM_TRAITS(Placement);
LT_ENUM_TRAITS(Strategy);
LT_ENUM_TRAITS(Backend);
LT_ENUM_TRAITS(Compression);
LT_ENUM_TRAITS(NonFinite);
LT_ENUM_TRAITS(OnSignal);
LT_ENUM_TRAITS(Augment);
LT_ENUM_TRAITS(Tokenizer);
LT_ENUM_TRAITS(OptimizerName);
LT_ENUM_TRAITS(SchedulerName);
LT_ENUM_TRAITS(Activation);
LT_ENUM_TRAITS(Pool);
LT_ENUM_TRAITS(DeviceChoice);
LT_ENUM_TRAITS(TokenFormat);
LT_ENUM_TRAITS(Gelu);
LT_ENUM_TRAITS(Decay);
LT_ENUM_TRAITS(BadImage);
LT_ENUM_TRAITS(FsdpUnit);
#undef LT_ENUM_TRAITS

// model.layers: a list of layers, each a name ("relu") or a one-key mapping of the name to its
// arguments ({conv2d: {out: 32, kernel: 3}}) or, for containers, to its layers
// ({residual: [...]}, or {residual: {layers: [...], projection: true}}).
template <>
struct ValueTraits<std::vector<LayerSpec>> {
  static constexpr const char* name = "list of layers";
  static std::string text(const YAML::Node& n) {
    if (n.IsScalar()) return n.Scalar();
    YAML::Emitter e;
    e.SetSeqFormat(YAML::Flow);
    e.SetMapFormat(YAML::Flow);
    e << n;
    return e.c_str();
  }
  static LayerSpec item(const YAML::Node& n) {
    LayerSpec l;
    l.line = n.Mark().line + 1;
    if (n.IsScalar()) {
      l.type = n.Scalar();
      return l;
    }
    if (!n.IsMap() || n.size() != 1)
      expected("a layer: a name (relu) or a one-key mapping ({linear: {out: 10}})", n);
    const auto it = n.begin();
    if (!it->first.IsScalar()) expected("a layer name", it->first);
    l.type = it->first.Scalar();
    const YAML::Node v = it->second;
    if (v.IsNull()) return l;
    if (v.IsSequence()) {
      l.children = parse(v);
    } else if (v.IsMap()) {
      for (auto a = v.begin(); a != v.end(); ++a) {
        if (!a->first.IsScalar()) expected("argument names", a->first);
        if (a->first.Scalar() == "layers" && a->second.IsSequence())
          l.children = parse(a->second);
        else
          l.args.emplace_back(a->first.Scalar(), text(a->second));
      }
    } else {
      l.args.emplace_back("", text(v));
    }
    return l;
  }
  static std::vector<LayerSpec> parse(const YAML::Node& n) {
    if (!n.IsSequence()) expected("a list of layers like [linear: {out: 10}]", n);
    std::vector<LayerSpec> out;
    for (const auto& i : n) out.push_back(item(i));
    return out;
  }
  static YAML::Node emit(const std::vector<LayerSpec>& layers) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& l : layers) {
      if (l.args.empty() && l.children.empty()) {
        seq.push_back(YAML::Node(l.type));
        continue;
      }
      YAML::Node body;
      if (l.args.size() == 1 && l.args[0].first.empty() && l.children.empty()) {
        body = YAML::Load(l.args[0].second);
      } else if (l.args.empty()) {
        body = emit(l.children);
      } else {
        body = YAML::Node(YAML::NodeType::Map);
        for (const auto& [k, v] : l.args) body[k] = YAML::Load(v);
        if (!l.children.empty()) body["layers"] = emit(l.children);
      }
      YAML::Node m(YAML::NodeType::Map);
      m[l.type] = body;
      m.SetStyle(YAML::EmitterStyle::Flow);
      seq.push_back(m);
    }
    seq.SetStyle(YAML::EmitterStyle::Flow);
    return seq;
  }
};

template <class T, class = void>
struct IsEnumOption : std::false_type {};
template <class T>
struct IsEnumOption<T, std::void_t<decltype(EnumNames<T>::table)>> : std::true_type {};

template <class T>
std::string typeName() {
  if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>)
    return ValueTraits<T>::listName();
  else
    return ValueTraits<T>::name;
}

template <class Access, class T = std::decay_t<std::invoke_result_t<Access, ExperimentConfig&>>>
Option makeOption(const char* path, Access access, std::string help, T def) {
  Option o;
  o.path = path;
  o.type_name = typeName<T>();
  o.help = std::move(help);
  o.assign = [access](ExperimentConfig& c, const YAML::Node& n) {
    access(c) = ValueTraits<T>::parse(n);
  };
  o.read = [access](const ExperimentConfig& c) {
    return ValueTraits<T>::emit(access(const_cast<ExperimentConfig&>(c)));
  };
  o.set_default = [access, def](ExperimentConfig& c) { access(c) = def; };
  if constexpr (IsEnumOption<T>::value) o.choices = EnumTraits<T>::choiceList();
  return o;
}

using IntList = std::vector<int64_t>;
using FloatList = std::vector<double>;

// Defaults are the last argument so that braced lists survive the macro.
#define LT_OPT(PATH, HELP, ...)                                                            \
  ::ltrain::config::options::makeOption(                                                   \
      #PATH, [](::ltrain::config::ExperimentConfig & c) -> auto& { return c.PATH; }, HELP, \
      __VA_ARGS__)

}  // namespace ltrain::config::options
