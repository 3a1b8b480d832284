// The IDX reader on good and broken files, gzip and raw.
#include <zlib.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/common/errors.h"
#include "ltrain/data/dataset.h"
#include "ltrain/data/idx.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using ltrain::data::readIdx;

namespace {
std::string idxBytes(uint8_t ndim, std::vector<uint32_t> dims, size_t data_bytes,
                     uint8_t type = 0x08) {
  std::string s{0, 0, static_cast<char>(type), static_cast<char>(ndim)};
  for (auto d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  for (size_t i = 0; i < data_bytes; ++i) s += static_cast<char>(i % 7);
  return s;
}
void writeGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}
std::string errorOf(const std::string& path) {
  try {
    readIdx(path);
  } catch (const ltrain::UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("IDX files read the same raw and gzip-compressed") {
  ltrain::test::TempDir dir;
  auto bytes = idxBytes(3, {2, 3, 4}, 24);
  ltrain::test::writeText(dir / "raw", bytes);
  writeGz(dir / "x.gz", bytes);
  auto a = readIdx(dir / "raw"), b = readIdx(dir / "x.gz");
  CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
  CHECK(a.bytes.size() == 24);
  CHECK(a.bytes[8] == 1);
  CHECK(a.bytes == b.bytes);
}

TEST_CASE("broken IDX files are errors naming the file and the problem") {
  ltrain::test::TempDir dir;
  CHECK_THAT(errorOf(dir / "missing"), Contains("not found"));
  ltrain::test::writeText(dir / "short", idxBytes(3, {2, 3, 4}, 10));
  CHECK_THAT(errorOf(dir / "short"), Contains("truncated: expected 24 bytes of data, found 10"));
  writeGz(dir / "short.gz", idxBytes(3, {2, 3, 4}, 10));
  CHECK_THAT(errorOf(dir / "short.gz"), Contains("truncated"));
  ltrain::test::writeText(dir / "magic", idxBytes(3, {2, 3, 4}, 24, 0x0d));
  CHECK_THAT(errorOf(dir / "magic"), Contains("magic 0x00000d03"));
  ltrain::test::writeText(dir / "tiny", std::string("\0\0", 2));
  CHECK_THAT(errorOf(dir / "tiny"), Contains("4-byte IDX header"));
  ltrain::test::writeText(dir / "extra", idxBytes(1, {4}, 6));
  CHECK_THAT(errorOf(dir / "extra"), Contains("bytes after"));
  ltrain::test::writeText(dir / "header", idxBytes(3, {2}, 0));
  CHECK_THAT(errorOf(dir / "header"), Contains("truncated inside its header"));
}

TEST_CASE("image and label files must agree") {
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "img", idxBytes(3, {3, 2, 2}, 12));
  ltrain::test::writeText(dir / "lab", idxBytes(1, {2}, 2));
  CHECK_THROWS_WITH(ltrain::data::loadIdxPair(dir / "img", dir / "lab", 10),
                    Contains("3 images but 2 labels"));
  std::string labels = idxBytes(1, {3}, 0) + std::string("\x01\x02\x0c", 3);
  ltrain::test::writeText(dir / "lab3", labels);
  CHECK_THROWS_WITH(ltrain::data::loadIdxPair(dir / "img", dir / "lab3", 10),
                    Contains("label 12 at index 2"));
}

TEST_CASE("the Fashion-MNIST files from Debian load with the published sizes", "[data]") {
  auto cfg = ltrain::config::DataConfig{};
  cfg.dataset = "fashion_mnist";
  auto s = ltrain::data::loadDataset(cfg, 0);
  CHECK(s.train.size() == 60000);
  CHECK(s.test.size() == 10000);
  CHECK(s.train.exampleShape() == std::vector<int64_t>{1, 28, 28});
  // Fashion-MNIST is balanced: 6000 training examples of each class.
  auto counts = torch::bincount(s.train.targets);
  CHECK(counts.min().item<int64_t>() == 6000);
  CHECK(counts.max().item<int64_t>() == 6000);
}
