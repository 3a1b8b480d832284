// The safetensors format, read and written here (no C++ library for it is on the project's list;
// the format is an 8-byte little-endian header length, a JSON header, then raw little-endian data):
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}.
#pragma once
#include <torch/types.h>

#include <cstdio>
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
// Written tensor by tensor, for a model that is never whole in one place: the header (names,
// dtypes, shapes) first, then each tensor's bytes in the header's order; commit() renames the file
// into place (fsynced), and a stream never committed leaves the previous file as it was.
class SafetensorsStream {
 public:
  struct Entry {
    std::string name;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  // std::runtime_error naming the file when it cannot be created.
  SafetensorsStream(std::string path, const std::vector<Entry>& entries,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStream();
  SafetensorsStream(const SafetensorsStream&) = delete;
  SafetensorsStream& operator=(const SafetensorsStream&) = delete;
  // The next entry's values (std::logic_error for another shape or dtype, or one too many;
  // std::runtime_error naming the file when the disk is full).
  void write(const torch::Tensor& t);
  void commit();  // after the last entry

 private:
  std::string path_, tmp_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
  std::FILE* file_ = nullptr;
};

// A safetensors file's header, checked, with reads of any tensor's elements by byte range (pread):
// what a rank needs of a checkpoint is read without reading, or mapping, the rest.
class SafetensorsFile {
 public:
  struct Entry {
    torch::ScalarType dtype{};
    std::vector<int64_t> shape;
    int64_t numel = 0;
    uint64_t offset = 0;  // of its first byte in the file
  };
  // UsageError naming the file and the problem: a bad header, an unknown dtype, offsets that
  // overlap or run past the end, a truncated file.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& name) const;
  const std::string& path() const { return path_; }
  // The header's __metadata__ (string values; others are left out).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Elements [begin, begin + count) of tensor `name` (flattened), as a 1-d CPU tensor of its dtype.
  // UsageError naming the file when the read comes short.
  torch::Tensor read(const std::string& name, int64_t begin, int64_t count) const;
  torch::Tensor read(const std::string& name) const;  // the whole tensor, in its shape

 private:
  void index(const std::string& header, uint64_t data_size, uint64_t data_start);
  std::string path_;
  int fd_ = -1;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a file (read one at a time: no second copy of the file in memory).
// UsageError as SafetensorsFile's.
std::map<std::string, torch::Tensor> loadSafetensors(const std::string& path);

// A module's parameters and buffers under PyTorch's names ("layers.0.weight").
NamedTensors moduleState(const torch::nn::Module& m);
// Copies a file's tensors into the module; every parameter and buffer must be there with its
// shape, and nothing else may be (UsageError naming the first missing, extra or mismatched one).
void loadModuleState(torch::nn::Module& m, const std::string& path);

}  // namespace ltrain::io
