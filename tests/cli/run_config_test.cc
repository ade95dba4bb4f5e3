// The run configuration's limits, independent of the checkpoint format: RunConfig::from_json on a
// stored config (what `keel evaluate` and `keel resume` read back) and the flags of `keel train` /
// `keel memory`, through validate(). Every refusal is a std::invalid_argument or UsageError (exit 2)
// whose message names the value and the limit, in well under 1 KB.
#include "tools/cli/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "framework/core/limits.h"

namespace keel::cli {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

// What from_json (or validate) says about `stored`; "" if it is accepted.
std::string refusal(const json& stored) {
  try {
    RunConfig::from_json(stored);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

json stored_default() { return RunConfig{}.to_json(); }

TEST(RunConfigTest, AStoredConfigRoundTrips) {
  RunConfig c;
  c.model = "resnet18";
  c.input_shape = {32, 32, 1};
  c.device = DeviceSpec::custom(2, int64_t{1} << 30);
  c.batch_per_core = 64;
  c.learning_rate = 0.5f;
  c.optimizer = "sgd";
  c.momentum = 0.9f;
  c.weight_decay = 5e-4f;
  c.label_smoothing = 0.1f;
  c.lr_schedule = "cosine";
  c.decay_steps = 1000;
  c.seed = std::numeric_limits<uint64_t>::max();
  const RunConfig back = RunConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(refusal(stored_default()), "") << "the defaults are within the limits";
  json cpu = stored_default();
  cpu["device"] = {{"name", "cpu"}, {"cores", 1}, {"hbm_bytes_per_core", 0}};
  EXPECT_EQ(refusal(cpu), "") << "a stored device without a budget (the cpu preset) is fine";
}

// The hostile values of issue 10, each with the limit it breaks.
TEST(RunConfigTest, StoredValuesPastTheLimitsAreRefusedNamingTheLimit) {
  struct Case {
    const char* what;
    json patch;
    const char* expect;
  };
  const Case cases[] = {
      {"classes 2^62", {{"classes", int64_t{1} << 62}}, "2^24"},
      {"classes 0", {{"classes", 0}}, "--classes must be between 1 and 2^24"},
      {"device cores 10^6", {{"device", {{"name", "v3-8"}, {"cores", 1000000}, {"hbm_bytes_per_core", 1}}}}, "4096"},
      {"negative HBM", {{"device", {{"name", "x"}, {"cores", 1}, {"hbm_bytes_per_core", -1}}}}, "HBM"},
      {"per-core batch 2^40", {{"batch_per_core", int64_t{1} << 40}}, "2^20"},
      {"epochs 0", {{"epochs", 0}}, "epochs"},
      {"epochs 10^7", {{"epochs", 10000000}}, "1000000"},
      {"input 100000x100000x3", {{"input_shape", {100000, 100000, 3}}}, "2^16"},
      {"input 2^28+ elements", {{"input_shape", {65536, 65536}}}, "2^28"},
      {"input rank 9", {{"input_shape", {1, 1, 1, 1, 1, 1, 1, 1, 1}}}, "at most 4"},
      {"learning rate -5", {{"learning_rate", -5.0}}, "finite and positive"},
      {"learning rate 0", {{"learning_rate", 0.0}}, "finite and positive"},
      {"learning rate 1e39", {{"learning_rate", 1e39}}, "finite float"},
      {"momentum 2", {{"momentum", 2.0}}, "[0, 1]"},
      {"shuffle buffer 0", {{"shuffle_buffer", 0}}, "--shuffle-buffer"},
      {"keep -1", {{"keep", -1}}, "keep"},
      {"save every -1", {{"save_every_steps", -1}}, "--save-every-steps"},
      {"decay steps -1", {{"decay_steps", -1}}, "decay steps"},
      {"decay steps 2^60", {{"decay_steps", int64_t{1} << 60}}, "2^48"},
      {"unknown schedule", {{"lr_schedule", "linear"}}, "constant or cosine"},
      {"unknown optimizer", {{"optimizer", "adagrad"}}, "unknown optimizer"},
      {"unknown loss", {{"loss", "mse"}}, "unknown loss"},
      {"unknown dataset", {{"dataset", "mnist"}}, "unknown dataset"},
      {"classes as a float", {{"classes", 10.5}}, "must be an integer"},
      {"classes as a string", {{"classes", "10"}}, "must be an integer"},
      {"batch past 2^63", {{"batch_per_core", std::numeric_limits<uint64_t>::max()}}, "past 2^63"},
      {"negative seed", {{"seed", -1}}, "non-negative integer"},
      {"cores as a string", {{"device", {{"name", "x"}, {"cores", "8"}, {"hbm_bytes_per_core", 0}}}}, "integer"},
      {"nesterov as 1", {{"nesterov", 1}}, "true or false"},
      {"weight decay -0.1", {{"weight_decay", -0.1}}, "--weight-decay must be finite and non-negative"},
      {"weight decay 1e39", {{"weight_decay", 1e39}}, "finite float"},
      {"weight decay as a string", {{"weight_decay", "0.1"}}, "weight_decay"},
      {"label smoothing 1.5", {{"label_smoothing", 1.5}}, "--label-smoothing must be in [0, 1]"},
      {"label smoothing -0.1", {{"label_smoothing", -0.1}}, "--label-smoothing must be in [0, 1]"},
      {"label smoothing of a sparse loss", {{"label_smoothing", 0.1}, {"loss", "sparse_categorical_crossentropy"}},
       "--label-smoothing needs one-hot labels"},
  };
  for (const Case& c : cases) {
    json stored = stored_default();
    stored.merge_patch(c.patch);
    const std::string message = refusal(stored);
    EXPECT_THAT(message, HasSubstr(c.expect)) << c.what;
    EXPECT_LT(message.size(), 1024u) << c.what;
  }
}

TEST(RunConfigTest, MissingFieldsAndWrongShapesAreRefused) {
  for (const char* key : {"model", "device", "batch_per_core", "classes", "input_shape", "seed", "loss"}) {
    json stored = stored_default();
    stored.erase(key);
    EXPECT_THAT(refusal(stored), HasSubstr(std::string("no \"") + key + "\"")) << key;
  }
  EXPECT_THAT(refusal(json::array()), HasSubstr("must be an object"));
  EXPECT_THAT(refusal(json(nullptr)), HasSubstr("must be an object"));
  json device_list = stored_default();
  device_list["device"] = json::array({8});
  EXPECT_THAT(refusal(device_list), HasSubstr("\"device\" must be an object"));
}

TEST(RunConfigTest, UntrustedNamesAreQuotedShort) {
  for (const char* key : {"model", "optimizer", "loss", "dataset"}) {
    json stored = stored_default();
    stored[key] = std::string(100, 'z');  // within the name limit, unknown
    const std::string message = refusal(stored);
    EXPECT_FALSE(message.empty()) << key;
    EXPECT_LT(message.size(), 1024u) << key;
    json huge = stored_default();
    huge[key] = std::string(1 << 20, 'z');
    const std::string huge_message = refusal(huge);
    EXPECT_THAT(huge_message, HasSubstr("limit")) << key;
    EXPECT_LT(huge_message.size(), 1024u) << key;
  }
  json device = stored_default();
  device["device"]["name"] = std::string(1 << 20, 'd');
  EXPECT_LT(refusal(device).size(), 1024u);
  EXPECT_FALSE(refusal(device).empty());
}

po::variables_map flags(const std::string& line) {
  po::options_description d;
  add_model_options(d);
  add_device_options(d);
  add_training_options(d);
  std::vector<std::string> args;
  std::istringstream in(line);
  for (std::string w; in >> w;) args.push_back(w);
  return parse_args(args, d);
}

// The flags as `keel train` applies them; "" if accepted.
std::string flag_refusal(const std::string& line) {
  try {
    const po::variables_map vm = flags(line);
    RunConfig c;
    apply_model_options(vm, c);
    apply_device_options(vm, c);
    apply_training_options(vm, c);
    c.validate();
  } catch (const std::exception& e) {  // UsageError, std::invalid_argument, a Boost parse error
    return e.what();
  }
  return "";
}

TEST(RunConfigTest, FlagsPastTheLimitsAreRefused) {
  EXPECT_EQ(flag_refusal("--classes 1000 --batch-per-core 64 --device v3-8"), "");
  EXPECT_THAT(flag_refusal("--classes 4611686018427387904"), HasSubstr("2^24"));
  EXPECT_THAT(flag_refusal("--classes 100000000"), HasSubstr("2^24"));
  EXPECT_THAT(flag_refusal("--input-shape 100000x100000x3"), HasSubstr("2^16"));
  EXPECT_THAT(flag_refusal("--batch-per-core 4611686018427387904"), HasSubstr("2^20"));
  EXPECT_THAT(flag_refusal("--batch-per-core 0"), HasSubstr("per-core batch"));
  EXPECT_THAT(flag_refusal("--cores 1000000 --hbm-per-core 1GiB"), HasSubstr("4096"));
  EXPECT_THAT(flag_refusal("--epochs 0"), HasSubstr("epochs"));
  EXPECT_THAT(flag_refusal("--keep -2"), HasSubstr("--keep"));
  EXPECT_THAT(flag_refusal("--shuffle-buffer 0"), HasSubstr("--shuffle-buffer"));
  for (const char* lr : {"inf", "nan", "-1", "0", "-inf"}) {
    EXPECT_THAT(flag_refusal(std::string("--lr ") + lr), HasSubstr("--lr must be finite and positive")) << lr;
  }
  EXPECT_THAT(flag_refusal("--optimizer sgd --momentum 1.5"), HasSubstr("[0, 1]"));
  for (const char* wd : {"nan", "-0.01", "inf"}) {
    EXPECT_THAT(flag_refusal(std::string("--weight-decay ") + wd), HasSubstr("--weight-decay must be finite and non-negative"))
        << wd;
  }
  EXPECT_EQ(flag_refusal("--weight-decay 0.004"), "");
}

// A run stored before --weight-decay existed has none (Keras's None), as it trained.
TEST(RunConfigTest, AStoredRunWithoutWeightDecayHasNone) {
  json stored = stored_default();
  stored.erase("weight_decay");
  EXPECT_EQ(RunConfig::from_json(stored).weight_decay, 0.0f);
  stored.erase("label_smoothing");  // and before --label-smoothing: none
  EXPECT_EQ(RunConfig::from_json(stored).label_smoothing, 0.0f);
}

// Pod slices: the stored device keeps its hosts; a run saved before hosts existed is one host; stored
// hosts are checked like the rest (within 1..4096, dividing the cores).
TEST(RunConfigTest, StoredHostsRoundTripDefaultToOneAndAreValidated) {
  RunConfig c;
  c.device = DeviceSpec::preset("v3-32");
  const json stored = c.to_json();
  EXPECT_EQ(stored["device"]["hosts"], 4);
  EXPECT_EQ(RunConfig::from_json(stored).device.hosts, 4);
  EXPECT_EQ(RunConfig::from_json(stored).device.cores, 32);
  json old = stored_default();
  old["device"].erase("hosts");
  EXPECT_EQ(refusal(old), "");
  EXPECT_EQ(RunConfig::from_json(old).device.hosts, 1);
  json bad = stored;
  bad["device"]["hosts"] = 5;
  EXPECT_THAT(refusal(bad), HasSubstr("hosts that work: 1, 2, 4, 8, 16, 32"));
  bad["device"]["hosts"] = 100000;
  EXPECT_THAT(refusal(bad), HasSubstr("4096"));
  bad["device"]["hosts"] = "4";
  EXPECT_THAT(refusal(bad), HasSubstr("integer"));
}

TEST(RunConfigTest, HostsFlagMakesACustomSlice) {
  const po::variables_map vm = flags("--hosts 4 --cores 16 --hbm-per-core 1GiB");
  RunConfig c;
  apply_device_options(vm, c);
  EXPECT_EQ(c.device.name, "custom");
  EXPECT_EQ(c.device.hosts, 4);
  EXPECT_EQ(c.device.cores_per_host(), 4);
  EXPECT_THAT(flag_refusal("--hosts 3 --cores 16 --hbm-per-core 1GiB"), HasSubstr("hosts that work: 1, 2, 4, 8, 16"));
  EXPECT_THAT(flag_refusal("--hosts 4 --device v3-32"), HasSubstr("not both"));
  EXPECT_THAT(flag_refusal("--hosts 4"), HasSubstr("--cores N and --hbm-per-core SIZE"));
  EXPECT_EQ(flag_refusal("--device v4-32 --batch-per-core 2"), "");
}

TEST(RunConfigTest, HbmPerCoreZeroIsAnErrorAndUnboundedIsSaidSo) {
  EXPECT_THAT(flag_refusal("--cores 2 --hbm-per-core 0"), HasSubstr("--hbm-per-core unbounded"));
  EXPECT_THAT(flag_refusal("--cores 2 --hbm-per-core 0GiB"), HasSubstr("must be positive"));
  EXPECT_THAT(flag_refusal("--cores 2 --hbm-per-core 2PiB"), HasSubstr("unknown size unit"));
  EXPECT_THAT(flag_refusal("--cores 2 --hbm-per-core 2048TiB"), HasSubstr("2^50"));
  const po::variables_map vm = flags("--cores 2 --hbm-per-core unbounded");
  RunConfig c;
  apply_device_options(vm, c);
  EXPECT_FALSE(c.device.has_budget());
  EXPECT_EQ(c.device.cores, 2);
  EXPECT_EQ(parse_hbm_per_core("512MiB"), int64_t{512} << 20);
}

TEST(RunConfigTest, AugmentIsStoredCheckedAndNeedsAnImageModel) {
  RunConfig c;
  c.model = "resnet18";
  c.input_shape = {32, 32, 1};
  c.augment = "flip,crop:4";
  EXPECT_EQ(RunConfig::from_json(c.to_json()).augment, "flip,crop:4");
  json stored = c.to_json();
  stored.erase("augment");  // a run from before --augment
  EXPECT_EQ(RunConfig::from_json(stored).augment, "");
  stored["augment"] = "crop:99";
  EXPECT_THAT(refusal(stored), HasSubstr("--augment: bad augmentation step 'crop:99'"));
  stored["augment"] = std::string(300, 'f');
  EXPECT_THAT(refusal(stored), HasSubstr("256"));
  EXPECT_EQ(flag_refusal("--model resnet18 --input-shape 32x32x1 --augment flip,crop:4,translate:0.1,zoom:0.2:0.1"), "");
  EXPECT_THAT(flag_refusal("--model mlp --augment flip"), HasSubstr("--augment needs an image model"));
  EXPECT_THAT(flag_refusal("--model resnet18 --input-shape 32x32x1 --augment flip;crop"), HasSubstr("unknown step"));
}

// --augment changes the training examples only: the shuffle is the same, every image is augmented, and
// the evaluation and validation pipelines give exactly what they give without it.
TEST(RunConfigTest, AugmentChangesTrainingImagesAndNothingElse) {
  RunConfig plain;
  plain.model = "resnet18";
  plain.input_shape = {32, 32, 1};
  plain.device = DeviceSpec::preset("cpu");
  plain.batch_per_core = 32;
  plain.shuffle_buffer = 1000;
  plain.validation_split = 0.1;
  RunConfig augmented = plain;
  augmented.augment = "flip,crop:4,translate:0.1,zoom:0.1";
  auto first_batches = [](const Dataset& ds, int n) {
    Iterator it = ds.make_iterator(0);
    std::vector<Element> out;
    for (int i = 0; i < n; ++i) out.push_back(*it.next());
    return out;
  };
  const std::vector<Element> a = first_batches(training_dataset(plain), 2);
  const std::vector<Element> b = first_batches(training_dataset(augmented), 2);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i][0].shape(), b[i][0].shape());
    EXPECT_EQ(a[i][1].to_vector(), b[i][1].to_vector()) << "the labels, in the same shuffled order";
    const std::vector<float> x = a[i][0].to_vector(), y = b[i][0].to_vector();
    int same_images = 0;
    const size_t pixels = 32 * 32;
    for (size_t k = 0; k < x.size() / pixels; ++k) {
      same_images += std::equal(x.begin() + static_cast<int64_t>(k * pixels), x.begin() + static_cast<int64_t>((k + 1) * pixels),
                                y.begin() + static_cast<int64_t>(k * pixels));
    }
    EXPECT_EQ(same_images, 0);
  }
  for (const auto& [p, q] : {std::pair{first_batches(evaluation_dataset(plain, "test"), 3),
                                       first_batches(evaluation_dataset(augmented, "test"), 3)},
                             std::pair{first_batches(*validation_dataset(plain), 3),
                                       first_batches(*validation_dataset(augmented), 3)}}) {
    ASSERT_EQ(p.size(), q.size());
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(p[i][0].to_vector(), q[i][0].to_vector());
      EXPECT_EQ(p[i][1].to_vector(), q[i][1].to_vector());
    }
  }
}

}  // namespace
}  // namespace keel::cli
