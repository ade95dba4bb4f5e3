#include "framework/checkpoint/h5_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace keel {
namespace {

namespace fs = std::filesystem;

class H5FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("keel_h5_file_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Distinct, exactly representable values, plus the awkward ones a bitwise round trip must keep.
std::vector<float> test_values(int64_t n, float offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = offset + 0.5f * static_cast<float>(i) - 3.0f;
  if (n >= 5) {
    v[0] = std::numeric_limits<float>::quiet_NaN();
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::infinity();
    v[3] = std::numeric_limits<float>::denorm_min();
    v[4] = -std::numeric_limits<float>::max();
  }
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see the null data() of an empty vector.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Runs the h5py helper script; returns its exit status and appends its output to `output`.
int run_h5py(const std::string& command, const std::string& file, std::string* output) {
  const std::string script = std::string(KEEL_TESTS_DIR) + "/checkpoint/read_with_h5py.py";
  const std::string cmd =
      "/usr/bin/python3 '" + script + "' " + command + " '" + file + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Expects `fn` to throw CheckpointError whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << part << "\"";
  }
}

TEST_F(H5FileTest, FloatsRoundTripInManyShapes) {
  const std::vector<Shape> shapes = {{}, {1}, {7}, {3, 4}, {2, 3, 4, 5}, {0, 3}, {1, 1, 1}};
  const std::string file = path("floats.h5");
  {
    H5File f = H5File::create(file);
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<float> v = test_values(num_elements(shapes[i]), static_cast<float>(i));
      f.write_floats("model_weights/layer_" + std::to_string(i) + "/w:0", shapes[i], v.data());
    }
    f.close();
  }
  H5File f = H5File::open_read(file);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string p = "/model_weights/layer_" + std::to_string(i) + "/w:0";
    SCOPED_TRACE(p);
    EXPECT_EQ(f.dataset_shape(p), shapes[i]);
    std::vector<float> want = test_values(num_elements(shapes[i]), static_cast<float>(i));
    std::vector<float> got(want.size(), 99.0f);
    f.read_floats(p, shapes[i], got.data());
    EXPECT_TRUE(bitwise_equal(got, want));
  }
}

TEST_F(H5FileTest, Int64AndStringsRoundTrip) {
  const std::string file = path("scalars.h5");
  const std::vector<int64_t> ints = {0, -1, 1234567890123, std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()};
  const std::string json = "{\"name\": \"mlp \xe2\x9c\x93\", \"layers\": [1, 2, 3]}";
  const std::string long_text(200000, 'z');
  {
    H5File f = H5File::create(file);
    for (size_t i = 0; i < ints.size(); ++i)
      f.write_int64("keel/train_state/i" + std::to_string(i), ints[i]);
    f.write_string("keel/train_state/config", json);
    f.write_string("keel/empty", "");
    f.write_string("keel/long", long_text);
    f.close();
  }
  H5File f = H5File::open_read(file);
  for (size_t i = 0; i < ints.size(); ++i)
    EXPECT_EQ(f.read_int64("keel/train_state/i" + std::to_string(i)), ints[i]);
  EXPECT_EQ(f.read_string("keel/train_state/config"), json);
  EXPECT_EQ(f.read_string("keel/empty"), "");
  EXPECT_EQ(f.read_string("keel/long"), long_text);
}

