#include "datasets/image_codec.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "framework/data/data_error.h"
#include "framework/device/context.h"

// Error handling with libjpeg and libpng: both report errors through a callback that must not return.
// The callbacks here record the library's message and longjmp back to the decode function's setjmp,
// which then throws. longjmp only crosses C frames (the libraries' and the callbacks below, none of
// which own C++ objects), and every C++ object of a function that calls setjmp is constructed before
// the setjmp, so no destructor is skipped.

namespace keel {
namespace {

constexpr std::string_view kPngSignature = "\x89PNG\r\n\x1a\n";

void check_decode_channels(const char* what, int channels, bool allow4) {
  if (channels == 0 || channels == 1 || channels == 3 || (allow4 && channels == 4)) return;
  throw std::invalid_argument(std::string(what) + ": channels must be 0, 1, 3" + (allow4 ? " or 4" : "") +
                              ", got " + std::to_string(channels));
}

void check_size(const char* kind, int64_t height, int64_t width, int64_t channels, int64_t bytes_per_value,
                int64_t max_pixels) {
  // Each factor is < 2^32 (formats store 32-bit sizes), so dividing keeps the product from overflowing.
  if (height <= 0 || width <= 0) {
    throw DataError(std::string("not a valid ") + kind + ": image size " + std::to_string(height) + "x" +
                    std::to_string(width));
  }
  if (max_pixels > 0 && width > max_pixels / height) {
    throw DataError(std::string(kind) + " image of " + std::to_string(height) + "x" + std::to_string(width) +
                    " pixels is larger than the " + std::to_string(max_pixels) +
                    " pixels this pipeline decodes; resize the file (or the file is corrupt)");
  }
  const int64_t per_row = width * channels * bytes_per_value;
  if (per_row > kMaxDecodedImageBytes || height > kMaxDecodedImageBytes / per_row) {
    throw DataError(std::string(kind) + " image too large: " + std::to_string(height) + "x" + std::to_string(width) +
                    "x" + std::to_string(channels) + " would need more than " +
                    std::to_string(kMaxDecodedImageBytes >> 20) + " MiB decoded; is the file corrupt?");
  }
}

// ---- JPEG -------------------------------------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings that mean the pixels are wrong (missing or garbage data) are errors here: libjpeg would
// return a gray-filled or smeared image. Other warnings (e.g. extraneous bytes before a marker, which
// many cameras write) leave the pixels intact and are ignored, as Pillow and TF ignore them.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:       // premature end of file
    case JWRN_HIT_MARKER:     // premature end of a data segment
    case JWRN_MUST_RESYNC:    // corrupt data, resynchronising
    case JWRN_HUFF_BAD_CODE:  // bad Huffman code
      jpeg_fail(cinfo);
    default:
      ++cinfo->err->num_warnings;
  }
}

struct JpegDecompressGuard {
  jpeg_decompress_struct* cinfo;
  ~JpegDecompressGuard() { jpeg_destroy_decompress(cinfo); }
};

struct JpegCompressGuard {
  jpeg_compress_struct* cinfo;
  unsigned char* buffer = nullptr;  // jpeg_mem_dest's, malloc'd by libjpeg
  ~JpegCompressGuard() {
    jpeg_destroy_compress(cinfo);
    std::free(buffer);
  }
};

// ---- PNG --------------------------------------------------------------------------------------------

struct PngIo {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  std::string* out = nullptr;  // encoding
  char message[256] = {};
};

[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}  // benign (e.g. known-incorrect sRGB profile)

void png_read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) png_error(png, "truncated data (the file ends early)");
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

void png_write_bytes(png_structp png, png_bytep in, size_t n) {
  static_cast<PngIo*>(png_get_io_ptr(png))->out->append(reinterpret_cast<const char*>(in), n);
}

void png_flush(png_structp) {}

struct PngReadGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReadGuard() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

struct PngWriteGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriteGuard() { png_destroy_write_struct(&png, info ? &info : nullptr); }
};

// What a PNG of `color_type` decodes to: `want` channels, the requested count or (channels = 0)
// the stored colour plus alpha.
struct PngTarget {
  bool palette = false;
  bool src_color = false;
  bool src_alpha = false;
  int want = 0;
  bool want_alpha = false;
  bool want_color = false;
};

PngTarget png_target(int color_type, bool trns, int channels) {
  PngTarget t;
  t.palette = color_type == PNG_COLOR_TYPE_PALETTE;
  t.src_color = (color_type & PNG_COLOR_MASK_COLOR) != 0;
  // Alpha as stored; palette_to_rgb also turns a palette's tRNS into alpha.
  t.src_alpha = (color_type & PNG_COLOR_MASK_ALPHA) != 0 || (t.palette && trns);
  t.want = channels != 0 ? channels : (t.src_color ? 3 : 1) + (t.src_alpha ? 1 : 0);
  t.want_alpha = t.want == 2 || t.want == 4;
  t.want_color = t.want >= 3;
  return t;
}

