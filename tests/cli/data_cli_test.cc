// `keel data export` and training/evaluating from the exported files (--dataset tfrecord:DIR and
// images:DIR), end to end on the real Fashion-MNIST.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "datasets/example.h"
#include "datasets/image_codec.h"
#include "datasets/tfrecord.h"
#include "framework/device/device_spec.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Exports are shared by the tests (shared_export: each kind once per build directory).
class DataCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-data-run"); }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string exported(const std::string& name, const std::string& args) { return shared_export(name, args); }
  static double evaluate(const std::string& run, const std::string& extra = "") {
    CommandResult e = run_keel("evaluate " + run + " --split test --json " + extra);
    EXPECT_EQ(e.exit_code, 0) << e.err;
    return nlohmann::json::parse(e.out).at("accuracy").get<double>();
  }

  std::string dir_;
};

const std::string kMlp = "--model mlp --device v3-8 --batch-per-core 16 --seed 1 --quiet ";

TEST_F(DataCli, ExportWritesShardsOfExamplesAndAnInfoFile) {
  const std::string out = exported("tfrecord_jpeg", "--format tfrecord --shards 4");
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(fs::exists(out + "/train-0000" + std::to_string(s) + "-of-00004.tfrecord")) << s;
  }
  EXPECT_TRUE(fs::exists(out + "/test-00000-of-00004.tfrecord"));
  const nlohmann::json info = nlohmann::json::parse(read_file(out + "/dataset_info.json"));
  EXPECT_EQ(info.at("splits").at("train").at("examples"), 60000);
  EXPECT_EQ(info.at("splits").at("test").at("examples"), 10000);
  // Every record is an Example with a decodable 28x28 gray JPEG and a label in 0..9.
  TFRecordReader reader(out + "/test-00003-of-00004.tfrecord");
  FeatureSpec spec;
  spec["image"] = FixedLenFeature{{}, FeatureType::kString};
  spec["label"] = FixedLenFeature{{}, FeatureType::kInt64};
  std::string record;
  int64_t n = 0;
  while (reader.read(&record)) {
    auto f = parse_single_example(record, spec);
    const DecodedImage image = decode_jpeg(f.at("image").string_value());
    ASSERT_EQ(image.height, 28);
    ASSERT_EQ(image.width, 28);
    ASSERT_EQ(image.channels, 1);
    const float label = f.at("label").item();
    ASSERT_TRUE(label >= 0 && label <= 9) << label;
    ++n;
  }
  EXPECT_EQ(n, 2500);
}

// The bar for the decoders: on the files `keel data export` writes, keel's decode_image gives
// exactly Pillow's pixels (Debian's python3-pil, which the test runs), for JPEG and PNG.
TEST_F(DataCli, ExportedJpegAndPngDecodeLikePillow) {
  for (const std::string format : {"jpeg", "png"}) {
    SCOPED_TRACE(format);
    const std::string folder = exported(format + "_test_folder", "--format " + format + " --split test");
    const std::string class_dir = folder + "/test/3_dress";
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(class_dir)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    files.resize(std::min<size_t>(files.size(), 300));
    ASSERT_EQ(files.size(), 300u);
    // Pillow: one line per file, the CRC-32 of its decoded pixel bytes.
    const std::string script = fs::path(dir_) / "pillow.py";
    {
      std::ofstream py(script);
      py << "import sys, zlib\nfrom PIL import Image\n"
            "for path in sys.stdin.read().split():\n"
            "    im = Image.open(path)\n"
            "    assert im.mode == 'L', (path, im.mode)\n"
            "    print(zlib.crc32(im.tobytes()))\n";
    }
    const std::string list = fs::path(dir_) / "files.txt";
    {
      std::ofstream out(list);
      for (const std::string& f : files) out << f << "\n";
    }
    CommandResult pillow = run_command("/usr/bin/python3 " + script + " < " + list);
    ASSERT_EQ(pillow.exit_code, 0) << pillow.err;
    std::istringstream lines(pillow.out);
    for (const std::string& f : files) {
      uint64_t expected = 0;
      ASSERT_TRUE(lines >> expected) << "Pillow printed fewer lines than files";
      const DecodedImage image = decode_image(read_file(f));
      ASSERT_EQ(image.channels, 1) << f;
      ASSERT_EQ(image.height * image.width, 28 * 28) << f;
      const uint64_t crc = ::crc32(0L, image.pixels8.data(), static_cast<uInt>(image.pixels8.size()));
      ASSERT_EQ(crc, expected) << f << ": keel's pixels differ from Pillow's";
    }
  }
}

