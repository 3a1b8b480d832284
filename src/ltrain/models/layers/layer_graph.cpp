#include "ltrain/models/layers/layer_graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "ltrain/models/builder.h"

namespace ltrain::models {
namespace {

using Shape = std::vector<int64_t>;

std::string shapeText(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Layers in a row (registered "0", "1", ... as an nn.Sequential's): `sequential`, or with
// `residual` x + f(x) and an optional projection of x ("proj") where f changes the shape.
// LibTorch's Sequential cannot sit inside another (its forward is a template), hence this.
// Cloneable (dist.strategy dp): reset(), which only a clone calls, registers copies of the parts.
struct ChainImpl : torch::nn::Cloneable<ChainImpl> {
  ChainImpl(std::vector<torch::nn::AnyModule> parts, bool residual, torch::nn::AnyModule proj)
      : parts_(std::move(parts)), residual_(residual), proj_(std::move(proj)) {
    for (size_t i = 0; i < parts_.size(); ++i) register_module(std::to_string(i), parts_[i].ptr());
    if (!proj_.is_empty()) register_module("proj", proj_.ptr());
  }
  void reset() override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      parts_[i] = parts_[i].clone();
      register_module(std::to_string(i), parts_[i].ptr());
    }
    if (!proj_.is_empty()) proj_ = proj_.clone(), register_module("proj", proj_.ptr());
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = x;
    for (auto& p : parts_) y = p.forward(y);
    if (!residual_) return y;
    return (proj_.is_empty() ? x : proj_.forward<torch::Tensor>(x)) + y;
  }
  std::vector<torch::nn::AnyModule> parts_;
  bool residual_;
  torch::nn::AnyModule proj_;
};
TORCH_MODULE(Chain);

// nn.RMSNorm over the last dimension (LibTorch's C++ API has none): x / rms(x) * weight, the
// mean of squares in float32 as PyTorch computes it.
struct RmsNormImpl : torch::nn::Cloneable<RmsNormImpl> {
  RmsNormImpl(int64_t dim, double eps) : dim(dim), eps(eps) { reset(); }
  void reset() override { weight = register_parameter("weight", torch::ones({dim})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto xf = x.to(torch::kFloat);
    auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
    return y.to(x.scalar_type()) * weight;
  }
  int64_t dim;
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

// The arguments of one layer, read by type as they are used; leftovers are errors.
class Args {
 public:
  Args(const config::LayerSpec& spec, std::string path) : spec_(spec), path_(std::move(path)) {}
  [[noreturn]] void fail(const std::string& why) const {
    throw LayerError(fmt::format("{} ({}): {}", path_, spec_.type, why), spec_.line);
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt,
                  int64_t min = 0) {
    const auto* v = take(key);
    if (!v) {
      if (!fallback) fail(fmt::format("needs {}: an integer{}", key, misspelt(key)));
      return *fallback;
    }
    int64_t x;
    const YAML::Node n = YAML::Load(*v);
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, x))
      fail(fmt::format("{}: expected an integer, got '{}'", key, *v));
    if (x < min) fail(fmt::format("{}: must be >= {}, got {}", key, min, x));
    return x;
  }
  double number(const std::string& key, double fallback, double lo, double hi) {
    const auto* v = take(key);
    if (!v) return fallback;
    double x;
    const YAML::Node n = YAML::Load(*v);
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, x) || x < lo || x > hi)
      fail(fmt::format("{}: expected a number in [{}, {}], got '{}'", key, lo, hi, *v));
    return x;
  }
  bool flag(const std::string& key, bool fallback) {
    const auto* v = take(key);
    if (!v) return fallback;
    bool x;
    const YAML::Node n = YAML::Load(*v);
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, x))
      fail(fmt::format("{}: expected true or false, got '{}'", key, *v));
    return x;
  }
  std::string text(const std::string& key, const std::string& fallback,
                   const std::vector<std::string>& choices) {
    const auto* v = take(key);
    if (!v) return fallback;
    if (std::find(choices.begin(), choices.end(), *v) == choices.end())
      fail(fmt::format("{}: expected one of {}, got '{}'", key, fmt::join(choices, "|"), *v));
    return *v;
  }
  // An integer or a list of `n` integers (kernel: 3, or kernel: [3, 5]).
  std::vector<int64_t> sizes(const std::string& key, size_t n, std::optional<int64_t> fallback,
                             int64_t min = 1) {
    const auto* v = find(key);
    if (v && YAML::Load(*v).IsSequence()) {
      used_.insert(key);
      std::vector<int64_t> out;
      for (const auto& e : YAML::Load(*v)) {
        int64_t x;
        if (!e.IsScalar() || !YAML::convert<int64_t>::decode(e, x) || x < min)
          fail(fmt::format("{}: expected integers >= {}, got {}", key, min, *v));
        out.push_back(x);
      }
      if (out.size() != n) fail(fmt::format("{}: expected {} values, got {}", key, n, *v));
      return out;
    }
    return std::vector<int64_t>(n, integer(key, fallback, min));
  }
  // " ('kernal' is no argument of conv2d: kernel?)" when an argument given is close to `key`.
  std::string misspelt(const std::string& key) const {
    for (const auto& [k, v] : spec_.args) {
      if (k.empty() || k == key) continue;
      size_t diff = k.size() > key.size() ? k.size() - key.size() : key.size() - k.size();
      for (size_t i = 0; i < std::min(k.size(), key.size()); ++i) diff += k[i] != key[i];
      if (diff <= 2)
        return fmt::format(" ('{}' is no argument of {}: did you mean {}?)", k, spec_.type, key);
    }
    return "";
  }
  // A lone value (dropout: 0.25) stands for the layer's first argument.
  void lone(const std::string& key) {
    for (auto& [k, v] : args_())
      if (k.empty()) renamed_[key] = v;
  }
  // Unknown arguments, with the closest known one.
  void finish(const std::vector<std::string>& known) const {
    for (const auto& [k, v] : spec_.args) {
      const std::string key = k.empty() ? "" : k;
      if (key.empty() && !renamed_.empty()) continue;
      if (used_.count(key)) continue;
      if (key.empty())
        fail(known.empty() || known.front() == "layers"
                 ? fmt::format("'{}' is not its argument: write its layers as a list", v)
                 : fmt::format("a lone value ('{}') needs a name here: write {{{}: ...}}", v,
                               known.front()));
      fail(fmt::format("unknown argument '{}'{}", key,
                       known.empty() ? std::string(" (it takes none)")
                                     : fmt::format("; it takes {}", fmt::join(known, ", "))));
    }
  }

 private:
  const std::vector<std::pair<std::string, std::string>>& args_() const { return spec_.args; }
  const std::string* find(const std::string& key) const {
    auto r = renamed_.find(key);
    if (r != renamed_.end()) return &r->second;
    for (const auto& [k, v] : spec_.args)
      if (k == key) return &v;
    return nullptr;
  }
  const std::string* take(const std::string& key) {
    const auto* v = find(key);
    if (v) used_.insert(key);
    return v;
  }
  const config::LayerSpec& spec_;
  std::string path_;
  std::map<std::string, std::string> renamed_;
  std::set<std::string> used_;
};

