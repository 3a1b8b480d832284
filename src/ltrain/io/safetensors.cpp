#include "ltrain/io/safetensors.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = c.numel() * static_cast<int64_t>(c.element_size());
    header[name] = {{"dtype", dtypeName(c.scalar_type())},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  std::string text = dumpJsonLine(header);
  while (text.size() % 8) text += ' ';  // the format's alignment convention
  std::string out;
  out.reserve(8 + text.size() + offset);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  for (const auto& c : data)
    out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  writeFileAtomic(path, out);
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

std::map<std::string, torch::Tensor> loadSafetensors(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(
        fmt::format("safetensors file '{}' is a directory, expected a .safetensors file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("safetensors file '{}' not found or unreadable", path));
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char len[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(len), 8))
    throw UsageError(
        fmt::format("safetensors file '{}' is truncated: no 8-byte header length", path));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > size - 8 || n > (100u << 20))
    throw UsageError(
        fmt::format("safetensors file '{}' is not a safetensors file or is truncated: its "
                    "header length field says {} bytes, the file holds {}",
                    path, n, size - 8));
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const Json root = parseJsonOrDiscard(header);
  if (root.is_discarded())
    throw UsageError(fmt::format("safetensors file '{}': the header is not valid JSON", path));
  if (!root.is_object())
    throw UsageError(fmt::format("safetensors file '{}': the header is not a JSON object", path));
  const uint64_t data_size = size - 8 - n;
  std::string data(data_size, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data_size));

  std::map<std::string, torch::Tensor> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& item : root.items()) {
    const std::string name = item.key();
    const Json& e = item.value();
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& what) {
      return UsageError(fmt::format("safetensors file '{}': tensor '{}' {}", path, name, what));
    };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      throw bad("needs dtype, shape and data_offsets [begin, end]");
    const std::string dtype = e["dtype"].get<std::string>();
    torch::ScalarType type{};
    bool known = false;
    for (const auto& [dn, t] : dtypes())
      if (dn == dtype) type = t, known = true;
    if (!known) throw bad(fmt::format("has an unknown dtype '{}'", dtype));
    std::vector<int64_t> shape;
    int64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer()) throw bad("has a shape that is not a list of integers");
      shape.push_back(d.get<int64_t>());
      // No negative sizes, and no product that could overflow (the file's size is checked below,
      // with a message that says it may be truncated).
      constexpr int64_t kMaxElements = int64_t{1} << 50;
      if (shape.back() < 0 || (shape.back() > 0 && numel > kMaxElements / shape.back()))
        throw bad("has a negative or impossibly large shape");
      numel *= shape.back();
    }
    const auto& offsets = e["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw bad("has data_offsets that are not non-negative integers");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t expect = static_cast<uint64_t>(numel) * c10::elementSize(type);
    if (end < begin || end - begin != expect)
      throw bad(fmt::format("has data_offsets [{}, {}] for {} bytes of data", begin, end, expect));
    if (end > data_size)
      throw bad(fmt::format("runs past the end of the file ({} > {} bytes of data): truncated?",
                            end, data_size));
    ranges.emplace_back(begin, end);
    out[name] =
        torch::from_blob(data.data() + begin, shape, torch::TensorOptions().dtype(type)).clone();
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw UsageError(
          fmt::format("safetensors file '{}': tensors overlap in the data section", path));
  return out;
}

NamedTensors moduleState(const torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

void loadModuleState(torch::nn::Module& m, const std::string& path) {
  auto file = loadSafetensors(path);
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& [name, t] : moduleState(m)) {
    auto it = file.find(name);
    if (it == file.end())
      throw UsageError(
          fmt::format("safetensors file '{}' has no tensor '{}' that the model needs", path, name));
    if (it->second.sizes() != t.sizes())
      throw UsageError(
          fmt::format("safetensors file '{}': tensor '{}' has shape {}, the model expects {}", path,
                      name, fmt::join(it->second.sizes(), "x"), fmt::join(t.sizes(), "x")));
    t.copy_(it->second);
    ++used;
  }
  if (used != file.size()) {
    std::set<std::string> known;
    for (const auto& [n, _] : moduleState(m)) known.insert(n);
    for (const auto& [name, t] : file)
      if (!known.count(name))
        throw UsageError(fmt::format(
            "safetensors file '{}' has tensor '{}' that the model does not have", path, name));
  }
}

}  // namespace ltrain::io
