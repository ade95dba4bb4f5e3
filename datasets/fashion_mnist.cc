#include "datasets/fashion_mnist.h"

#include <filesystem>
#include <stdexcept>
#include <utility>

#include "framework/data/data_error.h"
#include "datasets/idx.h"
#include "framework/device/context.h"

namespace keel {
namespace {

constexpr int64_t kImageSide = 28;
constexpr int kNumClasses = 10;

void require_exists(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return;
  throw DataError("Fashion-MNIST not found: " + path +
                  " does not exist. Install it with 'apt-get install dataset-fashion-mnist' or point "
                  "--data-dir at a directory holding the four *-ubyte.gz files.");
}

}  // namespace

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

RawFashionMnist load_fashion_mnist_raw(const std::string& split, const std::string& data_dir) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    throw std::invalid_argument("load_fashion_mnist: unknown split '" + split +
                                "'; use \"train\" or \"test\"");
  }
  const std::filesystem::path dir(data_dir);
  const std::string images_path = (dir / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (dir / (prefix + "-labels-idx1-ubyte.gz")).string();
  require_exists(images_path);
  require_exists(labels_path);

  IdxArray images = read_idx(images_path);
  if (images.dims.size() != 3 || images.dims[1] != kImageSide || images.dims[2] != kImageSide) {
    throw DataError(images_path + ": expected images of shape (N, 28, 28) but the file holds " +
                    shape_string(images.dims) + "; is this a Fashion-MNIST images file?");
  }
  IdxArray labels = read_idx(labels_path);
  if (labels.dims.size() != 1) {
    throw DataError(labels_path + ": expected labels of shape (N,) but the file holds " +
                    shape_string(labels.dims) + "; is this a Fashion-MNIST labels file?");
  }
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n) {
    throw DataError(labels_path + " holds " + std::to_string(labels.dims[0]) + " labels but " + images_path +
                    " holds " + std::to_string(n) + " images; the two files must come from the same split");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (labels.data[static_cast<size_t>(i)] >= kNumClasses) {
      throw DataError(labels_path + ": label " + std::to_string(labels.data[static_cast<size_t>(i)]) +
                      " at index " + std::to_string(i) +
                      " is outside 0..9; the file is corrupt — download it again");
    }
  }

  return RawFashionMnist{n, std::move(images.data), std::move(labels.data)};
}

LabeledImages load_fashion_mnist(const std::string& split, const std::string& data_dir) {
  const RawFashionMnist raw = load_fashion_mnist_raw(split, data_dir);
  const int64_t n = raw.n;
  HostScope host;
  LabeledImages out{Tensor::empty({n, kImageSide, kImageSide}), Tensor::empty({n})};
  // Plain loops over contiguous arrays: the compiler vectorises the byte -> float conversion.
  float* img = out.images.data();
  const uint8_t* px = raw.images.data();
  const size_t pixels = raw.images.size();
  for (size_t i = 0; i < pixels; ++i) img[i] = static_cast<float>(px[i]) / 255.0f;
  float* lab = out.labels.data();
  const uint8_t* cls = raw.labels.data();
  for (int64_t i = 0; i < n; ++i) lab[i] = static_cast<float>(cls[i]);
  return out;
}

}  // namespace keel
