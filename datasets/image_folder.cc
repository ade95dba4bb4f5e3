#include "datasets/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "framework/data/data_error.h"
#include "datasets/image_codec.h"
#include "framework/device/context.h"

namespace keel {

bool is_image_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

namespace {

namespace fs = std::filesystem;

int color_mode_channels(const std::string& mode) {
  if (mode == "grayscale") return 1;
  if (mode == "rgb") return 3;
  if (mode == "rgba") return 4;
  throw std::invalid_argument("image_dataset_from_directory: color_mode must be \"grayscale\", \"rgb\" or \"rgba\", got \"" +
                              mode + "\"");
}

// Pixels as float32 values 0..255 (16-bit images scaled by 255/65535), (H, W, C).
Tensor pixels_0_255(const DecodedImage& image) {
  HostScope host;
  Tensor t = Tensor::empty({image.height, image.width, image.channels});
  float* out = t.data();
  const int64_t n = t.size();
  if (image.bit_depth == 8) {
    const uint8_t* in = image.pixels8.data();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
  } else {
    const uint16_t* in = image.pixels16.data();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]) * (255.0f / 65535.0f);
  }
  return t;
}

// {path, label} per file of `index`, reshuffled every iteration when options.shuffle.
Dataset files_of(std::shared_ptr<const ImageFolderIndex> index, const ImageFolderOptions& options) {
  const int64_t n = static_cast<int64_t>(index->paths.size());
  Dataset files = Dataset::from_generator([index](uint64_t) -> Generator {
    return [index, i = size_t{0}]() mutable -> std::optional<Element> {
      if (i >= index->paths.size()) return std::nullopt;
      HostScope host;
      Element e{Tensor::from_string(index->paths[i]), Tensor::scalar(static_cast<float>(index->labels[i]))};
      ++i;
      return e;
    };
  });
  return options.shuffle ? files.shuffle(n, options.seed) : files;
}

}  // namespace

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw DataError(path + ": cannot open the image file");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw DataError(path + ": read error");
  return bytes;
}

ImageFolderIndex index_image_folder(const std::string& directory, const std::vector<std::string>& class_names) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) {
    throw DataError("image folder " + directory + " does not exist or is not a directory");
  }
  ImageFolderIndex index;
  if (class_names.empty()) {
    for (const auto& entry : fs::directory_iterator(directory)) {
      if (entry.is_directory()) index.class_names.push_back(entry.path().filename().string());
    }
    std::sort(index.class_names.begin(), index.class_names.end());
    if (index.class_names.empty()) {
      throw DataError("image folder " + directory +
                      " has no class sub-folders; put each class's images in a folder named after the class");
    }
  } else {
    index.class_names = class_names;
  }
  for (size_t label = 0; label < index.class_names.size(); ++label) {
    const fs::path class_dir = fs::path(directory) / index.class_names[label];
    if (!fs::is_directory(class_dir, ec)) {
      throw DataError("image folder " + directory + " has no folder for class '" + index.class_names[label] + "'");
    }
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(class_dir)) {
      if (entry.is_regular_file() && is_image_file(entry.path().string())) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    for (std::string& f : files) {
      index.paths.push_back(std::move(f));
      index.labels.push_back(static_cast<int64_t>(label));
    }
  }
  if (index.paths.empty()) {
    throw DataError("image folder " + directory + " holds no .jpg, .jpeg or .png files in its class folders");
  }
  return index;
}

Dataset image_files_from_directory(const std::string& directory, const ImageFolderOptions& options) {
  return files_of(std::make_shared<const ImageFolderIndex>(index_image_folder(directory, options.class_names)),
                  options);
}

Dataset image_dataset_from_directory(const std::string& directory, const ImageDatasetOptions& options) {
  if (options.label_mode != "int" && options.label_mode != "categorical") {
    throw std::invalid_argument("image_dataset_from_directory: label_mode must be \"int\" or \"categorical\", got \"" +
                                options.label_mode + "\"");
  }
  if (options.batch_size < 0) throw std::invalid_argument("image_dataset_from_directory: batch_size must be >= 0");
  // Named copies, not a structured binding: clang < 16 cannot capture bindings in the lambda below.
  const int64_t height = options.image_size.first;
  const int64_t width = options.image_size.second;
  if (height < 1 || width < 1) throw std::invalid_argument("image_dataset_from_directory: image_size must be positive");
  const int channels = color_mode_channels(options.color_mode);
  auto index = std::make_shared<const ImageFolderIndex>(index_image_folder(directory, options.class_names));
  const int64_t classes = static_cast<int64_t>(index->class_names.size());
  const bool one_hot = options.label_mode == "categorical";
  const ResizeMethod method = options.interpolation;
  Dataset images = files_of(index, ImageFolderOptions{options.class_names, options.shuffle, options.seed})
                       .map(
                           [=](const Element& e) {
                             const std::string& path = e[0].string_value();
                             const std::string bytes = read_file_bytes(path);  // its errors name the path
                             DecodedImage image;
                             try {
                               image = decode_image(bytes, channels);
                             } catch (const DataError& error) {
                               throw DataError(path + ": " + error.what());
                             }
                             HostScope host;
                             Tensor x = resize(pixels_0_255(image), height, width, method);
                             Tensor y;
                             if (one_hot) {
                               y = Tensor::zeros({classes});
                               y.data()[static_cast<int64_t>(e[1].item())] = 1.0f;
                             } else {
                               y = e[1];
                             }
                             return Element{x, y};
                           },
                           AUTOTUNE);
  return options.batch_size > 0 ? images.batch(options.batch_size) : images;
}

}  // namespace keel
