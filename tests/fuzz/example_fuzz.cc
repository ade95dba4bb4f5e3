// Fuzzes parse_single_example (datasets/example.h). Input: one byte choosing a feature spec, then the
// serialized tf.train.Example. The specs match the golden Examples (tests/golden/tfrecord): image
// (bytes), label (int64), scores (float list), offsets (int64 list).
// Contract under test: DataError for bad data (std::invalid_argument only for a bad spec, which these
// are not, so it is a finding here); on success, one tensor per spec entry with the spec's shape.
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "framework/data/data_error.h"
#include "datasets/example.h"

namespace {

std::vector<keel::FeatureSpec> make_specs() {
  using keel::FeatureType;
  using keel::FixedLenFeature;
  using keel::VarLenFeature;
  std::vector<keel::FeatureSpec> specs;
  specs.push_back({{"image", FixedLenFeature{{}, FeatureType::kString}},
                   {"label", FixedLenFeature{{}, FeatureType::kInt64}},
                   {"scores", VarLenFeature{FeatureType::kFloat32}},
                   {"offsets", VarLenFeature{FeatureType::kInt64}}});
  specs.push_back({{"image", FixedLenFeature{{}, FeatureType::kString, std::nullopt, std::string("none")}},
                   {"label", FixedLenFeature{{1}, FeatureType::kFloat32, std::vector<float>{-1.0f}}},
                   {"scores", FixedLenFeature{{3}, FeatureType::kFloat32}},
                   {"offsets", FixedLenFeature{{3, 1}, FeatureType::kInt64, std::vector<float>{0, 0, 0}}}});
  specs.push_back({{"label", FixedLenFeature{{}, FeatureType::kFloat32}},
                   {"missing", VarLenFeature{FeatureType::kInt64}},
                   {"scores", FixedLenFeature{{0}, FeatureType::kFloat32, std::vector<float>{}}}});
  for (const keel::FeatureSpec& spec : specs) keel::validate_feature_spec(spec);  // a bad spec here is our bug
  return specs;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // protobuf logs every invalid-UTF-8 map key it rejects; the DataError says the same, once.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<keel::FeatureSpec>* specs = new std::vector<keel::FeatureSpec>(make_specs());
  if (size < 1) return 0;
  const keel::FeatureSpec& spec = (*specs)[data[0] % specs->size()];
  const std::string_view serialized(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const std::map<std::string, keel::Tensor> parsed = keel::parse_single_example(serialized, spec);
    if (parsed.size() != spec.size()) {
      std::fprintf(stderr, "example_fuzz: %zu tensors for a spec of %zu features\n", parsed.size(), spec.size());
      std::abort();
    }
    for (const auto& [name, feature] : spec) {
      const auto* fixed = std::get_if<keel::FixedLenFeature>(&feature);
      const keel::Tensor& t = parsed.at(name);
      if (fixed != nullptr && fixed->dtype != keel::FeatureType::kString && t.shape() != fixed->shape) {
        std::fprintf(stderr, "example_fuzz: feature %s has shape %s, spec says %s\n", name.c_str(),
                     keel::shape_string(t.shape()).c_str(), keel::shape_string(fixed->shape).c_str());
        std::abort();
      }
      if (fixed == nullptr && t.shape().size() != 1) {
        std::fprintf(stderr, "example_fuzz: VarLen feature %s is not 1-D\n", name.c_str());
        std::abort();
      }
    }
  } catch (const keel::DataError&) {
    // The documented outcome for bad data.
  }
  return 0;
}