TEST_F(H5FileTest, AttributesOfEveryKindRoundTrip) {
  const std::string file = path("attrs.h5");
  const std::vector<std::string> names = {"dense/kernel:0", "dense/bias:0", "x"};
  std::vector<std::string> big;  // > 64 KiB: beyond HDF5's compact attribute storage
  for (int i = 0; i < 2000; ++i) big.push_back("layer_" + std::to_string(i) + std::string(40, 'x'));
  {
    H5File f = H5File::create(file);
    f.create_group("model_weights/dense");
    f.write_floats("model_weights/dense/dense/kernel:0", {1}, std::vector<float>{1.0f}.data());
    f.set_attr_string("/", "backend", "keel");
    f.set_attr_string("/", "model_config", "{\"caf\xc3\xa9\": true}");
    f.set_attr_string("model_weights", "empty", "");
    f.set_attr_string_list("model_weights", "layer_names", {"dense", "dense_1"});
    f.set_attr_string_list("model_weights/dense", "weight_names", names);
    f.set_attr_string_list("model_weights/dense", "none", {});
    f.set_attr_string_list("/", "big", big);
    f.set_attr_int64("/", "keel_format_version", 1);
    f.set_attr_int64("model_weights/dense/dense/kernel:0", "neg", -5);
    // Setting again replaces, even with a different type.
    f.set_attr_string("/", "replaced", "first");
    f.set_attr_int64("/", "replaced", 77);
    f.close();
  }
  H5File f = H5File::open_read(file);
  EXPECT_EQ(f.get_attr_string("/", "backend"), "keel");
  EXPECT_EQ(f.get_attr_string("", "model_config"), "{\"caf\xc3\xa9\": true}");
  EXPECT_EQ(f.get_attr_string("/model_weights", "empty"), "");
  EXPECT_EQ(f.get_attr_string_list("model_weights", "layer_names"),
            (std::vector<std::string>{"dense", "dense_1"}));
  EXPECT_EQ(f.get_attr_string_list("model_weights/dense", "weight_names"), names);
  EXPECT_TRUE(f.has_attr("model_weights/dense", "none"));
  EXPECT_TRUE(f.get_attr_string_list("model_weights/dense", "none").empty());
  EXPECT_EQ(f.get_attr_string_list("/", "big"), big);
  EXPECT_EQ(f.get_attr_int64("/", "keel_format_version"), 1);
  EXPECT_EQ(f.get_attr_int64("model_weights/dense/dense/kernel:0", "neg"), -5);
  EXPECT_EQ(f.get_attr_int64("/", "replaced"), 77);
  EXPECT_TRUE(f.has_attr("/", "backend"));
  EXPECT_FALSE(f.has_attr("/", "nope"));
  EXPECT_FALSE(f.has_attr("model_weights", "backend"));
  // A single string reads as a one-element list too.
  EXPECT_EQ(f.get_attr_string_list("/", "backend"), std::vector<std::string>{"keel"});
}

