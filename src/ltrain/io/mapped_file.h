// A read-only memory map of a whole file. Pages are read from disk as they are touched and live
// in the page cache, shared between the processes of a node: a corpus larger than memory trains
// without ever being loaded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ltrain::io {

class MappedFile {
 public:
  // UsageError naming the file when it is missing, a directory, or cannot be mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace ltrain::io
