#include "datasets/example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <cmath>
#include <stdexcept>

#include "framework/data/data_error.h"
#include "datasets/example.pb.h"
#include "framework/device/context.h"

namespace keel {
namespace {

// float32 holds every integer in [-2^24, 2^24] exactly, and not all beyond.
constexpr int64_t kMaxExactInt = int64_t{1} << 24;

// With its article, for "holds a bytes_list".
const char* kind_name(proto::Feature::KindCase kind) {
  switch (kind) {
    case proto::Feature::kBytesList: return "a bytes_list";
    case proto::Feature::kFloatList: return "a float_list";
    case proto::Feature::kInt64List: return "an int64_list";
    case proto::Feature::KIND_NOT_SET: break;
  }
  return "no value list";
}

proto::Feature::KindCase kind_for(FeatureType type) {
  switch (type) {
    case FeatureType::kString: return proto::Feature::kBytesList;
    case FeatureType::kFloat32: return proto::Feature::kFloatList;
    case FeatureType::kInt64: return proto::Feature::kInt64List;
  }
  return proto::Feature::KIND_NOT_SET;
}

std::string quoted(const std::string& name) { return "feature '" + name + "'"; }

[[noreturn]] void bad_spec(const std::string& name, const std::string& what) {
  throw std::invalid_argument("feature spec: " + quoted(name) + " " + what);
}

// The feature's numeric values as float32; the feature's kind has been checked to match `type`.
std::vector<float> numeric_values(const std::string& name, const proto::Feature& feature) {
  if (feature.kind_case() == proto::Feature::kFloatList) {
    const auto& v = feature.float_list().value();
    return std::vector<float>(v.begin(), v.end());
  }
  std::vector<float> out;
  if (feature.kind_case() != proto::Feature::kInt64List) return out;  // KIND_NOT_SET: no values
  const auto& v = feature.int64_list().value();
  out.reserve(static_cast<size_t>(v.size()));
  for (int i = 0; i < v.size(); ++i) {
    const int64_t x = v.Get(i);
    if (x > kMaxExactInt || x < -kMaxExactInt) {
      throw DataError(quoted(name) + " holds int64 value " + std::to_string(x) + " (value " + std::to_string(i) +
                      "), beyond +-2^24 = 16777216, the range float32 holds exactly; keel tensors are float32, so "
                      "store such values as a float_list or bytes_list, or re-map them");
    }
    out.push_back(static_cast<float>(x));
  }
  return out;
}

// The feature's kind must be the spec's; a feature with no list set counts as an empty list of any kind.
void check_kind(const std::string& name, const proto::Feature& feature, FeatureType type) {
  const auto kind = feature.kind_case();
  if (kind == proto::Feature::KIND_NOT_SET || kind == kind_for(type)) return;
  throw DataError(quoted(name) + " holds " + kind_name(kind) + " but the spec asks for " + feature_type_name(type));
}

Tensor parse_fixed(const std::string& name, const proto::Feature* feature, const FixedLenFeature& spec) {
  const int64_t want = num_elements(spec.shape);
  if (spec.dtype == FeatureType::kString) {
    if (feature == nullptr) {
      if (!spec.default_string) throw DataError(quoted(name) + " is missing and the spec gives it no default_string");
      return Tensor::from_string(*spec.default_string);
    }
    check_kind(name, *feature, spec.dtype);
    const int n = feature->kind_case() == proto::Feature::kBytesList ? feature->bytes_list().value_size() : 0;
    if (n != 1) {
      throw DataError(quoted(name) + " has " + std::to_string(n) + " values but the spec's shape () needs exactly 1");
    }
    return Tensor::from_string(feature->bytes_list().value(0));
  }
  if (feature == nullptr) {
    if (!spec.default_value) throw DataError(quoted(name) + " is missing and the spec gives it no default_value");
    return Tensor::from_vector(spec.shape, *spec.default_value);
  }
  check_kind(name, *feature, spec.dtype);
  std::vector<float> values = numeric_values(name, *feature);
  if (static_cast<int64_t>(values.size()) != want) {
    throw DataError(quoted(name) + " has " + std::to_string(values.size()) + " values but the spec's shape " +
                    shape_string(spec.shape) + " needs " + std::to_string(want));
  }
  return Tensor::from_vector(spec.shape, values);
}

Tensor parse_var(const std::string& name, const proto::Feature* feature, const VarLenFeature& spec) {
  if (feature == nullptr) return Tensor::from_vector(Shape{0}, std::vector<float>{});
  check_kind(name, *feature, spec.dtype);
  std::vector<float> values = numeric_values(name, *feature);
  return Tensor::from_vector(Shape{static_cast<int64_t>(values.size())}, values);
}

}  // namespace

const char* feature_type_name(FeatureType type) {
  switch (type) {
    case FeatureType::kString: return "string";
    case FeatureType::kFloat32: return "float32";
    case FeatureType::kInt64: return "int64";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------
// Building

void ExampleBuilder::add(const std::string& name, Feature feature) {
  if (!features_.emplace(name, std::move(feature)).second) {
    throw std::invalid_argument("ExampleBuilder: " + quoted(name) + " added twice");
  }
}

ExampleBuilder& ExampleBuilder::add_bytes(const std::string& name, std::string value) {
  return add_bytes(name, std::vector<std::string>{std::move(value)});
}

ExampleBuilder& ExampleBuilder::add_bytes(const std::string& name, std::vector<std::string> values) {
  add(name, Feature{Feature::Kind::kBytes, std::move(values), {}, {}});
  return *this;
}

ExampleBuilder& ExampleBuilder::add_int64(const std::string& name, std::vector<int64_t> values) {
  add(name, Feature{Feature::Kind::kInt64, {}, {}, std::move(values)});
  return *this;
}

ExampleBuilder& ExampleBuilder::add_float(const std::string& name, std::vector<float> values) {
  add(name, Feature{Feature::Kind::kFloat, {}, std::move(values), {}});
  return *this;
}

std::string ExampleBuilder::serialize() const {
  proto::Example example;
  auto& map = *example.mutable_features()->mutable_feature();
  for (const auto& [name, f] : features_) {
    proto::Feature& out = map[name];
    switch (f.kind) {
      case Feature::Kind::kBytes:
        out.mutable_bytes_list()->mutable_value()->Assign(f.bytes.begin(), f.bytes.end());
        break;
      case Feature::Kind::kFloat:
        out.mutable_float_list()->mutable_value()->Assign(f.floats.begin(), f.floats.end());
        break;
      case Feature::Kind::kInt64:
        out.mutable_int64_list()->mutable_value()->Assign(f.ints.begin(), f.ints.end());
        break;
    }
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // map entries in key order
    example.SerializeToCodedStream(&coded);
  }
  return bytes;
}

// ---------------------------------------------------------------------------------------------------
// Parsing

void validate_feature_spec(const FeatureSpec& spec) {
  for (const auto& [name, entry] : spec) {
    if (const auto* var = std::get_if<VarLenFeature>(&entry)) {
      if (var->dtype == FeatureType::kString) {
        bad_spec(name, "is a VarLenFeature of strings, which keel does not support (it has no string vectors); "
                       "use FixedLenFeature({}, string) for one string per Example");
      }
      continue;
    }
    const auto& fixed = std::get<FixedLenFeature>(entry);
    for (int64_t d : fixed.shape) {
      if (d < 0) bad_spec(name, "has shape " + shape_string(fixed.shape) + "; FixedLenFeature needs every dimension >= 0");
    }
    if (fixed.dtype == FeatureType::kString) {
      if (!fixed.shape.empty()) {
        bad_spec(name, "is a string FixedLenFeature of shape " + shape_string(fixed.shape) +
                           "; string features must have shape () (one string per Example)");
      }
      if (fixed.default_value) bad_spec(name, "is a string feature: give its default as default_string, not default_value");
    } else {
      if (fixed.default_string) {
        bad_spec(name, std::string("is a ") + feature_type_name(fixed.dtype) +
                           " feature: give its default as default_value, not default_string");
      }
      if (fixed.default_value &&
          static_cast<int64_t>(fixed.default_value->size()) != num_elements(fixed.shape)) {
        bad_spec(name, "has a default_value of " + std::to_string(fixed.default_value->size()) +
                           " values but its shape " + shape_string(fixed.shape) + " needs " +
                           std::to_string(num_elements(fixed.shape)));
      }
    }
  }
}

std::map<std::string, Tensor> parse_single_example(std::string_view serialized, const FeatureSpec& spec) {
  validate_feature_spec(spec);
  proto::Example example;
  if (serialized.size() > static_cast<size_t>(INT_MAX) ||
      !example.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    throw DataError("not a valid tf.train.Example (" + std::to_string(serialized.size()) +
                    " bytes that protobuf cannot parse as one); is this a TFRecord file of Examples?");
  }
  const auto& features = example.features().feature();
  HostScope host;
  std::map<std::string, Tensor> out;
  for (const auto& [name, entry] : spec) {
    const auto it = features.find(name);
    const proto::Feature* feature = it == features.end() ? nullptr : &it->second;
    out.emplace(name, std::holds_alternative<FixedLenFeature>(entry)
                          ? parse_fixed(name, feature, std::get<FixedLenFeature>(entry))
                          : parse_var(name, feature, std::get<VarLenFeature>(entry)));
  }
  return out;
}

}  // namespace keel