TEST_F(DataCli, ExportRefusesToOverwriteAndLeavesTheDirectoryAsItWas) {
  const std::string out = dir_ + "/taken";
  fs::create_directories(out);
  { std::ofstream(out + "/keep.txt") << "mine"; }
  const std::string before = md5_of_dir(out);
  CommandResult r = run_keel("data export --format png --split test --out " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--overwrite"));
  EXPECT_EQ(md5_of_dir(out), before);
  CommandResult bad = run_keel("data export --format gif --out " + dir_ + "/x");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("tfrecord, jpeg, png"));
  EXPECT_FALSE(fs::exists(dir_ + "/x"));
}

// A PNG export holds the exact pixels: evaluating a run on it gives exactly the IDX result.
TEST_F(DataCli, PngRecordsEvaluateExactlyLikeTheIdxFiles) {
  const std::string png = exported("tfrecord_png", "--format tfrecord --image-format png --shards 2");
  CommandResult t = run_keel("train " + kMlp + "--epochs 1 --stop-after-steps 50 --checkpoint-dir " + dir_ + "/run");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const double idx = evaluate(dir_ + "/run");
  EXPECT_EQ(evaluate(dir_ + "/run", "--dataset tfrecord:" + png), idx);
  const std::string folder = exported("png_folder", "--format png --split test");
  EXPECT_EQ(evaluate(dir_ + "/run", "--dataset images:" + folder), idx);
}

// One shard of PNG records holds Fashion-MNIST's exact pixels in IDX order, so the TFRecord pipeline
// (list_files -> interleave -> shuffle(60000, seed) -> decode) feeds exactly the batches the IDX
// pipeline does: the runs end with bit-identical weights.
TEST_F(DataCli, OneShardOfPngRecordsTrainsBitIdenticallyToTheIdxFiles) {
  const std::string records = exported("tfrecord_png_1shard", "--format tfrecord --image-format png --split train");
  CommandResult a = run_keel("train " + kMlp + "--epochs 1 --checkpoint-dir " + dir_ + "/idx");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b = run_keel("train " + kMlp + "--epochs 1 --dataset tfrecord:" + records + " --checkpoint-dir " + dir_ + "/rec");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  expect_bit_identical(dir_ + "/idx/ckpt-468.h5", dir_ + "/rec/ckpt-468.h5");
}

// The bar: training from the exported files reaches the accuracy of training from the IDX
// files with the same seed (JPEG is lossy, so "the same" means within a point).
TEST_F(DataCli, TrainingFromTFRecordsAndImageFoldersMatchesIdxAccuracy) {
  const std::string records = exported("tfrecord_jpeg", "--format tfrecord --shards 4");
  const std::string folder = exported("jpeg_folder", "--format jpeg");
  CommandResult a = run_keel("train " + kMlp + "--epochs 3 --checkpoint-dir " + dir_ + "/idx");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b = run_keel("train " + kMlp + "--epochs 3 --dataset tfrecord:" + records + " --checkpoint-dir " + dir_ + "/rec");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  CommandResult c = run_keel("train " + kMlp + "--epochs 3 --dataset images:" + folder + " --checkpoint-dir " + dir_ + "/img");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const double idx = evaluate(dir_ + "/idx");
  const double rec = evaluate(dir_ + "/rec");
  const double img = evaluate(dir_ + "/img");
  std::printf("test accuracy after 3 epochs: idx %.4f, tfrecord(jpeg) %.4f, images(jpeg) %.4f\n", idx, rec, img);
  EXPECT_GT(idx, 0.85);
  EXPECT_NEAR(rec, idx, 0.01);
  EXPECT_NEAR(img, idx, 0.01);
  // The runs evaluate on their own test files too.
  EXPECT_NEAR(evaluate(dir_ + "/rec", "--dataset tfrecord:" + records), rec, 0.01);
}

