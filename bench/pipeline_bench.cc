// keel's side of the image input-pipeline benchmark (bench/run_pipeline_bench.sh runs it beside Pillow
// and torchvision, bench/torch_pipeline_bench.py).
//
//   build/bench/pipeline_bench images   --dir DIR/train --size 224 --channels 3 [--images 10000] [--warmup 640]
//   build/bench/pipeline_bench tfrecord --dir DIR       --size 224 --channels 3 [--images 10000] [--warmup 640]
//   build/bench/pipeline_bench fused    --dir DIR/train --size 224 --channels 3 [--images 10000] [--warmup 640]
//   build/bench/pipeline_bench stages   --dir DIR/train --size 224 --channels 3 [--images 2000] [--tfrecord TDIR]
//
// images:   the image_dataset_from_directory-like pipeline, as `keel train --dataset images:DIR` builds it:
//           files (sorted, repeated) -> map(read + decode_image(channels) + convert_image_dtype + resize
//           bilinear, AUTOTUNE) -> batch(64) -> prefetch(AUTOTUNE).
// tfrecord: TFRecord shards DIR/train-*.tfrecord, as `--dataset tfrecord:DIR` builds them:
//           list_files (sorted, repeated) -> interleave(TFRecordDataset, cycle 4, AUTOTUNE) ->
//           map(parse_single_example + decode + convert + resize, AUTOTUNE) -> batch(64) -> prefetch.
// fused:    a bench-only prototype of map-and-batch fusion (see fused_pipeline) on the image folder.
// All three pull --warmup images untimed (threads started, page cache and allocator warm), then time the
// next --images (a multiple of the batch) and print one JSON line with images_per_sec.
//
// stages:   where the time goes, on one thread: the microseconds per image of each stage of the map
//           function (file read, TFRecord read + parse, decode, convert, resize), of batch(64) on
//           ready-made images, and of the same map function run through the Dataset machinery
//           sequentially (map, no threads) and in parallel, so thread hand-offs show up as the
//           difference. Prints one JSON line.
#include <glob.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "framework/data/dataset.h"
#include "datasets/example.h"
#include "datasets/image_codec.h"
#include "datasets/image_folder.h"
#include "datasets/image_ops.h"
#include "datasets/tfrecord_dataset.h"
#include "framework/device/context.h"

namespace {

using Clock = std::chrono::steady_clock;
using keel::Dataset;
using keel::Element;
using keel::Tensor;

struct Args {
  std::string mode;
  std::string dir;
  std::string tfrecord_dir;  // stages: also time the TFRecord read + parse
  int64_t size = 224;
  int channels = 3;
  int64_t images = 10000;
  int64_t warmup = 640;
  int64_t batch = 64;
  int64_t parallel = keel::AUTOTUNE;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "pipeline_bench: %s\nusage: pipeline_bench images|tfrecord|fused|stages --dir DIR [--size 224] [--channels 3] "
               "[--images 10000] [--warmup 640] [--batch 64] [--parallel N|-1] [--tfrecord DIR]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  if (argc < 2) usage("missing mode");
  Args a;
  a.mode = argv[1];
  if (a.mode != "images" && a.mode != "tfrecord" && a.mode != "fused" && a.mode != "stages") usage("unknown mode '" + a.mode + "'");
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) usage(std::string("missing value for ") + argv[i]);
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--dir") a.dir = v;
    else if (k == "--tfrecord") a.tfrecord_dir = v;
    else if (k == "--size") a.size = std::atoll(v);
    else if (k == "--channels") a.channels = std::atoi(v);
    else if (k == "--images") a.images = std::atoll(v);
    else if (k == "--warmup") a.warmup = std::atoll(v);
    else if (k == "--batch") a.batch = std::atoll(v);
    else if (k == "--parallel") a.parallel = std::atoll(v);
    else usage("unknown option " + k);
  }
  if (a.dir.empty()) usage("--dir is required");
  if (a.size < 1 || (a.channels != 1 && a.channels != 3) || a.images < a.batch || a.batch < 1 || a.warmup < 0) {
    usage("--size >= 1, --channels 1 or 3, --images >= --batch >= 1, --warmup >= 0");
  }
  a.images -= a.images % a.batch;
  return a;
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The map function's image part: encoded bytes -> (size, size, channels) float32 in [0, 1].
Tensor image_tensor(const std::string& bytes, const Args& a) {
  keel::HostScope host;
  Tensor x = keel::convert_image_dtype(keel::decode_image(bytes, a.channels));
  if (x.dim(0) != a.size || x.dim(1) != a.size) x = keel::resize(x, a.size, a.size, keel::ResizeMethod::kBilinear);
  return x;
}

