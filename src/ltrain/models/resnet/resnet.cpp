// ResNet-18/34 (He et al. 2016): for small images the CIFAR stem (a 3x3 stride-1 conv, no
// max-pool), for photos (model.stem imagenet, or auto at 128 pixels and more) torchvision's 7x7
// stride-2 conv and 3x3 max-pool; then batch norm and ReLU, four stages of basic blocks (2-2-2-2 or
// 3-4-6-3) of width w, 2w, 4w, 8w, the last three halving the image, then global average pooling
// and the classifier. In the "layers" Sequential like every ltrain model;
// bench/reference/train_ref.py builds the same module in Python, so the parameter names
// ("layers.3.conv1.weight", "layers.5.shortcut.0.weight") match for safetensors.
#include <fmt/format.h>
#include <torch/torch.h>
#include <algorithm>

#include "ltrain/common/errors.h"
#include "ltrain/models/activation_checkpoint.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/layers.h"

namespace ltrain::models {
namespace {

struct BasicBlockImpl : torch::nn::Cloneable<BasicBlockImpl>, RepeatedBlock {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) : in(in), out(out), stride(stride) {
    reset();
  }
  // Registers the parts (again, for a clone: dist.strategy=dp replicates the model).
  void reset() override {
    conv1 = register_module("conv1", conv3x3(in, out, stride));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2 = register_module("conv2", conv3x3(out, out, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
    // A 1x1 projection where the block changes the shape; the identity elsewhere.
    if (stride != 1 || in != out)
      shortcut = register_module(
          "shortcut",
          torch::nn::Sequential(
              torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
              torch::nn::BatchNorm2d(out)));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  static torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
    return torch::nn::Conv2d(
        torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
  }
  int64_t in, out, stride;
  // In registration order, which is also the order of the parameter names.
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::BatchNorm2d bn2{nullptr};
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

}  // namespace

torch::nn::Sequential buildResnet(const config::ModelConfig& cfg, const std::vector<int64_t>& shape,
                                  int64_t num_classes) {
  const std::vector<int64_t> blocks =
      cfg.depth == 18 ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
  if (shape[1] < 8 || shape[2] < 8)
    throw UsageError(fmt::format(
        "model resnet: its three stride-2 stages need images of at least 8x8 pixels, the data "
        "has {}x{}",
        shape[1], shape[2]));
  torch::nn::Sequential seq;
  const int64_t w = cfg.width;
  const bool imagenet =
      cfg.stem == "imagenet" || (cfg.stem == "auto" && std::min(shape[1], shape[2]) >= 128);
  // ImageNet's stem cuts a photo to a quarter a side before the stages (torchvision's resnet18);
  // small images keep every pixel.
  seq->push_back(torch::nn::Conv2d(
      imagenet ? torch::nn::Conv2dOptions(shape[0], w, 7).stride(2).padding(3).bias(false)
               : torch::nn::Conv2dOptions(shape[0], w, 3).stride(1).padding(1).bias(false)));
  seq->push_back(torch::nn::BatchNorm2d(w));
  seq->push_back(torch::nn::ReLU());
  if (imagenet)
    seq->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));
  int64_t in = w;
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    const int64_t out = w << stage;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      seq->push_back(BasicBlock(in, out, stage > 0 && b == 0 ? 2 : 1));
      in = out;
    }
  }
  seq->push_back(torch::nn::AdaptiveAvgPool2d(1));
  seq->push_back(torch::nn::Flatten());
  seq->push_back(torch::nn::Linear(in, num_classes));
  return seq;
}

}  // namespace ltrain::models

namespace ltrain::models::resnet {

ModelBuilder builder() {
  ModelBuilder b;
  b.build = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t classes,
               bool) { return imageClassifier(cfg, shape, classes, buildResnet); };
  return b;
}

}  // namespace ltrain::models::resnet