// Sizes out.pixels8 or out.pixels16 (by out.bit_depth) for the whole image; returns its first byte.
uint8_t* allocate_pixels(DecodedImage& out) {
  if (out.bit_depth == 16) {
    out.pixels16.resize(static_cast<size_t>(out.num_values()));
    return reinterpret_cast<uint8_t*>(out.pixels16.data());
  }
  out.pixels8.resize(static_cast<size_t>(out.num_values()));
  return out.pixels8.data();
}

bool host_is_little_endian() {
  const uint16_t one = 1;
  uint8_t first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

}  // namespace

DecodedImage decode_jpeg(std::string_view bytes, int channels, int64_t max_pixels) {
  check_decode_channels("decode_jpeg", channels, /*allow4=*/false);
  DecodedImage out;
  jpeg_decompress_struct cinfo{};
  JpegErrorManager err{};
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_fail;
  err.pub.emit_message = jpeg_message;
  JpegDecompressGuard guard{&cinfo};  // jpeg_destroy_decompress is a no-op on the zeroed struct
  if (setjmp(err.jump)) throw DataError(std::string("not a valid JPEG: ") + err.message);

  jpeg_create_decompress(&cinfo);
  // Progressive JPEGs buffer every coefficient; beyond this libjpeg fails cleanly (no backing store).
  cinfo.mem->max_memory_to_use = static_cast<long>(2 * kMaxDecodedImageBytes);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.num_components != 1 && cinfo.num_components != 3) {
    throw DataError("unsupported JPEG: " + std::to_string(cinfo.num_components) +
                    " colour components (CMYK/YCCK?); only grayscale and colour JPEGs are supported");
  }
  const bool gray = channels == 1 || (channels == 0 && cinfo.jpeg_color_space == JCS_GRAYSCALE);
  cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.do_block_smoothing = TRUE;  // libjpeg's default (progressive JPEGs only), as Pillow leaves it
  jpeg_calc_output_dimensions(&cinfo);
  out.height = cinfo.output_height;
  out.width = cinfo.output_width;
  out.channels = cinfo.output_components;
  check_size("JPEG", out.height, out.width, out.channels, 1, max_pixels);
  jpeg_start_decompress(&cinfo);
  const size_t stride = static_cast<size_t>(out.width * out.channels);
  const size_t total = static_cast<size_t>(out.num_values());
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rows[16];
    const JDIMENSION n = std::min<JDIMENSION>(static_cast<JDIMENSION>(std::min(cinfo.rec_outbuf_height, 16)),
                                              cinfo.output_height - cinfo.output_scanline);
    // The buffer grows (doubling) as scanlines arrive rather than being sized from the header: a tiny
    // file that declares a huge image fails on its missing data before the memory is touched.
    const size_t needed = (cinfo.output_scanline + n) * stride;
    if (needed > out.pixels8.size()) out.pixels8.resize(std::min(total, std::max(needed, 2 * out.pixels8.size())));
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = out.pixels8.data() + (cinfo.output_scanline + i) * stride;
    if (jpeg_read_scanlines(&cinfo, rows, n) == 0) {
      std::strcpy(err.message, "no scanlines returned (suspended source)");
      std::longjmp(err.jump, 1);
    }
  }
  jpeg_finish_decompress(&cinfo);  // reads to EOI: a file truncated after the last scanline also fails
  return out;
}

DecodedImage decode_png(std::string_view bytes, int channels, int64_t max_pixels) {
  check_decode_channels("decode_png", channels, /*allow4=*/true);
  DecodedImage out;
  PngIo io;
  io.data = reinterpret_cast<const uint8_t*>(bytes.data());
  io.size = bytes.size();
  PngReadGuard guard;
  std::vector<png_bytep> rows;
  guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_fail, png_warn);
  if (guard.png == nullptr) throw std::bad_alloc();
  guard.info = png_create_info_struct(guard.png);
  if (guard.info == nullptr) throw std::bad_alloc();
  png_structp png = guard.png;
  png_infop info = guard.info;
  if (setjmp(png_jmpbuf(png))) throw DataError(std::string("not a valid PNG: ") + io.message);

  png_set_read_fn(png, &io, png_read_bytes);
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  png_get_IHDR(png, info, &width, &height, &bit_depth, &color_type, &interlace, nullptr, nullptr);
  const bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  const PngTarget t = png_target(color_type, trns, channels);

  if (t.palette) png_set_palette_to_rgb(png);
  if (!t.src_color && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  bool alpha = t.src_alpha;
  if (t.want_alpha && !alpha && trns) {
    png_set_tRNS_to_alpha(png);
    alpha = true;
  }
  if (t.want_color && !t.src_color) png_set_gray_to_rgb(png);
  if (!t.want_color && t.src_color) png_set_rgb_to_gray(png, 1, 0.299, 0.587);  // TF's weights; no error
  if (alpha && !t.want_alpha) png_set_strip_alpha(png);
  if (!alpha && t.want_alpha) png_set_add_alpha(png, 0xffff, PNG_FILLER_AFTER);
  const int depth = bit_depth == 16 ? 16 : 8;
  if (depth == 16 && host_is_little_endian()) png_set_swap(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);

  out.height = height;
  out.width = width;
  out.channels = t.want;
  out.bit_depth = depth;
  check_size("PNG", out.height, out.width, out.channels, depth / 8, max_pixels);
  const size_t stride = static_cast<size_t>(out.width * out.channels * (depth / 8));
  if (png_get_channels(png, info) != t.want || png_get_rowbytes(png, info) != stride) {
    png_error(png, "unexpected row layout after conversion");  // a bug here, not in the file
  }
  uint8_t* base = allocate_pixels(out);
  rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = base + y * stride;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);  // checks the last chunks' CRCs and that the file is complete
  return out;
}

