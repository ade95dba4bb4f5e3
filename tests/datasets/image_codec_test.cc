#include "datasets/image_codec.h"

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data_error.h"
#include "tests/support/golden.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

// Fixtures written by bench/golden_images.py.
std::string fixture(const std::string& name) {
  const std::string path = std::string(KEEL_TESTS_DIR) + "/golden/images/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (run bench/golden_images.py)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<uint16_t> values_of(const DecodedImage& im) {
  if (im.bit_depth == 16) return im.pixels16;
  return std::vector<uint16_t>(im.pixels8.begin(), im.pixels8.end());
}

std::vector<uint16_t> unhex(const std::string& hex, int bit_depth) {
  const size_t digits = bit_depth == 16 ? 4 : 2;
  std::vector<uint16_t> v(hex.size() / digits);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(std::stoul(hex.substr(i * digits, digits), nullptr, 16));
  return v;
}

std::string describe(const nlohmann::json& c) {
  return c.at("file").get<std::string>() + " channels=" + std::to_string(c.at("channels").get<int>());
}

TEST(ImageCodec, EveryFixtureDecodesAsPillowDoes) {
  const nlohmann::json& doc = testing::load_golden("images/decode.json");
  ASSERT_GE(doc.at("cases").size(), 20u);
  for (const auto& c : doc.at("cases")) {
    const std::string what = describe(c);
    const std::string bytes = fixture(c.at("file"));
    const DecodedImage im = decode_image(bytes, c.at("channels").get<int>());
    const std::vector<int64_t> shape = c.at("shape");
    ASSERT_EQ((std::vector<int64_t>{im.height, im.width, im.channels}), shape) << what;
    ASSERT_EQ(im.bit_depth, c.at("bit_depth").get<int>()) << what;
    const std::vector<uint16_t> want = unhex(c.at("hex"), im.bit_depth), got = values_of(im);
    ASSERT_EQ(got.size(), want.size()) << what;
    int64_t differ = 0, first = -1, max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t d = std::abs(static_cast<int64_t>(got[i]) - static_cast<int64_t>(want[i]));
      if (d != 0 && first < 0) first = static_cast<int64_t>(i);
      differ += d != 0;
      max_diff = std::max(max_diff, d);
    }
    if (c.at("kind") == "gray_pillow") {
      // keel converts RGB -> gray as TF (libpng, 0.299/0.587/0.114); Pillow rounds its own way.
      EXPECT_LE(max_diff, 1) << what;
    } else {
      EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << want.size() << " values differ from "
                           << (c.at("kind") == "exact" ? "the written pixels" : "Pillow") << ", first at " << first
                           << ": keel " << got[static_cast<size_t>(std::max<int64_t>(first, 0))] << ", want "
                           << want[static_cast<size_t>(std::max<int64_t>(first, 0))];
    }
  }
}

TEST(ImageCodec, DecodeImageDispatchesOnMagicBytes) {
  const std::string jpg = fixture("gray_q95.jpg"), png = fixture("gray8.png");
  EXPECT_EQ(decode_image(jpg).pixels8, decode_jpeg(jpg).pixels8);
  EXPECT_EQ(decode_image(png).pixels8, decode_png(png).pixels8);
  EXPECT_THROW(decode_png(jpg), DataError);
  EXPECT_THROW(decode_jpeg(png), DataError);
  for (const std::string& junk : {std::string(), std::string("GIF89a..."), std::string("\xFF\xD8", 2), std::string("\x89PNG")}) {
    try {
      decode_image(junk);
      ADD_FAILURE() << "decoded " << junk.size() << " junk bytes";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("unknown image format (expected JPEG or PNG)"));
    }
  }
  EXPECT_THROW(decode_image(png, 2), std::invalid_argument);
  EXPECT_THROW(decode_jpeg(jpg, 4), std::invalid_argument);
}