TEST_F(DataCli, MidEpochResumeOnATFRecordPipelineIsBitIdentical) {
  const std::string records = exported("tfrecord_jpeg", "--format tfrecord --shards 4");
  // An epoch is 468 steps; stop in the middle of epoch 1, twice, with shuffle, parallel interleave
  // and map and prefetch all holding state.
  const std::string run = kMlp + "--dataset tfrecord:" + records + " --shuffle-buffer 5000 --epochs 2 ";
  CommandResult a = run_keel("train " + run + "--checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b1 = run_keel("train " + run + "--stop-after-steps 300 --checkpoint-dir " + dir_ + "/split");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir_ + "/split --stop-after-steps 400 --quiet");
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  CommandResult b3 = run_keel("resume " + dir_ + "/split --quiet");
  ASSERT_EQ(b3.exit_code, 0) << b3.err;
  expect_bit_identical(dir_ + "/straight/ckpt-936.h5", dir_ + "/split/ckpt-936.h5");
}

// A checkpoint saved in mid-epoch before keel decoded per host (its decode map unkeyed, as the state
// shows) resumes bit-identically: keel rebuilds that pipeline for it.
TEST_F(DataCli, MidEpochStateFromBeforePerHostDecodingStillResumes) {
  const std::string records = exported("tfrecord_jpeg", "--format tfrecord --shards 4");
  const std::string run = kMlp + "--dataset tfrecord:" + records + " --shuffle-buffer 500 --epochs 1 ";
  ASSERT_EQ(run_keel("train " + run + "--stop-after-steps 20 --checkpoint-dir " + dir_ + "/straight").exit_code, 0);
  ASSERT_EQ(run_keel("train " + run + "--stop-after-steps 12 --checkpoint-dir " + dir_ + "/old").exit_code, 0);
  const std::string checkpoint = dir_ + "/old/ckpt-12.h5";
  nlohmann::json state = train_state_json(checkpoint);
  nlohmann::json& iterator = state["iterator_state"];
  std::string pipeline = iterator["pipeline"].get<std::string>();
  const size_t keyed = pipeline.find("-> map(keyed) -> filter");
  ASSERT_NE(keyed, std::string::npos) << pipeline;
  iterator["pipeline"] = pipeline.replace(keyed, std::string("-> map(keyed)").size(), "-> map");
  nlohmann::json& map = iterator["state"]["input"]["input"]["input"];  // prefetch <- batch <- filter <- map
  ASSERT_EQ(map["op"], "map") << iterator.dump();
  map.erase("index");
  rewrite_train_state(checkpoint, state);
  const CommandResult r = run_keel("resume " + dir_ + "/old --stop-after-steps 8 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_bit_identical(dir_ + "/straight/ckpt-20.h5", dir_ + "/old/ckpt-20.h5");
}

TEST_F(DataCli, MidEpochResumeOnAnImageFolderIsBitIdentical) {
  // 400 PNGs in 10 class folders under train/: 12 steps of 32 per epoch.
  const std::string data = dir_ + "/folder";
  std::vector<uint8_t> pixels(28 * 28);
  for (int i = 0; i < 400; ++i) {
    const std::string class_dir = data + "/train/class_" + std::to_string(i % 10);
    fs::create_directories(class_dir);
    for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>((k * (i % 10 + 1) + i) % 256);
    std::ofstream(class_dir + "/" + std::to_string(i) + ".png", std::ios::binary) << encode_png(pixels.data(), 28, 28, 1);
  }
  const std::string run = "--model mlp --cores 2 --hbm-per-core 64MiB --batch-per-core 16 --seed 3 --quiet --epochs 2 "
                          "--dataset images:" + data + " ";
  CommandResult a = run_keel("train " + run + "--checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b1 = run_keel("train " + run + "--stop-after-steps 5 --checkpoint-dir " + dir_ + "/split");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir_ + "/split --stop-after-steps 12 --quiet");  // to step 17, mid-epoch 2
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  CommandResult b3 = run_keel("resume " + dir_ + "/split --quiet");
  ASSERT_EQ(b3.exit_code, 0) << b3.err;
  expect_bit_identical(dir_ + "/straight/ckpt-24.h5", dir_ + "/split/ckpt-24.h5");
}

// A small TFRecord directory written here record by record, with one bad record in it.
std::string write_records(const std::string& dir, int bad_index, const std::string& bad_kind) {
  fs::create_directories(dir);
  const std::string path = dir + "/train-00000-of-00001.tfrecord";
  const std::string test_path = dir + "/test-00000-of-00001.tfrecord";
  std::vector<uint8_t> pixels(28 * 28);
  for (const std::string& p : {path, test_path}) {
    TFRecordWriter w(p);
    for (int i = 0; i < 256; ++i) {
      for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>((k * 7 + i * 13) % 256);
      ExampleBuilder e;
      std::string image = encode_png(pixels.data(), 28, 28, 1);
      if (i == bad_index && bad_kind == "image") image = image.substr(0, image.size() / 2);
      if (!(i == bad_index && bad_kind == "missing")) e.add_bytes("image", image);
      if (i == bad_index && bad_kind == "type") {
        e.add_float("label", {1.0f});
      } else {
        e.add_int64("label", {i % 10});
      }
      w.write(e.serialize());
    }
    w.close();
  }
  return path;
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x20));
}

TEST_F(DataCli, BadRecordsNameTheFileAndRecordAndSkipCorruptCountsThem) {
  const std::string small = "--model mlp --cores 2 --hbm-per-core 64MiB --batch-per-core 16 --epochs 1 --quiet ";
  struct Case {
    std::string kind, message;
  };
  for (const Case& c : {Case{"image", "record 37"}, Case{"missing", "'image'"}, Case{"type", "'label'"},
                        Case{"crc", "record 37"}}) {
    SCOPED_TRACE(c.kind);
    const std::string data = dir_ + "/" + c.kind;
    const std::string path = write_records(data, 37, c.kind);
    if (c.kind == "crc") {
      // Record 37's data: records before it are the same size; flip a byte in the middle of it.
      TFRecordReader r(path);
      std::string rec;
      for (int i = 0; i < 37; ++i) ASSERT_TRUE(r.read(&rec));
      flip_byte(path, static_cast<int64_t>(r.offset()) + 12 + 20);
    }
    CommandResult bad = run_keel("train " + small + "--dataset tfrecord:" + data + " --checkpoint-dir " + dir_ + "/run-" + c.kind);
    EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
    EXPECT_THAT(bad.err, HasSubstr(path));
    EXPECT_THAT(bad.err, HasSubstr(c.message));
    CommandResult skip = run_keel("train " + small + "--skip-corrupt --dataset tfrecord:" + data +
                                  " --checkpoint-dir " + dir_ + "/skip-" + c.kind);
    EXPECT_EQ(skip.exit_code, 0) << skip.err;
    EXPECT_THAT(skip.err, HasSubstr("skipped"));
    EXPECT_THAT(skip.out, HasSubstr("skipped 1 corrupt"));
  }
}

// A run that stopped on a damaged record continues with `keel resume --skip-corrupt`.
TEST_F(DataCli, ARunStoppedByACorruptRecordResumesWithSkipCorrupt) {
  const std::string data = dir_ + "/records";
  const std::string path = write_records(data, 200, "image");
  const std::string small = "--model mlp --cores 2 --hbm-per-core 64MiB --batch-per-core 16 --epochs 1 --quiet ";
  CommandResult bad = run_keel("train " + small + "--save-every-steps 2 --dataset tfrecord:" + data +
                               " --checkpoint-dir " + dir_ + "/run");
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_THAT(bad.err, HasSubstr(path + " record 200"));
  ASSERT_TRUE(fs::exists(dir_ + "/run/latest")) << "periodic checkpoints before the bad record";
  CommandResult resumed = run_keel("resume " + dir_ + "/run --skip-corrupt --quiet");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("skipped 1 corrupt"));
  EXPECT_THAT(resumed.out, HasSubstr("Trained 1 epochs (step 7)"));  // 255 good examples / 32
}