keel::FeatureSpec example_spec() {
  keel::FeatureSpec spec;
  spec["image"] = keel::FixedLenFeature{{}, keel::FeatureType::kString};
  spec["label"] = keel::FixedLenFeature{{}, keel::FeatureType::kInt64};
  return spec;
}

Element decode_example(const std::string& record, const keel::FeatureSpec& spec, const Args& a) {
  std::map<std::string, Tensor> features = keel::parse_single_example(record, spec);
  return Element{image_tensor(features.at("image").string_value(), a), features.at("label")};
}

std::string tfrecord_pattern(const std::string& dir) { return dir + "/train-*.tfrecord"; }

// {record} elements of the train shards, forever.
Dataset tfrecord_records(const std::string& dir) {
  const std::string pattern = tfrecord_pattern(dir);
  const auto files = static_cast<int64_t>(glob_files(pattern).size());
  if (files == 0) usage("no " + pattern + " (make them with `keel data export --format tfrecord`)");
  return Dataset::list_files(pattern, /*shuffle=*/false)
      .repeat()
      .interleave([](const Element& f) { return keel::TFRecordDataset({f[0].string_value()}); },
                  /*cycle_length=*/std::min<int64_t>(files, 4), /*block_length=*/1, keel::AUTOTUNE);
}

Dataset images_pipeline(const Args& a) {
  keel::ImageFolderOptions folder;
  folder.shuffle = false;
  return keel::image_files_from_directory(a.dir, folder)
      .repeat()
      .map([a](const Element& e) { return Element{image_tensor(read_file(e[0].string_value()), a), e[1]}; },
           a.parallel)
      .batch(a.batch, /*drop_remainder=*/true)
      .prefetch(keel::AUTOTUNE);
}

Dataset tfrecord_pipeline(const Args& a) {
  const keel::FeatureSpec spec = example_spec();
  return tfrecord_records(a.dir)
      .map([a, spec](const Element& e) { return decode_example(e[0].string_value(), spec, a); }, a.parallel)
      .batch(a.batch, /*drop_remainder=*/true)
      .prefetch(keel::AUTOTUNE);
}

// A prototype of map-and-batch fusion (tf.data's MapAndBatch), written against the public API to
// measure what it would gain: each element carries the paths of one whole batch (joined by '\n'), and
// one map call decodes and resizes its 64 images straight into the batch tensor. Per batch there is
// one thread hand-off instead of 64, and the copy into the batch runs on the map threads instead of
// serially on batch()'s.
Dataset fused_pipeline(const Args& a) {
  auto index = std::make_shared<const keel::ImageFolderIndex>(keel::index_image_folder(a.dir));
  const int64_t batch = a.batch;
  Dataset batches_of_paths = Dataset::from_generator([index, batch](uint64_t) {
    auto next = std::make_shared<size_t>(0);
    return keel::Generator([index, batch, next]() -> std::optional<Element> {
      keel::HostScope host;
      std::string joined;
      Tensor labels = Tensor::empty({batch});
      for (int64_t i = 0; i < batch; ++i, *next = (*next + 1) % index->paths.size()) {
        if (i > 0) joined += '\n';
        joined += index->paths[*next];
        labels.data()[i] = static_cast<float>(index->labels[*next]);
      }
      return Element{Tensor::from_string(std::move(joined)), labels};
    });
  });
  return batches_of_paths
      .map(
          [a](const Element& e) {
            const std::string& joined = e[0].string_value();
            const int64_t per_image = a.size * a.size * a.channels;
            Tensor images = Tensor::empty({a.batch, a.size, a.size, a.channels});
            size_t start = 0;
            for (int64_t i = 0; i < a.batch; ++i) {
              const size_t end = std::min(joined.find('\n', start), joined.size());
              const Tensor x = image_tensor(read_file(joined.substr(start, end - start)), a);
              std::memcpy(images.data() + i * per_image, x.data(), sizeof(float) * static_cast<size_t>(per_image));
              start = end + 1;
            }
            return Element{images, e[1]};
          },
          a.parallel)
      .prefetch(keel::AUTOTUNE);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Pulls warmup images untimed, then times `images` more; images/s.
double throughput(const Dataset& ds, const Args& a) {
  keel::Iterator it = ds.make_iterator(0);
  const int64_t warm_batches = (a.warmup + a.batch - 1) / a.batch;
  for (int64_t b = 0; b < warm_batches; ++b) {
    if (!it.next()) usage("the dataset ended during the warm-up");
  }
  const int64_t batches = a.images / a.batch;
  const auto t0 = Clock::now();
  double checksum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::optional<Element> e = it.next();
    if (!e) usage("the dataset ended early");
    checksum += (*e)[0].data()[0];  // touch the batch, as a consumer would
  }
  const double s = seconds_since(t0);
  if (checksum < 0) std::fprintf(stderr, "impossible\n");
  return static_cast<double>(batches * a.batch) / s;
}

