// keras.utils.image_dataset_from_directory: a folder with one sub-folder per class of image files.
//
//   directory/
//     cats/  a.jpg b.png ...        class names are the sub-folder names, sorted; labels are their
//     dogs/  c.jpg ...              indices (labels="inferred"), files sorted within each folder
//
//   Dataset ds = image_dataset_from_directory("photos", {.image_size = {180, 180}, .batch_size = 32, .seed = 7});
//   // elements: {images (32, 180, 180, 3) float32 in [0, 255], labels (32,)}
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/data/dataset.h"
#include "datasets/image_ops.h"

namespace keel {

struct ImageFolderIndex {
  std::vector<std::string> paths;    // sorted by class, then by path within the class folder
  std::vector<int64_t> labels;       // index into class_names
  std::vector<std::string> class_names;
};

// A file image_dataset_from_directory lists: .jpg, .jpeg or .png, in any case.
bool is_image_file(const std::string& path);

// Lists the image files (.jpg .jpeg .png, any case; sub-folders of a class folder included) under
// each class folder. `class_names` empty: every sub-folder, sorted; otherwise exactly these folders,
// in this order (as Keras's class_names=). Throws DataError naming the directory when it does not
// exist, has no class folders, a named class folder is missing, or no image file is found.
ImageFolderIndex index_image_folder(const std::string& directory, const std::vector<std::string>& class_names = {});

// The bytes of a file (an image to decode); DataError naming it if it cannot be read.
std::string read_file_bytes(const std::string& path);

struct ImageFolderOptions {
  std::vector<std::string> class_names;  // empty: inferred
  bool shuffle = true;                   // reshuffle the files every iteration (epoch)
  uint64_t seed = 0;
};

// Unbatched {path (string), label ()} elements, one per file; with shuffle, a uniform permutation of
// all files per iteration, from (seed, iteration) — Keras shuffles the file list once and then
// through a buffer of 8 batches; a full per-epoch permutation is what that approximates.
Dataset image_files_from_directory(const std::string& directory, const ImageFolderOptions& options = {});

struct ImageDatasetOptions {
  std::string label_mode = "int";     // "int": class index (); "categorical": one-hot (classes,)
  std::vector<std::string> class_names;
  std::string color_mode = "rgb";     // "grayscale" (1), "rgb" (3), "rgba" (4) channels
  int64_t batch_size = 32;            // 0: unbatched elements (Keras's batch_size=None)
  std::pair<int64_t, int64_t> image_size{256, 256};  // (height, width): every image is resized to it
  bool shuffle = true;
  uint64_t seed = 0;
  ResizeMethod interpolation = ResizeMethod::kBilinear;
};

// {image (H, W, C) float32 in [0, 255] (not rescaled, as Keras), label} elements, batched unless
// batch_size == 0; the last batch may be smaller. Decoding runs in a parallel map (AUTOTUNE). A file
// that is not a valid JPEG/PNG throws DataError naming it when the iterator reaches it.
Dataset image_dataset_from_directory(const std::string& directory, const ImageDatasetOptions& options = {});

}  // namespace keel
