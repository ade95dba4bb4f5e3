// Fuzzes decode_jpeg / decode_png / decode_image (datasets/image_codec.h). Input: one mode byte, then
// the image bytes. Mode bits 0..1: decoder (jpeg, png, image, image); bits 2..3: channels (0, 1, 3, 4;
// 4 is asked of decode_png only, since decode_jpeg documents std::invalid_argument for it).
// Contract under test: corrupt, truncated or absurdly large images throw DataError, never crash, leak,
// exit or allocate beyond kMaxDecodedImageBytes; a decoded image holds exactly
// height * width * channels values at its bit depth, with the channels asked for.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "framework/data/data_error.h"
#include "datasets/image_codec.h"

namespace {

[[noreturn]] void finding(const char* what, const keel::DecodedImage& image) {
  std::fprintf(stderr, "image_fuzz: %s (%lld x %lld x %lld, %d-bit, %zu + %zu values)\n", what,
               static_cast<long long>(image.height), static_cast<long long>(image.width),
               static_cast<long long>(image.channels), image.bit_depth, image.pixels8.size(), image.pixels16.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int decoder = data[0] & 3;
  static const int kChannels[] = {0, 1, 3, 4};
  int channels = kChannels[(data[0] >> 2) & 3];
  if (channels == 4 && decoder != 1) channels = 3;  // decode_jpeg has no 4-channel output
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    keel::DecodedImage image = decoder == 0   ? keel::decode_jpeg(bytes, channels)
                               : decoder == 1 ? keel::decode_png(bytes, channels)
                                              : keel::decode_image(bytes, channels);
    if (image.height <= 0 || image.width <= 0 || image.channels <= 0) finding("empty image decoded", image);
    if (channels != 0 && image.channels != channels) finding("wrong channel count", image);
    const size_t n = static_cast<size_t>(image.num_values());
    const bool ok8 = image.bit_depth == 8 && image.pixels8.size() == n && image.pixels16.empty();
    const bool ok16 = image.bit_depth == 16 && image.pixels16.size() == n && image.pixels8.empty();
    if (!ok8 && !ok16) finding("pixel buffer does not match the dimensions", image);
    if (n <= (size_t{1} << 16)) (void)keel::convert_image_dtype(image);
  } catch (const keel::DataError&) {
    // The documented outcome for bad data.
  }
  return 0;
}