TEST_F(DataCli, AnImageFolderWithSplitFoldersMustHaveTheRequestedSplit) {
  const std::string folder = exported("png_test_folder", "--format png --split test");
  CommandResult r = run_keel("train " + kMlp + "--epochs 1 --dataset images:" + folder + " --checkpoint-dir " + dir_ + "/run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("has no 'train' folder"));
  EXPECT_FALSE(fs::exists(dir_ + "/run/latest"));
}

TEST_F(DataCli, ExportAcceptsATrailingSlashAndReplacesOnlyWithOverwrite) {
  const std::string out = dir_ + "/exp/";
  CommandResult a = run_keel("data export --format png --split test --out " + out);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_TRUE(fs::exists(dir_ + "/exp/dataset_info.json"));
  CommandResult b = run_keel("data export --format tfrecord --split test --out " + out + " --overwrite");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(fs::exists(dir_ + "/exp/test-00000-of-00001.tfrecord"));
  EXPECT_FALSE(fs::exists(dir_ + "/exp/test")) << "the old export was replaced, not merged";
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
  }
}

TEST_F(DataCli, GzipRecordsEvaluateLikePlainOnes) {
  const std::string plain = exported("tfrecord_png", "--format tfrecord --image-format png --shards 2");
  const std::string gz = exported("tfrecord_png_gzip_test", "--format tfrecord --image-format png --compression GZIP --split test");
  EXPECT_TRUE(fs::exists(gz + "/test-00000-of-00001.tfrecord.gz"));
  CommandResult t = run_keel("train " + kMlp + "--epochs 1 --stop-after-steps 20 --checkpoint-dir " + dir_ + "/run");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(evaluate(dir_ + "/run", "--dataset tfrecord:" + gz), evaluate(dir_ + "/run", "--dataset tfrecord:" + plain));
}

