#include "ltrain/models/layers/layer_kinds.h"

#include <torch/torch.h>

#include <functional>
#include <numeric>

#include "ltrain/models/layers/layer_modules.h"

namespace ltrain::models::layer_graph {
namespace {

Built linear(Args& a, const LayerInput& c) {
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
  const int64_t out = to_classes ? (a.text("out", "classes", {"classes"}), c.classesOr(1))
                                 : a.integer("out", std::nullopt, 1);
  const bool bias = a.flag("bias", true);
  a.finish({"out", "in", "bias"});
  Shape s = in;
  s.back() = out;
  return {
      torch::nn::AnyModule(torch::nn::Linear(torch::nn::LinearOptions(features, out).bias(bias))),
      s};
}

Built convolution(Args& a, const LayerInput& c) {
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

Built batchNorm(Args& a, const LayerInput& c) {
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

Built layerNorm(Args& a, const LayerInput& c) {
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

Built groupNorm(Args& a, const LayerInput& c) {
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

Built dropout(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  a.lone("p");
  const double p = a.number("p", 0.5, 0, 0.99);
  a.finish({"p"});
  return {torch::nn::AnyModule(torch::nn::Dropout(p)), in};
}

Built activation(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  const std::string& t = c.spec.type;
  a.finish({});
  if (t == "relu") return {torch::nn::AnyModule(torch::nn::ReLU()), in};
  if (t == "silu") return {torch::nn::AnyModule(torch::nn::SiLU()), in};
  if (t == "tanh") return {torch::nn::AnyModule(torch::nn::Tanh()), in};
  return {torch::nn::AnyModule(torch::nn::Sigmoid()), in};
}

Built gelu(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  const std::string approx = a.text("approximate", "none", {"none", "tanh"});
  a.finish({"approximate"});
  return {torch::nn::AnyModule(torch::nn::GELU(torch::nn::GELUOptions().approximate(approx))), in};
}

Built softmax(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  const int64_t dim = a.integer("dim", -1, -8);
  a.finish({"dim"});
  // Last, it is left to the loss (cross-entropy takes logits); predictions apply it.
  if (c.last) return {torch::nn::AnyModule(torch::nn::Identity()), in};
  return {torch::nn::AnyModule(torch::nn::Softmax(dim)), in};
}

Built pooling(Args& a, const LayerInput& c) {
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
  return {
      torch::nn::AnyModule(torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions({kernel[0], kernel[1]})
                                                    .stride({st[0], st[1]})
                                                    .padding({padding[0], padding[1]}))),
      s};
}

Built adaptivePool(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  c.need(a, 3, "[C, H, W]");
  a.lone("out");
  const auto out = a.sizes("out", 2, 1);
  a.finish({"out"});
  return {torch::nn::AnyModule(
              torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions({out[0], out[1]}))),
          {in[0], out[0], out[1]}};
}

Built flatten(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  a.finish({});
  const int64_t n = std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>());
  return {torch::nn::AnyModule(torch::nn::Flatten()), {n}};
}

Built embedding(Args& a, const LayerInput& c) {
  const Shape& in = c.in;
  if (!c.tokens) a.fail("embeds token ids, and the data gives no tokens");
  a.lone("dim");
  const int64_t dim = a.integer("dim", std::nullopt, 1);
  const int64_t num = a.integer("num", c.classesOr(1), 1);
  a.finish({"dim", "num"});
  Shape s = in;
  s.push_back(dim);
  return {torch::nn::AnyModule(torch::nn::Embedding(num, dim)), s};
}

}  // namespace

const std::vector<std::pair<std::string, MakeLayer>>& leafKinds() {
  static const std::vector<std::pair<std::string, MakeLayer>> table{
      {"linear", linear},
      {"conv1d", convolution},
      {"conv2d", convolution},
      {"batch_norm1d", batchNorm},
      {"batch_norm2d", batchNorm},
      {"layer_norm", layerNorm},
      {"rms_norm", layerNorm},
      {"group_norm", groupNorm},
      {"dropout", dropout},
      {"relu", activation},
      {"gelu", gelu},
      {"silu", activation},
      {"tanh", activation},
      {"sigmoid", activation},
      {"softmax", softmax},
      {"max_pool2d", pooling},
      {"avg_pool2d", pooling},
      {"adaptive_avg_pool2d", adaptivePool},
      {"flatten", flatten},
      {"embedding", embedding},
  };
  return table;
}

}  // namespace ltrain::models::layer_graph
