#include "ltrain/io/safetensors.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"

namespace ltrain::io {
namespace {

const std::vector<std::pair<std::string, torch::ScalarType>>& dtypes() {
  static const std::vector<std::pair<std::string, torch::ScalarType>> table{
      {"F64", torch::kDouble},    {"F32", torch::kFloat}, {"F16", torch::kHalf},
      {"BF16", torch::kBFloat16}, {"I64", torch::kLong},  {"I32", torch::kInt},
      {"I16", torch::kShort},     {"I8", torch::kChar},   {"U8", torch::kByte},
      {"BOOL", torch::kBool}};
  return table;
}

std::string dtypeName(torch::ScalarType t) {
  for (const auto& [name, type] : dtypes())
    if (type == t) return name;
  throw std::runtime_error(fmt::format("safetensors: no dtype name for {}", c10::toString(t)));
}

}  // namespace

void saveSafetensors(const std::string& path, const NamedTensors& tensors,
                     const std::map<std::string, std::string>& metadata) {
  // Streamed a tensor at a time: no copy of the whole file in memory (a rank's slices of a large
  // model, or its whole weights, would otherwise be held twice while they are written).
  std::vector<SafetensorsStream::Entry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.scalar_type(), t.sizes().vec()});
  SafetensorsStream out(path, entries, metadata);
  for (const auto& [name, t] : tensors) out.write(t);
  out.commit();
}

SafetensorsStream::SafetensorsStream(std::string path, const std::vector<Entry>& entries,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tmp_(path_ + fmt::format(".tmp.{}", ::getpid())), entries_(entries) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& e : entries_) {
    const int64_t bytes =
        c10::multiply_integers(e.shape) * static_cast<int64_t>(c10::elementSize(e.dtype));
    header[e.name] = {{"dtype", dtypeName(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = dumpJsonLine(header);
  while (text.size() % 8) text += ' ';  // the format's alignment convention
  std::string head;
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) head += static_cast<char>((n >> (8 * i)) & 0xff);
  head += text;
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)));
  if (std::fwrite(head.data(), 1, head.size(), file_) != head.size()) {
    const std::string why = std::strerror(errno);
    std::fclose(file_);  // no destructor runs for a constructor that throws
    file_ = nullptr;
    std::remove(tmp_.c_str());
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path_, why));
  }
}

SafetensorsStream::~SafetensorsStream() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
}

void SafetensorsStream::write(const torch::Tensor& t) {
  if (next_ >= entries_.size())
    throw std::logic_error("SafetensorsStream: more tensors than entries");
  const Entry& e = entries_[next_++];
  auto c = t.detach().to(torch::kCPU).contiguous();
  if (c.scalar_type() != e.dtype || c.sizes().vec() != e.shape)
    throw std::logic_error("SafetensorsStream: tensor '" + e.name + "' is not as announced");
  const size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
  if (std::fwrite(c.data_ptr(), 1, bytes, file_) != bytes)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)));
}