void run_throughput(const Args& a) {
  const Dataset ds = a.mode == "images" ? images_pipeline(a) : a.mode == "fused" ? fused_pipeline(a) : tfrecord_pipeline(a);
  const double ips = throughput(ds, a);
  std::printf(
      "{\"bench\": \"keel_%s\", \"size\": %lld, \"channels\": %d, \"batch\": %lld, \"images\": %lld, "
      "\"parallel\": %lld, \"threads\": %u, \"images_per_sec\": %.1f}\n",
      a.mode.c_str(), static_cast<long long>(a.size), a.channels, static_cast<long long>(a.batch),
      static_cast<long long>(a.images), static_cast<long long>(a.parallel), std::thread::hardware_concurrency(), ips);
}

// Microseconds per call of fn over `items`, one thread; fn(i) handles item i.
template <class Fn>
double us_per(int64_t items, Fn fn) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < items; ++i) fn(i);
  return 1e6 * seconds_since(t0) / static_cast<double>(items);
}

void run_stages(const Args& a) {
  keel::HostScope host;
  const keel::ImageFolderIndex index = keel::index_image_folder(a.dir);
  const int64_t n = std::min<int64_t>(a.images, static_cast<int64_t>(index.paths.size()));
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) bytes[i] = read_file(index.paths[i]);  // page cache warm-up
  std::vector<keel::DecodedImage> decoded(static_cast<size_t>(n));
  std::vector<Tensor> converted(static_cast<size_t>(n));
  // Only the last batch of resized images is kept, so that memory is reused as in a running pipeline
  // (keeping all would time first-touch page faults of fresh memory instead).
  std::vector<Tensor> resized(static_cast<size_t>(std::min<int64_t>(n, a.batch)));
  size_t sink = 0;

  const double read_us = us_per(n, [&](int64_t i) { sink += read_file(index.paths[i]).size(); });
  const double decode_us = us_per(n, [&](int64_t i) { decoded[i] = keel::decode_image(bytes[i], a.channels); });
  const double decode_gray_us = us_per(n, [&](int64_t i) { sink += keel::decode_image(bytes[i], 1).pixels8.size(); });
  const double convert_us = us_per(n, [&](int64_t i) { converted[i] = keel::convert_image_dtype(decoded[i]); });
  const double resize_us = us_per(n, [&](int64_t i) {
    resized[static_cast<size_t>(i % a.batch)] = keel::resize(converted[i], a.size, a.size, keel::ResizeMethod::kBilinear);
  });
  // The cheaper order for gray sources: resize one channel, then repeat it (keel::adapt_images).
  keel::Shape target{a.size, a.size, a.channels};
  std::vector<Tensor> gray(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) gray[i] = keel::convert_image_dtype(keel::decode_image(bytes[i], 1));
  const double resize_gray_then_repeat_us = us_per(n, [&](int64_t i) {
    Tensor g = gray[i].reshape({1, gray[i].dim(0), gray[i].dim(1), 1});
    sink += static_cast<size_t>(keel::adapt_images(g, target).size());
  });

  // batch(64) alone, on ready images (cycled), through the Dataset machinery.
  const int64_t batch_images = std::max<int64_t>(n, 20 * a.batch) / a.batch * a.batch;
  auto ready = [&](uint64_t) {
    auto i = std::make_shared<int64_t>(0);
    return keel::Generator([&, i, batch_images]() -> std::optional<Element> {
      if (*i >= batch_images) return std::nullopt;
      const int64_t k = (*i)++ % static_cast<int64_t>(resized.size());
      return Element{resized[k], Tensor::scalar(0)};
    });
  };
  double batch_us = 0;
  {
    keel::Iterator it = Dataset::from_generator(ready).batch(a.batch, true).make_iterator(0);
    const auto t0 = Clock::now();
    while (auto e = it.next()) sink += static_cast<size_t>((*e)[0].size());
    batch_us = 1e6 * seconds_since(t0) / static_cast<double>(batch_images);
  }

  // The whole map function through Dataset on one thread (no prefetch), and with num_parallel_calls.
  auto pipeline_us = [&](int64_t parallel, bool prefetch) {
    Dataset ds = Dataset::from_generator([&](uint64_t) {
                   auto i = std::make_shared<int64_t>(0);
                   return keel::Generator([&, i]() -> std::optional<Element> {
                     if (*i >= n) return std::nullopt;
                     return Element{Tensor::from_string(index.paths[(*i)++])};
                   });
                 })
                     .map([&a](const Element& e) { return Element{image_tensor(read_file(e[0].string_value()), a)}; },
                          parallel)
                     .batch(a.batch, true);
    if (prefetch) ds = ds.prefetch(keel::AUTOTUNE);
    keel::Iterator it = ds.make_iterator(0);
    const auto t0 = Clock::now();
    int64_t got = 0;
    while (auto e = it.next()) got += (*e)[0].dim(0);
    return 1e6 * seconds_since(t0) / static_cast<double>(got);
  };
  const double sequential_us = pipeline_us(0, false);
  const double parallel1_us = pipeline_us(1, true);
  const double parallel_us = pipeline_us(keel::AUTOTUNE, true);

  // TFRecord: reading the records and parsing the Example, per image.
  double tfrecord_read_us = 0, parse_us = 0;
  if (!a.tfrecord_dir.empty()) {
    std::vector<std::string> records;
    {
      keel::Iterator it = Dataset::list_files(tfrecord_pattern(a.tfrecord_dir), false)
                              .interleave([](const Element& f) { return keel::TFRecordDataset({f[0].string_value()}); },
                                          4, 1, 0)
                              .take(n)
                              .make_iterator(0);
      const auto t0 = Clock::now();
      while (auto e = it.next()) records.push_back((*e)[0].string_value());
      tfrecord_read_us = 1e6 * seconds_since(t0) / static_cast<double>(records.size());
    }
    const keel::FeatureSpec spec = example_spec();
    parse_us = us_per(static_cast<int64_t>(records.size()), [&](int64_t i) {
      sink += keel::parse_single_example(records[i], spec).at("image").string_value().size();
    });
  }

  std::printf(
      "{\"bench\": \"keel_stages\", \"size\": %lld, \"channels\": %d, \"images\": %lld, \"us_per_image\": {"
      "\"read_file\": %.2f, \"tfrecord_read\": %.2f, \"parse_example\": %.2f, \"decode\": %.2f, "
      "\"decode_gray\": %.2f, \"convert\": %.2f, \"resize\": %.2f, \"resize_gray_then_repeat\": %.2f, "
      "\"batch\": %.2f, \"pipeline_sequential\": %.2f, \"pipeline_parallel_1\": %.2f, "
      "\"pipeline_parallel_autotune\": %.2f}, \"sink\": %zu}\n",
      static_cast<long long>(a.size), a.channels, static_cast<long long>(n), read_us, tfrecord_read_us, parse_us,
      decode_us, decode_gray_us, convert_us, resize_us, resize_gray_then_repeat_us, batch_us, sequential_us,
      parallel1_us, parallel_us, sink % 10);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (a.mode == "stages") run_stages(a);
    else run_throughput(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