// A run records its data directory absolute: resume and evaluate work from any working directory.
TEST_F(DataCli, ARelativeDataDirectoryIsSavedAbsolute) {
  write_records(dir_ + "/data", -1, "");
  const std::string train = std::string("cd ") + dir_ + " && " + KEEL_BINARY +
                            " train --model mlp --cores 2 --hbm-per-core 64MiB --batch-per-core 16 --epochs 2 --quiet "
                            "--stop-after-steps 5 --dataset tfrecord:data/ --checkpoint-dir run";
  CommandResult t = run_command(train);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  CommandResult r = run_command("cd / && " + std::string(KEEL_BINARY) + " resume " + dir_ + "/run --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Trained 2 epochs (step 16)"));
}

// --lr-schedule cosine needs steps per epoch: counted for an image folder, read from dataset_info.json
// for TFRecords, and a clear error when neither is known.
TEST_F(DataCli, CosineScheduleCountsTheExamplesOfFileDatasets) {
  write_records(dir_ + "/records", -1, "");  // no dataset_info.json
  const std::string small = "--model mlp --cores 2 --hbm-per-core 64MiB --batch-per-core 16 --epochs 1 --quiet "
                            "--lr-schedule cosine ";
  CommandResult bad = run_keel("train " + small + "--dataset tfrecord:" + dir_ + "/records --checkpoint-dir " + dir_ + "/a");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("dataset_info.json"));
  const std::string records = exported("tfrecord_png", "--format tfrecord --image-format png --shards 2");
  CommandResult ok = run_keel("train " + small + "--stop-after-steps 3 --dataset tfrecord:" + records +
                              " --checkpoint-dir " + dir_ + "/b");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const std::string folder = exported("png_folder", "--format png --split test");
  CommandResult img = run_keel("train " + small + "--stop-after-steps 3 --dataset images:" + folder + "/test" +
                               " --checkpoint-dir " + dir_ + "/c");
  EXPECT_EQ(img.exit_code, 0) << img.err;
}

TEST_F(DataCli, TrainingReportsInfeedBytesAndInputWait) {
  const std::string records = exported("tfrecord_png", "--format tfrecord --image-format png --shards 2");
  CommandResult t = run_keel("train --model mlp --device v3-8 --batch-per-core 16 --seed 1 --epochs 1 "
                             "--dataset tfrecord:" + records + " --checkpoint-dir " + dir_ + "/run");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  // 468 steps x 128 examples x (784 + 10) floats x 4 bytes.
  EXPECT_THAT(t.out, HasSubstr("infeed: " + format_bytes(int64_t{468} * 128 * (784 + 10) * 4) + " host->cores"));
  EXPECT_THAT(t.out, HasSubstr("waited for input"));
}

}  // namespace
}  // namespace keel::testing