int64_t params(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

struct Built {
  torch::nn::AnyModule module;
  Shape out;
};

class Builder {
 public:
  Builder(int64_t classes, bool tokens) : classes_(classes), tokens_(tokens) {}

  std::vector<torch::nn::AnyModule> list(const std::vector<config::LayerSpec>& specs, Shape& shape,
                                         const std::string& prefix, int depth,
                                         std::vector<LayerRow>& rows, bool top) {
    std::vector<torch::nn::AnyModule> out;
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string path = fmt::format("{}[{}]", prefix, i);
      const bool last = top && i + 1 == specs.size();
      const size_t row = rows.size();
      rows.push_back({specs[i].type, depth, static_cast<int>(i) + 1, {}, 0, false});
      Built b = layer(specs[i], shape, path, depth, rows, last);
      rows[row].shape = b.out;
      rows[row].params = params(*b.module.ptr());
      rows[row].container = !specs[i].children.empty();
      shape = b.out;
      out.push_back(std::move(b.module));
    }
    return out;
  }

 private:
  // What one layer kind's builder sees: its place in the graph and the input it is given.
  struct Ctx {
    const config::LayerSpec& spec;
    const Shape& in;
    std::string path;
    int depth;
    std::vector<LayerRow>& rows;
    bool last;  // the network's last layer
    void need(const Args& a, size_t dims, const char* what) const {
      if (in.size() != dims)
        a.fail(fmt::format("expects {} per example, but its input is {}", what, shapeText(in)));
    }
    // An `in`-like argument the user may give: it must be what the input has.
    void checkIn(Args& a, const std::string& key, int64_t inferred, const char* what) const {
      if (a.has(key)) {
        const int64_t given = a.integer(key, std::nullopt, 1);
        if (given != inferred)
          a.fail(fmt::format("input has {} {} per example, but {}: {} was given", inferred, what,
                             key, given));
      }
    }
  };
  using Make = Built (Builder::*)(Args&, const Ctx&);

 public:
  // Every layer kind and its builder, in the order the reference lists them: a new kind is one
  // function and one row here.
  static const std::vector<std::pair<std::string, Make>>& kinds() {
    static const std::vector<std::pair<std::string, Make>> table{
        {"linear", &Builder::linear},
        {"conv1d", &Builder::convolution},
        {"conv2d", &Builder::convolution},
        {"batch_norm1d", &Builder::batchNorm},
        {"batch_norm2d", &Builder::batchNorm},
        {"layer_norm", &Builder::layerNorm},
        {"rms_norm", &Builder::layerNorm},
        {"group_norm", &Builder::groupNorm},
        {"dropout", &Builder::dropout},
        {"relu", &Builder::activation},
        {"gelu", &Builder::gelu},
        {"silu", &Builder::activation},
        {"tanh", &Builder::activation},
        {"sigmoid", &Builder::activation},
        {"softmax", &Builder::softmax},
        {"max_pool2d", &Builder::pooling},
        {"avg_pool2d", &Builder::pooling},
        {"adaptive_avg_pool2d", &Builder::adaptivePool},
        {"flatten", &Builder::flatten},
        {"embedding", &Builder::embedding},
        {"residual", &Builder::residual},
        {"sequential", &Builder::sequential},
    };
    return table;
  }

 private:
  Built layer(const config::LayerSpec& spec, const Shape& in, const std::string& path, int depth,
              std::vector<LayerRow>& rows, bool last) {
    Args a(spec, path);
    const auto& table = kinds();
    const auto kind = std::find_if(table.begin(), table.end(),
                                   [&](const auto& k) { return k.first == spec.type; });
    if (kind == table.end()) a.fail(fmt::format("unknown layer{}", suggestion(spec.type)));
    if (!spec.children.empty() && spec.type != "residual" && spec.type != "sequential")
      a.fail("takes arguments, not a list of layers");
    return (this->*kind->second)(a, Ctx{spec, in, path, depth, rows, last});
  }

  Built linear(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const config::LayerSpec& spec = c.spec;
    a.lone("out");
    if (in.empty()) a.fail("has no input features");
    const int64_t features = in.back();
    c.checkIn(a, "in", features, "features");
    // out: classes is the data's class count (a language model's vocabulary).
    bool to_classes = false;
    for (const auto& [key, v] : spec.args)
      if ((key == "out" || key.empty()) && v == "classes") to_classes = true;
    const int64_t out = to_classes ? (a.text("out", "classes", {"classes"}), classesOr(1))
                                   : a.integer("out", std::nullopt, 1);
    const bool bias = a.flag("bias", true);
    a.finish({"out", "in", "bias"});
    Shape s = in;
    s.back() = out;
    return {
        torch::nn::AnyModule(torch::nn::Linear(torch::nn::LinearOptions(features, out).bias(bias))),
        s};
  }

  Built convolution(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const std::string& t = c.spec.type;
    const config::LayerSpec& spec = c.spec;
    const size_t k = t == "conv1d" ? 1 : 2;
    c.need(a, k + 1, k == 1 ? "[C, L]" : "[C, H, W]");
    a.lone("out");
    c.checkIn(a, "in", in[0], "channels");
    const int64_t out = a.integer("out", std::nullopt, 1);
    const auto kernel = a.sizes("kernel", k, std::nullopt);
    const auto stride = a.sizes("stride", k, 1);
    const auto dilation = a.sizes("dilation", k, 1);
    const int64_t groups = a.integer("groups", 1, 1);
    const bool bias = a.flag("bias", true);
    // padding: an integer, [h, w], or same (the output keeps the input's size).
    bool same = false;
    for (const auto& [key, v] : spec.args)
      if (key == "padding" && v == "same") same = true;
    std::vector<int64_t> padding(k, 0);
    if (same)
      a.text("padding", "same", {"same"});
    else
      padding = a.sizes("padding", k, 0, 0);
    a.finish({"out", "kernel", "stride", "padding", "dilation", "groups", "bias", "in"});
    if (in[0] % groups != 0 || out % groups != 0)
      a.fail(fmt::format("groups {} must divide its {} input and {} output channels", groups, in[0],
                         out));
    if (same && *std::max_element(stride.begin(), stride.end()) > 1)
      a.fail("padding same needs stride 1");
    Shape s{out};
    for (size_t d = 0; d < k; ++d) {
      const int64_t size =
          same ? in[d + 1]
               : (in[d + 1] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
      if (size < 1)
        a.fail(fmt::format("a kernel of {} does not fit an input of {}", shapeText(kernel),
                           shapeText(in)));
      s.push_back(size);
    }
    if (k == 1) {
      auto o = torch::nn::Conv1dOptions(in[0], out, kernel[0])
                   .stride(stride[0])
                   .dilation(dilation[0])
                   .groups(groups)
                   .bias(bias);
      if (same)
        o.padding(torch::kSame);
      else
        o.padding(padding[0]);
      return {torch::nn::AnyModule(torch::nn::Conv1d(o)), s};
    }
    auto o = torch::nn::Conv2dOptions(in[0], out, {kernel[0], kernel[1]})
                 .stride({stride[0], stride[1]})
                 .dilation({dilation[0], dilation[1]})
                 .groups(groups)
                 .bias(bias);
    if (same)
      o.padding(torch::kSame);
    else
      o.padding({padding[0], padding[1]});
    return {torch::nn::AnyModule(torch::nn::Conv2d(o)), s};
  }

  Built batchNorm(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const std::string& t = c.spec.type;
    if (t == "batch_norm2d")
      c.need(a, 3, "[C, H, W]");
    else if (in.size() != 1 && in.size() != 2)
      a.fail(fmt::format("expects [C] or [C, L] per example, but its input is {}", shapeText(in)));
    const double eps = a.number("eps", 1e-5, 0, 1), momentum = a.number("momentum", 0.1, 0, 1);
    a.finish({"eps", "momentum"});
    if (t == "batch_norm1d")
      return {torch::nn::AnyModule(torch::nn::BatchNorm1d(
                  torch::nn::BatchNormOptions(in[0]).eps(eps).momentum(momentum))),
              in};
    return {torch::nn::AnyModule(torch::nn::BatchNorm2d(
                torch::nn::BatchNormOptions(in[0]).eps(eps).momentum(momentum))),
            in};
  }

  Built layerNorm(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const std::string& t = c.spec.type;
    if (in.empty()) a.fail("has no input");
    const double eps = a.number("eps", t == "layer_norm" ? 1e-5 : 1e-6, 0, 1);
    const bool affine = t == "layer_norm" ? a.flag("elementwise_affine", true) : true;
    a.finish(t == "layer_norm" ? std::vector<std::string>{"eps", "elementwise_affine"}
                               : std::vector<std::string>{"eps"});
    if (t == "rms_norm") return {torch::nn::AnyModule(RmsNorm(in.back(), eps)), in};
    return {torch::nn::AnyModule(torch::nn::LayerNorm(
                torch::nn::LayerNormOptions({in.back()}).eps(eps).elementwise_affine(affine))),
            in};
  }

  Built groupNorm(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    if (in.empty()) a.fail("has no input");
    a.lone("groups");
    const int64_t groups = a.integer("groups", std::nullopt, 1);
    const double eps = a.number("eps", 1e-5, 0, 1);
    a.finish({"groups", "eps"});
    if (in[0] % groups != 0)
      a.fail(fmt::format("groups {} must divide its {} channels", groups, in[0]));
    return {torch::nn::AnyModule(
                torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, in[0]).eps(eps))),
            in};
  }

  Built dropout(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    a.lone("p");
    const double p = a.number("p", 0.5, 0, 0.99);
    a.finish({"p"});
    return {torch::nn::AnyModule(torch::nn::Dropout(p)), in};
  }

  Built activation(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const std::string& t = c.spec.type;
    a.finish({});
    if (t == "relu") return {torch::nn::AnyModule(torch::nn::ReLU()), in};
    if (t == "silu") return {torch::nn::AnyModule(torch::nn::SiLU()), in};
    if (t == "tanh") return {torch::nn::AnyModule(torch::nn::Tanh()), in};
    return {torch::nn::AnyModule(torch::nn::Sigmoid()), in};
  }

  Built gelu(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const std::string approx = a.text("approximate", "none", {"none", "tanh"});
    a.finish({"approximate"});
    return {torch::nn::AnyModule(torch::nn::GELU(torch::nn::GELUOptions().approximate(approx))),
            in};
  }

  Built softmax(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const int64_t dim = a.integer("dim", -1, -8);
    a.finish({"dim"});
    // Last, it is left to the loss (cross-entropy takes logits); predictions apply it.
    if (c.last) return {torch::nn::AnyModule(torch::nn::Identity()), in};
    return {torch::nn::AnyModule(torch::nn::Softmax(dim)), in};
  }

  Built pooling(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const std::string& t = c.spec.type;
    c.need(a, 3, "[C, H, W]");
    a.lone("kernel");
    const auto kernel = a.sizes("kernel", 2, std::nullopt);
    const auto st = a.has("stride") ? a.sizes("stride", 2, 1) : kernel;  // PyTorch's default
    const auto padding = a.sizes("padding", 2, 0, 0);
    a.finish({"kernel", "stride", "padding"});
    Shape s{in[0]};
    for (size_t d = 0; d < 2; ++d) {
      const int64_t size = (in[d + 1] + 2 * padding[d] - kernel[d]) / st[d] + 1;
      if (size < 1)
        a.fail(fmt::format("a window of {} does not fit an input of {}", shapeText(kernel),
                           shapeText(in)));
      s.push_back(size);
    }
    if (t == "max_pool2d")
      return {torch::nn::AnyModule(
                  torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions({kernel[0], kernel[1]})
                                           .stride({st[0], st[1]})
                                           .padding({padding[0], padding[1]}))),
              s};
    return {torch::nn::AnyModule(
                torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions({kernel[0], kernel[1]})
                                         .stride({st[0], st[1]})
                                         .padding({padding[0], padding[1]}))),
            s};
  }

  Built adaptivePool(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    c.need(a, 3, "[C, H, W]");
    a.lone("out");
    const auto out = a.sizes("out", 2, 1);
    a.finish({"out"});
    return {torch::nn::AnyModule(torch::nn::AdaptiveAvgPool2d(
                torch::nn::AdaptiveAvgPool2dOptions({out[0], out[1]}))),
            {in[0], out[0], out[1]}};
  }

  Built flatten(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    a.finish({});
    const int64_t n = std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>());
    return {torch::nn::AnyModule(torch::nn::Flatten()), {n}};
  }

  Built embedding(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    if (!tokens_) a.fail("embeds token ids, and the data gives no tokens");
    a.lone("dim");
    const int64_t dim = a.integer("dim", std::nullopt, 1);
    const int64_t num = a.integer("num", classesOr(1), 1);
    a.finish({"dim", "num"});
    Shape s = in;
    s.push_back(dim);
    return {torch::nn::AnyModule(torch::nn::Embedding(num, dim)), s};
  }

  Built sequential(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const config::LayerSpec& spec = c.spec;
    a.finish({});
    Shape s = in;
    auto parts = list(spec.children, s, c.path, c.depth + 1, c.rows, false);
    return {torch::nn::AnyModule(Chain(std::move(parts), false, torch::nn::AnyModule())), s};
  }

  Built residual(Args& a, const Ctx& c) {
    const Shape& in = c.in;
    const config::LayerSpec& spec = c.spec;
    const bool project = a.flag("projection", false);
    a.finish({"layers", "projection"});
    if (spec.children.empty()) a.fail("needs its layers: residual: [conv2d: {...}, relu]");
    Shape s = in;
    auto parts = list(spec.children, s, c.path, c.depth + 1, c.rows, false);
    torch::nn::AnyModule proj;
    if (s != in) {
      if (!project)
        a.fail(
            fmt::format("its layers turn {} into {}, and x + f(x) needs the same shape: add "
                        "projection: true, or keep the shape",
                        shapeText(in), shapeText(s)));
      proj = projection(a, in, s);
    }
    return {torch::nn::AnyModule(Chain(std::move(parts), true, std::move(proj))), s};
  }

  // The shortcut where f changes the shape: a 1x1 convolution (its stride the size ratio) for
  // images, a linear map for vectors.
  static torch::nn::AnyModule projection(const Args& a, const Shape& in, const Shape& out) {
    if (in.size() == 3 && out.size() == 3) {
      if (in[1] % out[1] != 0 || in[2] % out[2] != 0 || in[1] / out[1] != in[2] / out[2])
        a.fail(fmt::format("no 1x1 projection turns {} into {}", shapeText(in), shapeText(out)));
      const int64_t stride = in[1] / out[1];
      return torch::nn::AnyModule(
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in[0], out[0], 1).stride(stride).bias(false)));
    }
    if (in.size() == out.size() &&
        std::equal(in.begin(), in.end() - 1, out.begin()))  // only the last dimension differs
      return torch::nn::AnyModule(
          torch::nn::Linear(torch::nn::LinearOptions(in.back(), out.back()).bias(false)));
    a.fail(fmt::format("no projection turns {} into {}", shapeText(in), shapeText(out)));
  }

  static std::string suggestion(const std::string& t) {
    std::string best;
    size_t score = 4;
    for (const auto& known : layerTypes()) {
      std::vector<size_t> row(known.size() + 1);
      std::iota(row.begin(), row.end(), 0);
      for (size_t i = 1; i <= t.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= known.size(); ++j) {
          const size_t up = row[j];
          row[j] =
              std::min({row[j] + 1, row[j - 1] + 1, diag + (t[i - 1] == known[j - 1] ? 0 : 1)});
          diag = up;
        }
      }
      if (row.back() < score) score = row.back(), best = known;
    }
    return best.empty() ? fmt::format("; the types are {}", fmt::join(layerTypes(), ", "))
                        : fmt::format(" (did you mean '{}'?)", best);
  }

  // classes < 1: not known yet (`ltrain config` on text, whose vocabulary only the file says).
  int64_t classesOr(int64_t placeholder) const { return classes_ > 0 ? classes_ : placeholder; }
  int64_t classes_;
  bool tokens_;
};

}  // namespace

