// The protobuf encoder is hand-written because the format is four fields: protobuf from Debian
// would add a code generator and a runtime library for them.
#include "ltrain/io/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "ltrain/io/crc32c.h"

namespace ltrain::io {
namespace {

// Field numbers from tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto.
constexpr int kEventWallTime = 1;     // double
constexpr int kEventStep = 2;         // int64
constexpr int kEventFileVersion = 3;  // string
constexpr int kEventSummary = 5;      // Summary
constexpr int kSummaryValue = 1;      // repeated Summary.Value
constexpr int kValueTag = 1;          // string
constexpr int kValueSimpleValue = 2;  // float

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void putLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void putKey(std::string& out, int field, WireType type) {
  putVarint(out, (static_cast<uint64_t>(field) << 3) | type);
}

// int64 goes out as its two's complement, so a negative step takes ten bytes, as protobuf does.
void putInt64(std::string& out, int field, int64_t v) {
  putKey(out, field, kVarint);
  putVarint(out, static_cast<uint64_t>(v));
}

void putDouble(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(out, field, kFixed64);
  putLe(out, bits, 8);
}

void putFloat(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(out, field, kFixed32);
  putLe(out, bits, 4);
}

void putBytes(std::string& out, int field, const std::string& v) {
  putKey(out, field, kLengthDelimited);
  putVarint(out, v.size());
  out += v;
}

std::string eventHeader(double wall_time, int64_t step) {
  std::string e;
  putDouble(e, kEventWallTime, wall_time);
  putInt64(e, kEventStep, step);
  return e;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot create directory {}: {}", dir, ec.message()));
  const double now = nowSeconds();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(now), hostname());
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error(fmt::format("cannot create {}", path_));
  // TensorBoard reads the version to decide how to treat steps that go backwards.
  std::string e = eventHeader(now, 0);
  putBytes(e, kEventFileVersion, "brain.Event:2");
  writeRecord(e);
  flush();
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value,
                               double wall_time) {
  scalars(step, wall_time, {{tag, value}});
}

void TensorBoardWriter::scalars(int64_t step, double wall_time,
                                const std::vector<std::pair<std::string, double>>& values) {
  if (values.empty()) return;
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    putBytes(v, kValueTag, tag);
    putFloat(v, kValueSimpleValue, static_cast<float>(value));
    putBytes(summary, kSummaryValue, v);
  }
  std::string e = eventHeader(wall_time, step);
  putBytes(e, kEventSummary, summary);
  writeRecord(e);
}

void TensorBoardWriter::sessionStart(int64_t step, double wall_time) {
  // Event.session_log (field 7) = SessionLog{status (field 1) = START (1)}: TensorBoard's reader
  // then drops the points written earlier at `step` or later.
  constexpr int kEventSessionLog = 7, kSessionLogStatus = 1, kStart = 1;
  std::string log;
  putInt64(log, kSessionLogStatus, kStart);
  std::string e = eventHeader(wall_time, step);
  putBytes(e, kEventSessionLog, log);
  writeRecord(e);
}

void TensorBoardWriter::flush() {
  out_.flush();
  if (!out_) throw std::runtime_error(fmt::format("cannot write {}", path_));
}

// TFRecord framing: the length has its own CRC so a reader can trust it before reading that many
// bytes.
void TensorBoardWriter::writeRecord(const std::string& data) {
  std::string head;
  putLe(head, data.size(), 8);
  putLe(head, maskedCrc32c(head.data(), head.size()), 4);
  std::string tail;
  putLe(tail, maskedCrc32c(data.data(), data.size()), 4);
  out_.write(head.data(), static_cast<std::streamsize>(head.size()));
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  out_.write(tail.data(), static_cast<std::streamsize>(tail.size()));
  if (!out_) throw std::runtime_error(fmt::format("cannot write {}", path_));
}

}  // namespace ltrain::io