TEST_F(H5FileTest, GroupsAndExistsOnNestedPaths) {
  const std::string file = path("groups.h5");
  H5File f = H5File::create(file);
  EXPECT_TRUE(f.exists("/"));
  EXPECT_FALSE(f.exists("a"));
  EXPECT_FALSE(f.exists("a/b/c:0"));  // intermediates missing: false, not an error
  f.create_group("a/b/c:0");
  EXPECT_TRUE(f.exists("a"));
  EXPECT_TRUE(f.exists("/a/b"));
  EXPECT_TRUE(f.exists("a//b/c:0/"));
  f.create_group("a/b");  // already there: a no-op
  f.write_floats("a/d/w:0", {2}, std::vector<float>{1, 2}.data());
  EXPECT_TRUE(f.exists("a/d"));
  EXPECT_TRUE(f.exists("a/d/w:0"));
  EXPECT_FALSE(f.exists("a/d/w:0/below"));  // below a dataset
  EXPECT_EQ(f.children("a"), (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(f.children("/"), std::vector<std::string>{"a"});
  expect_error([&] { f.create_group("a/d/w:0"); }, {file, "/a/d/w:0"});
  expect_error([&] { f.create_group("a/d/w:0/x"); }, {file, "/a/d/w:0 is a dataset"});
  expect_error([&] { f.write_floats("a/d/w:0", {2}, std::vector<float>{1, 2}.data()); },
               {file, "/a/d/w:0", "already exists"});
  expect_error([&] { f.children("a/d/w:0"); }, {file, "/a/d/w:0"});
  expect_error([&] { f.children("zzz"); }, {file, "zzz", "does not exist"});
}

TEST_F(H5FileTest, ReadErrorsNameTheFileAndPath) {
  const std::string file = path("errors.h5");
  {
    H5File f = H5File::create(file);
    std::vector<float> v(6, 1.0f);
    f.write_floats("model_weights/dense/dense/kernel:0", {2, 3}, v.data());
    f.write_int64("keel/step", 5);
    f.write_string("keel/json", "{}");
    f.set_attr_string("/", "s", "text");
    f.set_attr_int64("/", "i", 3);
    f.close();
  }
  H5File f = H5File::open_read(file);
  std::vector<float> out(6);
  const std::string kernel = "model_weights/dense/dense/kernel:0";
  expect_error([&] { f.read_floats("model_weights/dense/dense/missing:0", {2, 3}, out.data()); },
               {file, "model_weights/dense/dense/missing:0", "does not exist"});
  expect_error([&] { f.read_floats("nothing/here/at:0", {2, 3}, out.data()); },
               {file, "nothing/here/at:0"});
  try {
    f.read_floats(kernel, {3, 2}, out.data());
    ADD_FAILURE() << "shape mismatch not detected";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint " + file + ": dataset /" + kernel +
                                         " has shape (2, 3), the model expects (3, 2)");
  }
  expect_error([&] { f.read_floats(kernel, {6}, out.data()); }, {"(2, 3)", "(6,)"});
  expect_error([&] { f.read_floats("keel/step", {}, out.data()); },
               {file, "keel/step", "int64", "float32"});
  expect_error([&] { f.read_floats("keel/json", {}, out.data()); }, {file, "keel/json", "string"});
  expect_error([&] { f.read_floats("model_weights/dense", {}, out.data()); },
               {file, "model_weights/dense", "group"});
  expect_error([&] { f.dataset_shape("keel/nope"); }, {file, "keel/nope"});
  expect_error([&] { f.read_int64(kernel); }, {file, kernel, "float32", "integer"});
  expect_error([&] { f.read_int64("keel/missing"); }, {file, "keel/missing"});
  expect_error([&] { f.read_string("keel/step"); }, {file, "keel/step", "string"});
  expect_error([&] { f.get_attr_int64("/", "s"); }, {file, "attribute s", "integer"});
  expect_error([&] { f.get_attr_string("/", "i"); }, {file, "attribute i", "string"});
  expect_error([&] { f.get_attr_string_list("/", "i"); }, {file, "attribute i", "string"});
  expect_error([&] { f.get_attr_string("/", "missing_attr"); }, {file, "missing_attr"});
  expect_error([&] { f.get_attr_string("no/such/group", "s"); }, {file, "no/such/group"});
  expect_error([&] { f.has_attr("no/such/group", "s"); }, {file, "no/such/group"});
  // The file is opened read-only.
  expect_error([&] { f.write_int64("keel/other", 1); }, {file, "keel/other"});
}

TEST_F(H5FileTest, OpeningABrokenFileThrows) {
  const std::string message = "not a readable HDF5 file (truncated or not a checkpoint?)";
  const std::string garbage = path("garbage.h5");
  std::ofstream(garbage) << "this is not an HDF5 file, just some text\n";
  expect_error([&] { H5File::open_read(garbage); }, {"cannot open checkpoint " + garbage, message});

  const std::string empty = path("empty.h5");
  std::ofstream{empty};
  expect_error([&] { H5File::open_read(empty); }, {"cannot open checkpoint " + empty, message});

  expect_error([&] { H5File::open_read(dir_.string()); }, {dir_.string(), message});
  expect_error([&] { H5File::open_read(path("missing.h5")); }, {path("missing.h5"), "no such file"});

  const std::string valid = path("valid.h5");
  {
    H5File f = H5File::create(valid);
    std::vector<float> v(20000, 0.25f);
    f.write_floats("model_weights/big/w:0", {100, 200}, v.data());
    f.set_attr_string_list("model_weights", "layer_names", {"big"});
    f.close();
  }
  ASSERT_NO_THROW(H5File::open_read(valid));
  const auto size = fs::file_size(valid);
  ASSERT_GT(size, 80000u);
  const std::string truncated = path("truncated.h5");
  fs::copy_file(valid, truncated);
  fs::resize_file(truncated, size / 2);
  expect_error([&] { H5File::open_read(truncated); },
               {"cannot open checkpoint " + truncated, message});
}

TEST_F(H5FileTest, CloseIsExplicitAndMovesTransferOwnership) {
  const std::string file = path("moves.h5");
  H5File a = H5File::create(file);
  a.write_int64("x", 1);
  H5File b = std::move(a);
  EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move): the moved-from state is a contract
  expect_error([&] { a.write_int64("y", 2); }, {"closed"});
  b.write_int64("y", 2);
  b.close();
  EXPECT_FALSE(b.is_open());
  b.close();  // a second close is a no-op
  expect_error([&] { b.read_int64("x"); }, {file, "closed"});
  H5File c = H5File::open_read(file);
  EXPECT_EQ(c.read_int64("y"), 2);
  c = H5File::open_read(file);  // move-assignment closes the old file
  EXPECT_EQ(c.read_int64("x"), 1);
}