const std::vector<std::string>& layerTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> names;
    for (const auto& k : Builder::kinds()) names.push_back(k.first);
    return names;
  }();
  return types;
}

LayerGraph buildLayerGraph(const std::vector<config::LayerSpec>& layers, const Shape& input_shape,
                           int64_t classes, bool tokens) {
  if (layers.empty())
    throw LayerError("model.layers is empty: model.name layers needs the network as a list", 0);
  LayerGraph g;
  Shape shape = input_shape;
  Builder b(classes, tokens);
  for (auto& m : b.list(layers, shape, "model.layers", 1, g.rows, true)) g.seq->push_back(m);
  const Shape want = tokens ? Shape{input_shape[0], classes} : Shape{classes};
  if (classes > 0 && shape != want)
    throw LayerError(
        fmt::format("model.layers: the network gives {} per example, but the data needs {} "
                    "({}): end with a layer that gives that, e.g. linear: {{out: {}}}",
                    shapeText(shape), shapeText(want),
                    tokens ? "a score per token and vocabulary entry" : "a score per class",
                    classes),
        layers.back().line);
  return g;
}

std::string layerSummary(const LayerGraph& g, const Shape& input_shape) {
  // torchinfo's columns: "Layer (type:depth-idx)", "Output Shape" (with the batch as -1),
  // "Param #"; a container's count is that of its layers.
  std::string out =
      fmt::format("{:<40}{:<28}{:>12}\n", "Layer (type:depth-idx)", "Output Shape", "Param #");
  out += std::string(80, '=') + "\n";
  out += fmt::format("{:<40}{:<28}{:>12}\n", "Input",
                     "[-1, " + fmt::format("{}", fmt::join(input_shape, ", ")) + "]", "--");
  int64_t total = 0;
  for (const auto& r : g.rows) {
    const std::string name = std::string(static_cast<size_t>(r.depth - 1) * 4, ' ') +
                             fmt::format("{}: {}-{}", r.type, r.depth, r.index);
    out += fmt::format("{:<40}{:<28}{:>12}\n", name,
                       "[-1, " + fmt::format("{}", fmt::join(r.shape, ", ")) + "]",
                       r.container ? "--" : fmt::format("{}", r.params));
    if (r.depth == 1) total += r.params;
  }
  out += std::string(80, '=') + "\n";
  out += fmt::format("Total params: {}\n", total);
  return out;
}

}  // namespace ltrain::models

namespace ltrain::models::layers {

ModelBuilder builder() {
  ModelBuilder b;
  b.build = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t classes,
               bool tokens) {
    return Classifier(buildLayerGraph(cfg.layers, shape, classes, tokens).seq);
  };
  return b;
}

}  // namespace ltrain::models::layers
