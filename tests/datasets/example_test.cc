#include "datasets/example.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data_error.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

constexpr FeatureType kString = FeatureType::kString;
constexpr FeatureType kFloat32 = FeatureType::kFloat32;
constexpr FeatureType kInt64 = FeatureType::kInt64;

std::string sample() {
  return ExampleBuilder()
      .add_bytes("image", std::string("\x89PNG\0\xff", 6))
      .add_int64("label", {7})
      .add_int64("box", {-3, 0, 16777216})
      .add_float("scores", {0.5f, -1.25f, 3.1f})
      .add_float("empty", {})
      .add_bytes("unused", "ignored by specs that do not name it")
      .serialize();
}

// The DataError parse_single_example throws; fails the test if there is none.
std::string parse_error(const std::string& serialized, const FeatureSpec& spec) {
  try {
    parse_single_example(serialized, spec);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError";
  return "";
}

std::string spec_error(const FeatureSpec& spec) {
  try {
    parse_single_example(sample(), spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no std::invalid_argument";
  return "";
}

TEST(ExampleTest, BuilderParseRoundTrip) {
  const auto out = parse_single_example(sample(), {
                                                      {"image", FixedLenFeature{{}, kString}},
                                                      {"label", FixedLenFeature{{1}, kInt64}},
                                                      {"label_scalar_alias", VarLenFeature{kInt64}},
                                                      {"box", FixedLenFeature{{3}, kInt64}},
                                                      {"scores", FixedLenFeature{{3}, kFloat32}},
                                                      {"scores_var", VarLenFeature{kFloat32}},
                                                  });
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(out.at("image").is_string());
  EXPECT_EQ(out.at("image").string_value(), std::string("\x89PNG\0\xff", 6));
  EXPECT_EQ(out.at("label").shape(), (Shape{1}));
  EXPECT_EQ(out.at("label").to_vector(), std::vector<float>{7.0f});
  EXPECT_EQ(out.at("box").shape(), (Shape{3}));
  EXPECT_EQ(out.at("box").to_vector(), (std::vector<float>{-3.0f, 0.0f, 16777216.0f}));
  EXPECT_EQ(out.at("scores").to_vector(), (std::vector<float>{0.5f, -1.25f, 3.1f}));
  // Missing VarLen features are empty, as in tf.
  EXPECT_EQ(out.at("label_scalar_alias").shape(), (Shape{0}));
  EXPECT_EQ(out.at("scores_var").shape(), (Shape{0}));
}

TEST(ExampleTest, FixedLenShapes) {
  const std::string ex = ExampleBuilder().add_float("m", {1, 2, 3, 4, 5, 6}).add_int64("s", {42}).serialize();
  const auto out = parse_single_example(ex, {{"m", FixedLenFeature{{2, 3}, kFloat32}}, {"s", FixedLenFeature{{}, kInt64}}});
  EXPECT_EQ(out.at("m").shape(), (Shape{2, 3}));
  EXPECT_EQ(out.at("m").to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out.at("s").shape(), Shape{});
  EXPECT_EQ(out.at("s").item(), 42.0f);
}

TEST(ExampleTest, VarLenGivesAllValues) {
  const auto out = parse_single_example(sample(), {{"scores", VarLenFeature{kFloat32}},
                                                   {"box", VarLenFeature{kInt64}},
                                                   {"empty", VarLenFeature{kFloat32}}});
  EXPECT_EQ(out.at("scores").shape(), (Shape{3}));
  EXPECT_EQ(out.at("scores").to_vector(), (std::vector<float>{0.5f, -1.25f, 3.1f}));
  EXPECT_EQ(out.at("box").to_vector(), (std::vector<float>{-3.0f, 0.0f, 16777216.0f}));
  EXPECT_EQ(out.at("empty").shape(), (Shape{0}));
}

TEST(ExampleTest, DefaultsFillMissingFeatures) {
  const auto out = parse_single_example(
      sample(), {{"weight", FixedLenFeature{{}, kFloat32, std::vector<float>{1.5f}}},
                 {"pair", FixedLenFeature{{2}, kInt64, std::vector<float>{-1, 1}}},
                 {"caption", FixedLenFeature{{}, kString, std::nullopt, std::string("none")}},
                 // A default is not used when the feature is there.
                 {"label", FixedLenFeature{{1}, kInt64, std::vector<float>{-5}}}});
  EXPECT_EQ(out.at("weight").item(), 1.5f);
  EXPECT_EQ(out.at("pair").to_vector(), (std::vector<float>{-1, 1}));
  EXPECT_EQ(out.at("caption").string_value(), "none");
  EXPECT_EQ(out.at("label").to_vector(), std::vector<float>{7});
}

TEST(ExampleTest, SerializeIsDeterministic) {
  const std::string a = ExampleBuilder().add_int64("b", {1}).add_float("a", {2}).add_bytes("c", "x").serialize();
  const std::string b = ExampleBuilder().add_bytes("c", "x").add_float("a", {2}).add_int64("b", {1}).serialize();
  EXPECT_EQ(a, b);
  EXPECT_THROW(ExampleBuilder().add_int64("x", {1}).add_float("x", {1}), std::invalid_argument);
}

TEST(ExampleTest, MultipleBytesValues) {
  const std::string ex = ExampleBuilder().add_bytes("names", std::vector<std::string>{"a", "b"}).serialize();
  EXPECT_EQ(parse_error(ex, {{"names", FixedLenFeature{{}, kString}}}),
            "feature 'names' has 2 values but the spec's shape () needs exactly 1");
}

TEST(ExampleTest, NotAnExample) {
  for (const std::string& bad : {std::string("\x0a\x05" "ab", 4), std::string("\xff\xff\xff"), std::string("\x0f")}) {
    EXPECT_THAT(parse_error(bad, {{"label", FixedLenFeature{{1}, kInt64}}}),
                HasSubstr("not a valid tf.train.Example"));
  }
  // The empty message is a valid Example with no features.
  EXPECT_THAT(parse_error("", {{"label", FixedLenFeature{{1}, kInt64}}}), HasSubstr("is missing"));
}

TEST(ExampleTest, MissingFeatureWithoutDefault) {
  EXPECT_EQ(parse_error(sample(), {{"weight", FixedLenFeature{{}, kFloat32}}}),
            "feature 'weight' is missing and the spec gives it no default_value");
  EXPECT_EQ(parse_error(sample(), {{"caption", FixedLenFeature{{}, kString}}}),
            "feature 'caption' is missing and the spec gives it no default_string");
}

TEST(ExampleTest, WrongKind) {
  EXPECT_EQ(parse_error(sample(), {{"image", FixedLenFeature{{1}, kInt64}}}),
            "feature 'image' holds a bytes_list but the spec asks for int64");
  EXPECT_EQ(parse_error(sample(), {{"label", FixedLenFeature{{}, kString}}}),
            "feature 'label' holds an int64_list but the spec asks for string");
  EXPECT_EQ(parse_error(sample(), {{"scores", VarLenFeature{kInt64}}}),
            "feature 'scores' holds a float_list but the spec asks for int64");
  // int64 is not silently read as float32 either: the spec says which list to expect.
  EXPECT_EQ(parse_error(sample(), {{"label", FixedLenFeature{{1}, kFloat32}}}),
            "feature 'label' holds an int64_list but the spec asks for float32");
}

TEST(ExampleTest, WrongNumberOfValues) {
  EXPECT_EQ(parse_error(sample(), {{"scores", FixedLenFeature{{1}, kFloat32}}}),
            "feature 'scores' has 3 values but the spec's shape (1,) needs 1");
  EXPECT_EQ(parse_error(sample(), {{"label", FixedLenFeature{{3}, kInt64}}}),
            "feature 'label' has 1 values but the spec's shape (3,) needs 3");
  EXPECT_EQ(parse_error(sample(), {{"empty", FixedLenFeature{{}, kFloat32}}}),
            "feature 'empty' has 0 values but the spec's shape () needs 1");
}

TEST(ExampleTest, Int64BeyondFloat32sExactRange) {
  const FeatureSpec spec = {{"id", VarLenFeature{kInt64}}};
  const auto ok = parse_single_example(ExampleBuilder().add_int64("id", {16777216, -16777216}).serialize(), spec);
  EXPECT_EQ(ok.at("id").to_vector(), (std::vector<float>{16777216.0f, -16777216.0f}));
  for (int64_t bad : {int64_t{16777217}, int64_t{-16777217}, int64_t{1} << 40}) {
    const std::string message = parse_error(ExampleBuilder().add_int64("id", {0, bad}).serialize(), spec);
    EXPECT_THAT(message, HasSubstr("feature 'id' holds int64 value " + std::to_string(bad) + " (value 1)"));
    EXPECT_THAT(message, HasSubstr("2^24"));
  }
}

TEST(ExampleTest, BadSpecsAreInvalidArguments) {
  EXPECT_THAT(spec_error({{"names", VarLenFeature{kString}}}), HasSubstr("feature 'names' is a VarLenFeature of strings"));
  EXPECT_THAT(spec_error({{"image", FixedLenFeature{{1}, kString}}}), HasSubstr("string features must have shape ()"));
  EXPECT_THAT(spec_error({{"x", FixedLenFeature{{3}, kFloat32, std::vector<float>{1, 2}}}}),
              HasSubstr("feature 'x' has a default_value of 2 values but its shape (3,) needs 3"));
  EXPECT_THAT(spec_error({{"x", FixedLenFeature{{}, kFloat32, std::nullopt, std::string("a")}}}),
              HasSubstr("default_value, not default_string"));
  EXPECT_THAT(spec_error({{"x", FixedLenFeature{{}, kString, std::vector<float>{1}}}}),
              HasSubstr("default_string, not default_value"));
  EXPECT_THAT(spec_error({{"x", FixedLenFeature{{-1}, kFloat32}}}), HasSubstr("every dimension >= 0"));
  EXPECT_NO_THROW(validate_feature_spec({{"x", FixedLenFeature{{2}, kFloat32}}, {"y", VarLenFeature{kInt64}}}));
}

}  // namespace
}  // namespace keel
