// data/image_decode against Pillow on files Pillow writes (tests/parity/image_tools.py): PNG of
// every colour type (RGB, RGBA, gray, gray + alpha, palette with and without transparency,
// 1-bit, 16-bit gray, and a file without IEND) equal to Pillow's convert("RGB") and convert("L")
// exactly; JPEG (gray, RGB 4:2:0, progressive, junk before the end marker) within 1 per channel.
// Truncated and foreign files are one-line errors naming them, as Pillow refuses them too.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/data/image_decode.h"
#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;

namespace {
torch::Tensor asTensor(const ltrain::data::Image& im) {
  auto t = torch::from_blob(const_cast<uint8_t*>(im.pixels.data()),
                            {im.height, im.width, im.channels}, torch::kUInt8)
               .clone();
  return im.channels == 1 ? t.squeeze(2) : t;
}
}  // namespace

TEST_CASE("decoded JPEG and PNG pixels are Pillow's", "[data][image]") {
  TempDir dir;
  auto r = ltrain::test::runProcess(
      {LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/image_tools.py",
       "make-decode-set", dir / "set"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto pillow = ltrain::io::loadSafetensors(dir / "set/pillow.safetensors");
  REQUIRE(pillow.size() >= 20);
  for (const auto& [key, theirs] : pillow) {
    if (key.rfind("draft", 0) == 0) continue;  // DCT-scaled decodes: image_data_test
    const auto colon = key.rfind(':');
    const std::string file = key.substr(0, colon), mode = key.substr(colon + 1);
    INFO(key);
    const auto ours =
        asTensor(ltrain::data::decodeImageFile(dir / ("set/" + file), mode == "RGB" ? 3 : 1));
    REQUIRE(ours.sizes() == theirs.sizes());
    const int64_t diff =
        (ours.to(torch::kInt) - theirs.to(torch::kInt)).abs().max().item<int64_t>();
    CHECK(diff <= (file.size() > 4 && file.substr(file.size() - 4) == ".jpg" ? 1 : 0));
  }
}

TEST_CASE("a truncated or foreign image file is a one-line error naming it", "[data][image]") {
  TempDir dir;
  auto r = ltrain::test::runProcess(
      {LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/image_tools.py",
       "make-decode-set", dir / "set"});
  REQUIRE(r.exit_code == 0);
  for (const std::string name : {"rgb.png", "rgb.jpg", "progressive.jpg"}) {
    const std::string whole = ltrain::test::readText(dir / ("set/" + name));
    const std::string cut = dir / ("cut-" + name);
    ltrain::test::writeText(cut, whole.substr(0, whole.size() / 2));
    try {
      ltrain::data::decodeImageFile(cut, 3);
      FAIL("a truncated " << name << " decoded");
    } catch (const ltrain::UsageError& e) {
      CHECK_THAT(e.what(), Contains("image '" + cut + "' is a corrupt or truncated"));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
  ltrain::test::writeText(dir / "notes.jpg", "not an image");
  CHECK_THROWS_WITH(ltrain::data::decodeImageFile(dir / "notes.jpg", 3),
                    Contains("image '" + (dir / "notes.jpg") + "' is neither a JPEG nor a PNG"));
  CHECK_THROWS_WITH(ltrain::data::decodeImageFile(dir / "missing.png", 3),
                    Contains("image '" + (dir / "missing.png") + "' cannot be read"));
}