DecodedImage decode_image(std::string_view bytes, int channels, int64_t max_pixels) {
  if (bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF && static_cast<uint8_t>(bytes[1]) == 0xD8 &&
      static_cast<uint8_t>(bytes[2]) == 0xFF) {
    return decode_jpeg(bytes, channels, max_pixels);
  }
  if (bytes.substr(0, kPngSignature.size()) == kPngSignature) return decode_png(bytes, channels, max_pixels);
  throw DataError("unknown image format (expected JPEG or PNG)");
}

std::string encode_png(const uint8_t* hwc, int64_t height, int64_t width, int64_t channels) {
  if (height <= 0 || width <= 0 || height > 0x7fffffff || width > 0x7fffffff || channels < 1 || channels > 4) {
    throw std::invalid_argument("encode_png: bad image size " + std::to_string(height) + "x" + std::to_string(width) +
                                "x" + std::to_string(channels));
  }
  static constexpr int kColorType[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                       PNG_COLOR_TYPE_RGB_ALPHA};
  std::string out;
  PngIo io;
  io.out = &out;
  PngWriteGuard guard;
  std::vector<png_bytep> rows;
  guard.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, png_fail, png_warn);
  if (guard.png == nullptr) throw std::bad_alloc();
  guard.info = png_create_info_struct(guard.png);
  if (guard.info == nullptr) throw std::bad_alloc();
  png_structp png = guard.png;
  png_infop info = guard.info;
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error(std::string("encode_png: ") + io.message);
  png_set_write_fn(png, &io, png_write_bytes, png_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               kColorType[channels - 1], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  rows.resize(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[static_cast<size_t>(y)] = const_cast<png_bytep>(hwc + y * width * channels);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  return out;
}

std::string encode_jpeg(const uint8_t* hwc, int64_t height, int64_t width, int64_t channels, int quality) {
  if (height <= 0 || width <= 0 || height > JPEG_MAX_DIMENSION || width > JPEG_MAX_DIMENSION ||
      (channels != 1 && channels != 3)) {
    throw std::invalid_argument("encode_jpeg: bad image size " + std::to_string(height) + "x" + std::to_string(width) +
                                "x" + std::to_string(channels) + " (at most 65500 per side, 1 or 3 channels)");
  }
  if (quality < 1 || quality > 100) throw std::invalid_argument("encode_jpeg: quality must be in 1..100");
  jpeg_compress_struct cinfo{};
  JpegErrorManager err{};
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_fail;
  JpegCompressGuard guard{&cinfo};
  unsigned long size = 0;
  if (setjmp(err.jump)) throw std::runtime_error(std::string("encode_jpeg: ") + err.message);
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &guard.buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = static_cast<int>(channels);
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(hwc + static_cast<int64_t>(cinfo.next_scanline) * width * channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  return std::string(reinterpret_cast<const char*>(guard.buffer), size);
}

Tensor convert_image_dtype(const DecodedImage& image) {
  HostScope host;
  Tensor out = Tensor::empty({image.height, image.width, image.channels});
  float* dst = out.data();
  const size_t n = static_cast<size_t>(image.num_values());
  if (image.bit_depth == 16) {
    if (image.pixels16.size() != n) throw std::invalid_argument("convert_image_dtype: pixels16 does not match the shape");
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(image.pixels16[i]) / 65535.0f;
  } else {
    if (image.pixels8.size() != n) throw std::invalid_argument("convert_image_dtype: pixels8 does not match the shape");
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(image.pixels8[i]) / 255.0f;
  }
  return out;
}

}  // namespace keel