// Channel conversions that Pillow's goldens do not cover, checked against the as-stored decode.
TEST(ImageCodec, ChannelConversions) {
  const DecodedImage g = decode_png(fixture("gray8.png"));
  ASSERT_EQ(g.channels, 1);
  const DecodedImage g3 = decode_png(fixture("gray8.png"), 3), g4 = decode_png(fixture("gray8.png"), 4);
  ASSERT_EQ(g3.channels, 3);
  ASSERT_EQ(g4.channels, 4);
  for (int64_t p = 0; p < g.height * g.width; ++p) {
    for (int c = 0; c < 3; ++c) {
      ASSERT_EQ(g3.pixels8[p * 3 + c], g.pixels8[p]) << "gray -> RGB replicates, pixel " << p;
      ASSERT_EQ(g4.pixels8[p * 4 + c], g.pixels8[p]) << "gray -> RGBA replicates, pixel " << p;
    }
    ASSERT_EQ(g4.pixels8[p * 4 + 3], 255) << "added alpha is opaque";
  }
  const DecodedImage rgba = decode_png(fixture("rgba8.png")), rgb = decode_png(fixture("rgb8.png"));
  const DecodedImage rgba3 = decode_png(fixture("rgba8.png"), 3), rgb4 = decode_png(fixture("rgb8.png"), 4);
  ASSERT_EQ(rgba.channels, 4);
  EXPECT_EQ(rgba3.pixels8, rgb.pixels8) << "stripping alpha leaves the colour (the fixtures share their RGB)";
  EXPECT_EQ(decode_png(fixture("rgba8.png"), 1).pixels8, decode_png(fixture("rgb8.png"), 1).pixels8);
  for (int64_t p = 0; p < rgb.height * rgb.width; ++p) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(rgb4.pixels8[p * 4 + c], rgb.pixels8[p * 3 + c]);
    ASSERT_EQ(rgb4.pixels8[p * 4 + 3], 255);
  }
  const DecodedImage la = decode_png(fixture("gray_alpha8.png"));
  const DecodedImage la1 = decode_png(fixture("gray_alpha8.png"), 1), la4 = decode_png(fixture("gray_alpha8.png"), 4);
  ASSERT_EQ(la.channels, 2);
  for (int64_t p = 0; p < la.height * la.width; ++p) {
    ASSERT_EQ(la1.pixels8[p], la.pixels8[p * 2]);
    for (int c = 0; c < 3; ++c) ASSERT_EQ(la4.pixels8[p * 4 + c], la.pixels8[p * 2]);
    ASSERT_EQ(la4.pixels8[p * 4 + 3], la.pixels8[p * 2 + 1]);
  }
  const DecodedImage j = decode_jpeg(fixture("gray_q95.jpg")), j3 = decode_jpeg(fixture("gray_q95.jpg"), 3);
  ASSERT_EQ(j.channels, 1);
  ASSERT_EQ(j3.channels, 3);
  for (int64_t p = 0; p < j.height * j.width; ++p) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(j3.pixels8[p * 3 + c], j.pixels8[p]);
  }
  // 16-bit stays 16-bit through conversions; the added alpha is 65535.
  const DecodedImage r16 = decode_png(fixture("rgb16.png")), r16a = decode_png(fixture("rgb16.png"), 4);
  ASSERT_EQ(r16a.bit_depth, 16);
  for (int64_t p = 0; p < r16.height * r16.width; ++p) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(r16a.pixels16[p * 4 + c], r16.pixels16[p * 3 + c]);
    ASSERT_EQ(r16a.pixels16[p * 4 + 3], 65535);
  }
  const DecodedImage r16g = decode_png(fixture("rgb16.png"), 1);
  ASSERT_EQ(r16g.channels, 1);
  for (int64_t p = 0; p < r16.height * r16.width; ++p) {
    const double y = 0.299 * r16.pixels16[p * 3] + 0.587 * r16.pixels16[p * 3 + 1] + 0.114 * r16.pixels16[p * 3 + 2];
    ASSERT_NEAR(r16g.pixels16[p], y, 2.0) << "pixel " << p;
  }
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(ImageCodec, PngRoundTripIsExact) {
  for (int64_t c = 1; c <= 4; ++c) {
    const int64_t h = 13, w = 17;
    const std::vector<uint8_t> px = random_bytes(static_cast<size_t>(h * w * c), static_cast<uint32_t>(c));
    const DecodedImage im = decode_image(encode_png(px.data(), h, w, c));
    EXPECT_EQ(im.height, h);
    EXPECT_EQ(im.width, w);
    EXPECT_EQ(im.channels, c);
    EXPECT_EQ(im.pixels8, px) << c << " channels";
  }
  EXPECT_THROW(encode_png(nullptr, 0, 3, 1), std::invalid_argument);
  EXPECT_THROW(encode_png(nullptr, 3, 3, 5), std::invalid_argument);
}

TEST(ImageCodec, JpegRoundTripAtQuality95IsClose) {
  for (int64_t c : {1, 3}) {
    const int64_t h = 40, w = 48;
    std::vector<uint8_t> px(static_cast<size_t>(h * w * c));
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        for (int64_t ch = 0; ch < c; ++ch) {
          px[static_cast<size_t>((y * w + x) * c + ch)] =
              static_cast<uint8_t>(128 + 100 * std::sin(0.08 * x + 0.05 * y + 0.5 * ch));
        }
      }
    }
    const std::string jpg = encode_jpeg(px.data(), h, w, c, 95);
    const DecodedImage im = decode_image(jpg);
    ASSERT_EQ((std::vector<int64_t>{im.height, im.width, im.channels}), (std::vector<int64_t>{h, w, c}));
    int max_err = 0;
    for (size_t i = 0; i < px.size(); ++i) max_err = std::max(max_err, std::abs(int(im.pixels8[i]) - int(px[i])));
    EXPECT_LE(max_err, 6) << c << " channels";
    EXPECT_GT(encode_jpeg(px.data(), h, w, c, 95).size(), encode_jpeg(px.data(), h, w, c, 30).size());
  }
  EXPECT_THROW(encode_jpeg(nullptr, 4, 4, 2), std::invalid_argument);
  EXPECT_THROW(encode_jpeg(nullptr, 4, 4, 3, 0), std::invalid_argument);
}

