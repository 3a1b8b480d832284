#include "ltrain/models/layers/layer_graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "ltrain/common/edit_distance.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/layers/layer_args.h"
#include "ltrain/models/layers/layer_kinds.h"
#include "ltrain/models/layers/layer_modules.h"

namespace ltrain::models {
namespace {

using layer_graph::Args;
using layer_graph::Built;
using layer_graph::Chain;
using layer_graph::LayerInput;
using layer_graph::Shape;
using layer_graph::shapeText;

int64_t params(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

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
  // Where a container is: its layers are one level deeper and add their rows after its own.
  struct Place {
    int depth;
    std::vector<LayerRow>& rows;
  };

  Built layer(const config::LayerSpec& spec, const Shape& in, const std::string& path, int depth,
              std::vector<LayerRow>& rows, bool last) {
    Args a(spec, path);
    const LayerInput input{spec, in, path, last, classes_, tokens_};
    if (spec.type == "sequential") return sequential(a, input, {depth, rows});
    if (spec.type == "residual") return residual(a, input, {depth, rows});
    const auto& table = layer_graph::leafKinds();
    const auto kind = std::find_if(table.begin(), table.end(),
                                   [&](const auto& k) { return k.first == spec.type; });
    if (kind == table.end()) a.fail(fmt::format("unknown layer{}", suggestion(spec.type)));
    if (!spec.children.empty()) a.fail("takes arguments, not a list of layers");
    return kind->second(a, input);
  }

  Built sequential(Args& a, const LayerInput& c, const Place& at) {
    const Shape& in = c.in;
    const config::LayerSpec& spec = c.spec;
    a.finish({});
    Shape s = in;
    auto parts = list(spec.children, s, c.path, at.depth + 1, at.rows, false);
    return {torch::nn::AnyModule(Chain(std::move(parts), false, torch::nn::AnyModule())), s};
  }

  Built residual(Args& a, const LayerInput& c, const Place& at) {
    const Shape& in = c.in;
    const config::LayerSpec& spec = c.spec;
    const bool project = a.flag("projection", false);
    a.finish({"layers", "projection"});
    if (spec.children.empty()) a.fail("needs its layers: residual: [conv2d: {...}, relu]");
    Shape s = in;
    auto parts = list(spec.children, s, c.path, at.depth + 1, at.rows, false);
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
    const std::string best = closestOf(t, layerTypes(), 3);
    return best.empty() ? fmt::format("; the types are {}", fmt::join(layerTypes(), ", "))
                        : fmt::format(" (did you mean '{}'?)", best);
  }

  int64_t classes_;
  bool tokens_;
};

}  // namespace

const std::vector<std::string>& layerTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> names;
    for (const auto& k : layer_graph::leafKinds()) names.push_back(k.first);
    names.push_back("residual");
    names.push_back("sequential");
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
