// The safetensors format, read and written here (no C++ library for it is on the project's list;
// the format is an 8-byte little-endian header length, a JSON header, then raw little-endian data):
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}.
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace ltrain::io {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Written atomically; tensors are stored contiguous, in the order given.
void saveSafetensors(const std::string& path, const NamedTensors& tensors,
                     const std::map<std::string, std::string>& metadata = {});
// Throws UsageError naming the file and the problem: a bad header, an unknown dtype, offsets that
// overlap or run past the end, a truncated file.
std::map<std::string, torch::Tensor> loadSafetensors(const std::string& path);

// A module's parameters and buffers under PyTorch's names ("layers.0.weight").
NamedTensors moduleState(const torch::nn::Module& m);
// Copies a file's tensors into the module; every parameter and buffer must be there with its
// shape, and nothing else may be (UsageError naming the first missing, extra or mismatched one).
void loadModuleState(torch::nn::Module& m, const std::string& path);

}  // namespace ltrain::io