void SafetensorsStream::commit() {
  if (next_ != entries_.size()) throw std::logic_error("SafetensorsStream: tensors missing");
  const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int err = errno;
  std::fclose(file_);
  file_ = nullptr;
  if (!flushed || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(flushed ? errno : err);
    std::remove(tmp_.c_str());
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path_, why));
  }
  const auto dir = std::filesystem::path(path_).parent_path();  // the rename itself, durable
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    throw UsageError(
        fmt::format("safetensors file '{}' is a directory, expected a .safetensors file", path_));
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw UsageError(fmt::format("safetensors file '{}' not found or unreadable", path_));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    throw UsageError(fmt::format("safetensors file '{}' not found or unreadable", path_));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  unsigned char len[8];
  if (size < 8 || ::pread(fd_, len, 8, 0) != 8) {
    ::close(fd_);
    throw UsageError(
        fmt::format("safetensors file '{}' is truncated: no 8-byte header length", path_));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  try {
    if (n > size - 8 || n > (100u << 20))
      throw UsageError(
          fmt::format("safetensors file '{}' is not a safetensors file or is truncated: its "
                      "header length field says {} bytes, the file holds {}",
                      path_, n, size - 8));
    std::string header(n, '\0');
    if (::pread(fd_, header.data(), n, 8) != static_cast<ssize_t>(n))
      throw UsageError(fmt::format("safetensors file '{}' is truncated in its header", path_));
    index(header, size - 8 - n, 8 + n);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

void SafetensorsFile::index(const std::string& header, uint64_t data_size, uint64_t data_start) {
  const Json root = parseJsonOrDiscard(header);
  if (root.is_discarded())
    throw UsageError(fmt::format("safetensors file '{}': the header is not valid JSON", path_));
  if (!root.is_object())
    throw UsageError(fmt::format("safetensors file '{}': the header is not a JSON object", path_));
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& item : root.items()) {
    const std::string name = item.key();
    const Json& e = item.value();
    if (name == "__metadata__") {
      if (item.value().is_object())
        for (const auto& m : item.value().items())
          if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& what) {
      return UsageError(fmt::format("safetensors file '{}': tensor '{}' {}", path_, name, what));
    };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      throw bad("needs dtype, shape and data_offsets [begin, end]");
    const std::string dtype = e["dtype"].get<std::string>();
    Entry entry;
    bool known = false;
    for (const auto& [dn, t] : dtypes())
      if (dn == dtype) entry.dtype = t, known = true;
    if (!known) throw bad(fmt::format("has an unknown dtype '{}'", dtype));
    int64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer()) throw bad("has a shape that is not a list of integers");
      entry.shape.push_back(d.get<int64_t>());
      // No negative sizes, and no product that could overflow (the file's size is checked below,
      // with a message that says it may be truncated).
      constexpr int64_t kMaxElements = int64_t{1} << 50;
      if (entry.shape.back() < 0 ||
          (entry.shape.back() > 0 && numel > kMaxElements / entry.shape.back()))
        throw bad("has a negative or impossibly large shape");
      numel *= entry.shape.back();
    }
    const auto& offsets = e["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw bad("has data_offsets that are not non-negative integers");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t expect = static_cast<uint64_t>(numel) * c10::elementSize(entry.dtype);
    if (end < begin || end - begin != expect)
      throw bad(fmt::format("has data_offsets [{}, {}] for {} bytes of data", begin, end, expect));
    if (end > data_size)
      throw bad(fmt::format("runs past the end of the file ({} > {} bytes of data): truncated?",
                            end, data_size));
    ranges.emplace_back(begin, end);
    entry.numel = numel;
    entry.offset = data_start + begin;
    entries_[name] = std::move(entry);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw UsageError(
          fmt::format("safetensors file '{}': tensors overlap in the data section", path_));
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsFile::Entry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

torch::Tensor SafetensorsFile::read(const std::string& name, int64_t begin, int64_t count) const {
  const Entry* e = find(name);
  if (!e) throw std::logic_error(fmt::format("safetensors file '{}' has no '{}'", path_, name));
  if (begin < 0 || count < 0 || begin + count > e->numel)
    throw std::logic_error(fmt::format("safetensors '{}': elements [{}, {}) of '{}' (of {})", path_,
                                       begin, begin + count, name, e->numel));
  auto out = torch::empty({count}, torch::TensorOptions().dtype(e->dtype));
  const auto item = static_cast<uint64_t>(c10::elementSize(e->dtype));
  auto* dst = static_cast<char*>(out.data_ptr());
  uint64_t left = static_cast<uint64_t>(count) * item;
  auto at = static_cast<off_t>(e->offset + static_cast<uint64_t>(begin) * item);
  while (left > 0) {
    const ssize_t got = ::pread(fd_, dst, left, at);
    if (got <= 0)
      throw UsageError(fmt::format("safetensors file '{}': reading tensor '{}' failed: {}", path_,
                                   name, got < 0 ? std::strerror(errno) : "truncated"));
    dst += got, at += got, left -= static_cast<uint64_t>(got);
  }
  return out;
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const Entry* e = find(name);
  if (!e) throw std::logic_error(fmt::format("safetensors file '{}' has no '{}'", path_, name));
  return read(name, 0, e->numel).view(e->shape);
}

std::map<std::string, torch::Tensor> loadSafetensors(const std::string& path) {
  SafetensorsFile file(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, e] : file.entries()) out[name] = file.read(name);
  return out;
}

NamedTensors moduleState(const torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

void loadModuleState(torch::nn::Module& m, const std::string& path) {
  const SafetensorsFile file(path);
  // Every name and shape checked first, then one tensor in memory at a time.
  const auto state = moduleState(m);
  std::set<std::string> known;
  for (const auto& [name, t] : state) {
    const auto* e = file.find(name);
    if (!e)
      throw UsageError(
          fmt::format("safetensors file '{}' has no tensor '{}' that the model needs", path, name));
    if (!t.sizes().equals(e->shape))
      throw UsageError(
          fmt::format("safetensors file '{}': tensor '{}' has shape {}, the model expects {}", path,
                      name, fmt::join(e->shape, "x"), fmt::join(t.sizes(), "x")));
    known.insert(name);
  }
  for (const auto& [name, e] : file.entries())
    if (!known.count(name))
      throw UsageError(fmt::format(
          "safetensors file '{}' has tensor '{}' that the model does not have", path, name));
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : state) t.copy_(file.read(name));
}

}  // namespace ltrain::io