// HDF5 refuses to truncate a file it still has open. If any operation (including a failing one)
// leaked an id, the file would stay open after close() and create() below would throw.
TEST_F(H5FileTest, NoHandlesLeakAfterSuccessesAndFailures) {
  const std::string file = path("leaks.h5");
  {
    H5File f = H5File::create(file);
    std::vector<float> v(4, 1.0f);
    f.write_floats("g/w:0", {2, 2}, v.data());
    f.write_int64("g/i", 1);
    f.write_string("g/s", "text");
    f.set_attr_string("g", "a", "b");
    f.set_attr_string_list("g", "l", {"x", "yy"});
    f.set_attr_int64("g", "n", 3);
    f.close();
  }
  {
    H5File f = H5File::open_read(file);
    std::vector<float> out(4);
    f.read_floats("g/w:0", {2, 2}, out.data());
    (void)f.dataset_shape("g/w:0");
    (void)f.read_int64("g/i");
    (void)f.read_string("g/s");
    (void)f.get_attr_string("g", "a");
    (void)f.get_attr_string_list("g", "l");
    (void)f.get_attr_int64("g", "n");
    (void)f.has_attr("g", "a");
    (void)f.exists("g/w:0/x");
    (void)f.children("g");
    EXPECT_THROW(f.read_floats("g/w:0", {4}, out.data()), CheckpointError);
    EXPECT_THROW(f.read_int64("g/s"), CheckpointError);
    EXPECT_THROW(f.read_string("g/i"), CheckpointError);
    EXPECT_THROW(f.get_attr_int64("g", "a"), CheckpointError);
    EXPECT_THROW(f.get_attr_string("g", "n"), CheckpointError);
    EXPECT_THROW(f.write_int64("g/new", 1), CheckpointError);
    f.close();
  }
  H5File again = H5File::create(file);
  again.close();
}

// Smoke test of use from several threads at once. It would catch a missing lock only with an HDF5
// built without thread-safety (Debian's is built with it), as a crash or wrong data.
TEST_F(H5FileTest, ConcurrentUseFromSeveralThreads) {
  constexpr int kThreads = 4, kDatasets = 300;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      const std::string file = path("thread" + std::to_string(t) + ".h5");
      std::vector<float> v(64, static_cast<float>(t));
      std::vector<std::string> names(kDatasets);
      for (int i = 0; i < kDatasets; ++i) names[i] = "w/d" + std::to_string(i);
      {
        H5File f = H5File::create(file);
        for (int i = 0; i < kDatasets; ++i) {
          f.write_floats(names[i], {8, 8}, v.data());
          f.set_attr_string_list(names[i], "n", {"a", "b"});
        }
        f.close();
      }
      H5File f = H5File::open_read(file);
      std::vector<float> out(64);
      int good = 0;
      for (int i = 0; i < kDatasets; ++i) {
        f.read_floats(names[i], {8, 8}, out.data());
        good += bitwise_equal(out, v) && f.get_attr_string_list(names[i], "n").size() == 2 ? 1 : 0;
      }
      ok[t] = good;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[t], kDatasets) << "thread " << t;
}

// Failures are reported as exceptions only: HDF5 must not print its error stack to stderr, in
// whichever thread the failure happens (the setting is per thread in a thread-safe HDF5).
TEST_F(H5FileTest, ErrorsAreNotPrintedToStderr) {
  const std::string garbage = path("garbage.h5");
  std::ofstream(garbage) << "not HDF5";
  const std::string file = path("ok.h5");
  {
    H5File f = H5File::create(file);
    f.write_int64("x", 1);
    f.close();
  }
  auto provoke_errors = [&] {
    EXPECT_THROW(H5File::open_read(garbage), CheckpointError);
    H5File f = H5File::open_read(file);
    EXPECT_THROW(f.write_int64("y", 2), CheckpointError);  // read-only: fails inside HDF5
  };
  ::testing::internal::CaptureStderr();
  provoke_errors();
  std::thread(provoke_errors).join();
  std::thread(provoke_errors).join();
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed.find("HDF5"), std::string::npos) << printed;
}

