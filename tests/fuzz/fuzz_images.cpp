// libFuzzer target: the JPEG and PNG readers of image_folder and image_list (libjpeg-turbo and
// libpng under ltrain's error handling, which for libpng is a longjmp). Rejections must be
// UsageErrors; a decoded image must hold height x width x channels pixels and survive the
// evaluation and training transforms.
#include <torch/torch.h>

#include <cstdint>

#include "ltrain/common/errors.h"
#include "ltrain/data/image_decode.h"
#include "ltrain/data/image_transforms.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int channels : {1, 3}) {
    try {
      auto im = ltrain::data::decodeImage(data, size, channels, "fuzz input");
      if (im.channels != channels || im.height <= 0 || im.width <= 0 ||
          im.pixels.size() != static_cast<size_t>(im.height * im.width * channels))
        std::abort();
      // DCT-scaled decoding of the same bytes: never larger, the stored size the same.
      auto small = ltrain::data::decodeImage(data, size, channels, "fuzz input",
                                             [](int64_t, int64_t) { return 0.25; });
      if (small.full_height != im.height || small.full_width != im.width ||
          small.height > im.height || small.width > im.width ||
          small.pixels.size() != static_cast<size_t>(small.height * small.width * channels))
        std::abort();
      if (im.height * im.width > 4096) continue;  // transforms of small images only: speed
      auto e = ltrain::data::evalTransform(im, 8, 6);
      ltrain::data::ExampleRng rng(1, 2, 3);
      auto t = ltrain::data::trainTransform(im, 6, rng);
      if (e.size(1) != 6 || e.size(2) != 6 || t.size(1) != 6 || t.size(2) != 6) std::abort();
    } catch (const ltrain::UsageError&) {
    }
  }
  return 0;
}