void expect_data_error(const std::string& bytes, const std::string& what, const std::vector<std::string>& parts) {
  try {
    decode_image(bytes);
    ADD_FAILURE() << what << " decoded without an error";
  } catch (const DataError& e) {
    for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p)) << what;
  }
}

TEST(ImageCodec, BadFixturesThrowDataError) {
  expect_data_error(fixture("bad/truncated.jpg"), "truncated JPEG", {"not a valid JPEG: ", "Premature end of JPEG file"});
  expect_data_error(fixture("bad/corrupt_scan.jpg"), "corrupt JPEG scan", {"not a valid JPEG: ", "Corrupt JPEG data"});
  expect_data_error(fixture("bad/bad_crc.png"), "PNG with a bad CRC", {"not a valid PNG: ", "CRC error"});
  expect_data_error(fixture("bad/truncated.png"), "truncated PNG", {"not a valid PNG: ", "truncated"});
}

uint32_t crc_of(const std::string& s) { return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size()))); }

void put_be32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

TEST(ImageCodec, AbsurdSizesAreRejectedBeforeAllocating) {
  // A PNG whose IHDR claims 60000 x 60000 16-bit RGBA (28.8 GB), with a valid CRC.
  std::string png = fixture("rgb16.png");
  put_be32(png, 16, 60000);
  put_be32(png, 20, 60000);
  png[25] = 6;  // colour type RGBA
  put_be32(png, 29, crc_of(png.substr(12, 17)));
  expect_data_error(png, "huge PNG", {"PNG image too large: 60000x60000x4"});
  // A JPEG whose SOF claims 65000 x 65000.
  std::string jpg = fixture("rgb_q95_444.jpg");
  const size_t sof = jpg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpg[sof + 5] = jpg[sof + 7] = static_cast<char>(0xFD);
  jpg[sof + 6] = jpg[sof + 8] = static_cast<char>(0xE8);
  expect_data_error(jpg, "huge JPEG", {"JPEG image too large: 65000x65000x3"});
}

// Every strict prefix of a valid file is an error (never a crash, never a gray-filled image).
TEST(ImageCodec, EveryTruncationIsAnError) {
  for (const char* name : {"rgb_q75_420.jpg", "rgb_progressive.jpg", "gray_q75.jpg", "rgb8.png", "rgb8_interlaced.png",
                           "gray16.png", "palette_trns.png"}) {
    const std::string bytes = fixture(name);
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_THROW(decode_image(bytes.substr(0, n)), DataError) << name << " cut to " << n << " of " << bytes.size() << " bytes";
    }
  }
}

// Random byte corruption: decoding either fails with DataError or yields an image of the header's size.
TEST(ImageCodec, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(7);
  int errors = 0, decoded = 0;
  for (const char* name : {"rgb_q75_420.jpg", "rgb_progressive.jpg", "rgb8.png", "palette.png", "gray16.png"}) {
    const std::string good = fixture(name);
    for (int trial = 0; trial < 200; ++trial) {
      std::string bad = good;
      for (int k = 0; k < 1 + trial % 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
      try {
        const DecodedImage im = decode_image(bad);
        EXPECT_EQ(values_of(im).size(), static_cast<size_t>(im.num_values()));
        ++decoded;
      } catch (const DataError&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 100);  // the corruption does reach the decoders' checks
}

TEST(ImageCodec, ConvertImageDtypeDividesOnce) {
  DecodedImage im;
  im.height = 16, im.width = 16, im.channels = 1;
  for (int v = 0; v < 256; ++v) im.pixels8.push_back(static_cast<uint8_t>(v));
  const std::vector<float> f = convert_image_dtype(im).to_vector();
  ASSERT_EQ(convert_image_dtype(im).shape(), (Shape{16, 16, 1}));
  for (int v = 0; v < 256; ++v) {
    const float want = static_cast<float>(v) / 255.0f;  // as the Fashion-MNIST loader computes it
    ASSERT_EQ(std::memcmp(&f[static_cast<size_t>(v)], &want, sizeof want), 0) << v;
  }
  EXPECT_EQ(f[255], 1.0f);
  const DecodedImage g16 = decode_png(fixture("gray16.png"));
  const std::vector<float> f16 = convert_image_dtype(g16).to_vector();
  for (size_t i = 0; i < f16.size(); ++i) ASSERT_EQ(f16[i], static_cast<float>(g16.pixels16[i]) / 65535.0f);
  im.pixels8.pop_back();
  EXPECT_THROW(convert_image_dtype(im), std::invalid_argument);
}

TEST(ImageCodec, MaxPixelsRefusesLargerImagesFromTheHeader) {
  std::vector<uint8_t> pixels(40 * 25 * 3, 128);
  for (const std::string& bytes : {encode_png(pixels.data(), 40, 25, 3), encode_jpeg(pixels.data(), 40, 25, 3)}) {
    EXPECT_EQ(decode_image(bytes, 0, 1000).height, 40);  // exactly 1000 pixels: allowed
    try {
      decode_image(bytes, 0, 999);
      FAIL() << "a 40x25 image passed max_pixels = 999";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("40x25 pixels is larger than the 999"));
    }
  }
}

}  // namespace
}  // namespace keel