// Independent check: a file laid out as Keras's legacy HDF5 format, read by h5py the way Keras
// reads it. The expected values live in read_with_h5py.py (check-keras-layout).
TEST_F(H5FileTest, KerasLayoutReadsBackWithH5py) {
  const std::string file = path("keras.h5");
  {
    H5File f = H5File::create(file);
    f.set_attr_int64("/", "keel_format_version", 1);
    f.set_attr_string("/", "keras_version", "2.13.1");
    f.set_attr_string("/", "backend", "keel");
    f.set_attr_string("/", "model_config",
                      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"mlp \xe2\x9c\x93\"}}");
    f.create_group("model_weights");
    f.set_attr_string_list("model_weights", "layer_names", {"dense", "dense_1", "flatten"});
    f.create_group("model_weights/dense");
    f.set_attr_string_list("model_weights/dense", "weight_names",
                           {"dense/kernel:0", "dense/bias:0"});
    std::vector<float> kernel(6);
    for (int i = 0; i < 6; ++i) kernel[i] = static_cast<float>(i) * 0.25f - 0.5f;
    f.write_floats("model_weights/dense/dense/kernel:0", {3, 2}, kernel.data());
    f.write_floats("model_weights/dense/dense/bias:0", {2}, std::vector<float>{1.5f, -2.0f}.data());
    f.create_group("model_weights/dense_1");
    f.set_attr_string_list("model_weights/dense_1", "weight_names", {});
    f.create_group("model_weights/flatten");
    f.set_attr_string_list("model_weights/flatten", "weight_names", {});
    float scalar = 3.25f;
    f.write_floats("keel/scalar", {}, &scalar);
    f.write_int64("keel/train_state/step", 700);
    f.write_string("keel/train_state/config",
                   "{\"epochs\": 3, \"name\": \"\xc3\xa9t\xc3\xa9\"}");
    std::vector<std::string> big;
    for (int i = 0; i < 2000; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "layer_%05d_", i);
      big.push_back(name + std::string(40, 'x'));
    }
    f.set_attr_string_list("keel", "big_list", big);
    f.close();
  }
  std::string output;
  EXPECT_EQ(run_h5py("check-keras-layout", file, &output), 0) << output;
}

// The reverse: h5py writes, keel reads — fixed- and variable-length strings, numpy's float64 empty
// array, float32 data. The values come from read_with_h5py.py (write-sample).
TEST_F(H5FileTest, ReadsFileWrittenByH5py) {
  const std::string file = path("from_h5py.h5");
  std::string output;
  ASSERT_EQ(run_h5py("write-sample", file, &output), 0) << output;
  H5File f = H5File::open_read(file);
  EXPECT_EQ(f.get_attr_string("/", "fixed"), "fixed-length");
  EXPECT_EQ(f.get_attr_string("/", "variable"), "variable \xe2\x9c\x93");
  EXPECT_EQ(f.get_attr_string_list("/", "names_fixed"),
            (std::vector<std::string>{"dense", "dense_1"}));
  EXPECT_EQ(f.get_attr_string_list("/", "names_variable"),
            (std::vector<std::string>{"conv1/kernel:0", "bn"}));
  EXPECT_TRUE(f.get_attr_string_list("/", "names_empty_float").empty());
  EXPECT_EQ(f.get_attr_int64("/", "count"), -42);
  EXPECT_EQ(f.get_attr_int64("/", "count_i32"), 7);
  const std::string kernel = "model_weights/conv1/conv1/kernel:0";
  ASSERT_TRUE(f.exists(kernel));
  EXPECT_EQ(f.dataset_shape(kernel), (Shape{2, 3, 4}));
  std::vector<float> got(24), want(24);
  for (int i = 0; i < 24; ++i) want[i] = static_cast<float>(i) / 8.0f - 1.0f;
  f.read_floats(kernel, {2, 3, 4}, got.data());
  EXPECT_TRUE(bitwise_equal(got, want));
  expect_error([&] { f.read_floats("doubles", {4}, got.data()); }, {file, "doubles", "float64"});
  EXPECT_EQ(f.read_string("text"), "{\"a\": 1}");
  EXPECT_EQ(f.read_string("text_fixed"), "bytes");
  EXPECT_EQ(f.read_int64("step"), 123456789012);
  EXPECT_EQ(f.children("/"),
            (std::vector<std::string>{"doubles", "model_weights", "step", "text", "text_fixed"}));
}

}  // namespace
}  // namespace keel
