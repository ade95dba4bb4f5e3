// Fuzzes load_checkpoint (framework/checkpoint/checkpoint.h) with valid HDF5 files of hostile content:
// each input is a short program of edits applied, through the HDF5 API, to a fresh checkpoint of the
// fixture's model — delete an object or attribute, replace a dataset by one of another type, shape
// (including huge sparse chunked shapes) or by a group, rewrite layer_names / weight_names lists,
// rewrite /keel/train_state with arbitrary text. This reaches every check in checkpoint.cc and
// h5_file.cc while libhdf5 only ever parses files it wrote itself, so the run is deterministic
// (checkpoint_bytes_fuzz feeds raw bytes to libhdf5 instead; see there why it is not in CI).
//
// Contract under test: the edited file loads or throws CheckpointError — never a crash, a leak,
// another exception type (std::bad_alloc from a size taken on trust included) — and a throwing load
// leaves the model as it was.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/checkpoint/h5_file.h"
#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Closes an HDF5 id of any kind at scope exit.
class Handle {
 public:
  explicit Handle(hid_t id = H5I_INVALID_HID) : id_(id) {}
  ~Handle() {
    if (id_ >= 0) H5Idec_ref(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  void reset(hid_t id) {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = id;
  }

 private:
  hid_t id_;
};

// A typed value to store as a dataset or attribute: its file type, dataspace and data.
struct Value {
  Handle type;
  Handle space;
  bool huge = false;                // dims far beyond the data: chunked, never written
  std::vector<uint8_t> bytes;       // fixed-size elements
  std::vector<std::string> strings; // variable-length string elements
  std::vector<const char*> pointers;
  bool vlen = false;
  enum class Checksum { kValid, kNone, kWrong } checksum = Checksum::kValid;  // for a dataset
  const void* data() const { return vlen ? static_cast<const void*>(pointers.data()) : bytes.data(); }
};

hid_t make_type(FuzzedDataProvider& in, bool* vlen) {
  *vlen = false;
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: return H5Tcopy(H5T_IEEE_F32LE);
    case 1: return H5Tcopy(H5T_IEEE_F64LE);
    case 2: return H5Tcopy(H5T_STD_I8LE);
    case 3: return H5Tcopy(H5T_STD_U64LE);
    case 4: return H5Tcopy(H5T_STD_I64LE);
    case 5: return H5Tcopy(H5T_STD_I32BE);
    case 6: return H5Tcopy(H5T_IEEE_F32BE);
    case 7: {
      *vlen = true;
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      H5Tset_cset(t, in.ConsumeBool() ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
      return t;
    }
    default: {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, in.ConsumeIntegralInRange<size_t>(1, 64));
      H5Tset_cset(t, in.ConsumeBool() ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
      H5Tset_strpad(t, static_cast<H5T_str_t>(in.ConsumeIntegralInRange<int>(0, 2)));
      return t;
    }
  }
}

// `for_dataset`: also offers huge chunked shapes, which only datasets can have.
void make_value(FuzzedDataProvider& in, bool for_dataset, Value* v) {
  v->type.reset(make_type(in, &v->vlen));
  const int checksum = in.ConsumeIntegralInRange<int>(0, 7);
  v->checksum = checksum == 0 ? Value::Checksum::kNone : checksum == 1 ? Value::Checksum::kWrong : Value::Checksum::kValid;
  hsize_t dims[3] = {1, 1, 1};
  int rank = 0;
  switch (in.ConsumeIntegralInRange<int>(0, for_dataset ? 3 : 2)) {
    case 0: v->space.reset(H5Screate(H5S_SCALAR)); break;
    case 1: v->space.reset(H5Screate(H5S_NULL)); break;
    case 2:
      rank = in.ConsumeIntegralInRange<int>(1, 3);
      for (int i = 0; i < rank; ++i) dims[i] = in.ConsumeIntegralInRange<hsize_t>(0, 5);
      v->space.reset(H5Screate_simple(rank, dims, nullptr));
      break;
    default:
      rank = in.ConsumeIntegralInRange<int>(1, 2);
      for (int i = 0; i < rank; ++i) dims[i] = in.ConsumeIntegralInRange<hsize_t>(1, hsize_t{1} << 40);
      v->space.reset(H5Screate_simple(rank, dims, nullptr));
      v->huge = true;
      return;
  }
  const hssize_t n = H5Sget_simple_extent_npoints(v->space.get());
  if (n <= 0) return;
  if (v->vlen) {
    for (hssize_t i = 0; i < n; ++i) v->strings.push_back(in.ConsumeRandomLengthString(256));
    for (const std::string& s : v->strings) v->pointers.push_back(s.c_str());
  } else {
    v->bytes = in.ConsumeBytes<uint8_t>(static_cast<size_t>(n) * H5Tget_size(v->type.get()));
    v->bytes.resize(static_cast<size_t>(n) * H5Tget_size(v->type.get()));
  }
}

using Checksum = Value::Checksum;

void replace_dataset(hid_t file, const std::string& path, const Value& v) {
  if (path != "/" && H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0) H5Ldelete(file, path.c_str(), H5P_DEFAULT);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (v.huge) {
    hsize_t chunk[2] = {4, 4};
    H5Pset_chunk(dcpl.get(), H5Sget_simple_extent_ndims(v.space.get()), chunk);
  }
  Handle ds(H5Dcreate2(file, path.c_str(), v.type.get(), v.space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (ds.ok() && !v.huge && H5Sget_simple_extent_npoints(v.space.get()) > 0)
    H5Dwrite(ds.get(), v.type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  // Mostly with the checksum keel would have written (so that the checks behind it are reached),
  // sometimes none or a wrong one.
  if (ds.ok() && v.checksum != Checksum::kNone) {
    const std::string& first = v.strings.empty() ? std::string() : v.strings.front();
    uint32_t crc = v.vlen ? keel::H5File::crc32(first.data(), first.size()) : keel::H5File::crc32(v.bytes.data(), v.bytes.size());
    if (v.checksum == Checksum::kWrong) crc ^= 1u;
    Handle space(H5Screate(H5S_SCALAR));
    Handle attr(H5Acreate2(ds.get(), "keel_crc32", H5T_STD_U32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (attr.ok()) H5Awrite(attr.get(), H5T_NATIVE_UINT32, &crc);
  }
}

void replace_attr(hid_t file, const std::string& object, const std::string& name, const Value& v) {
  Handle obj(H5Oopen(file, object.c_str(), H5P_DEFAULT));
  if (!obj.ok()) return;
  if (H5Aexists(obj.get(), name.c_str()) > 0) H5Adelete(obj.get(), name.c_str());
  Handle attr(H5Acreate2(obj.get(), name.c_str(), v.type.get(), v.space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (attr.ok() && H5Sget_simple_extent_npoints(v.space.get()) > 0) H5Awrite(attr.get(), v.type.get(), v.data());
}

// A 1-D fixed-length (or, sometimes, variable-length) string list, as Keras writes layer_names.
void write_string_list(FuzzedDataProvider& in, hid_t file, const std::string& object, const std::string& name,
                       const std::vector<std::string>& vocabulary) {
  std::vector<std::string> list(in.ConsumeIntegralInRange<size_t>(0, 6));
  for (std::string& s : list) {
    s = in.ConsumeBool() ? vocabulary[in.ConsumeIntegralInRange<size_t>(0, vocabulary.size() - 1)]
                         : in.ConsumeRandomLengthString(32);
  }
  Value v;
  hsize_t n = list.size();
  v.space.reset(H5Screate_simple(1, &n, nullptr));
  if (in.ConsumeBool()) {
    v.vlen = true;
    v.type.reset(H5Tcopy(H5T_C_S1));
    H5Tset_size(v.type.get(), H5T_VARIABLE);
    v.strings = list;
    for (const std::string& s : v.strings) v.pointers.push_back(s.c_str());
  } else {
    size_t width = 1;
    for (const std::string& s : list) width = std::max(width, s.size());
    v.type.reset(H5Tcopy(H5T_C_S1));
    H5Tset_size(v.type.get(), width);
    H5Tset_strpad(v.type.get(), H5T_STR_NULLPAD);
    v.bytes.assign(list.size() * width, 0);
    for (size_t i = 0; i < list.size(); ++i) std::copy(list[i].begin(), list[i].end(), v.bytes.begin() + i * width);
  }
  replace_attr(file, object, name, v);
}

herr_t collect_path(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}

void apply_edits(FuzzedDataProvider& in, hid_t file) {
  std::vector<std::string> paths = {"/"};
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_path, &paths);
  // Names a list may hold: every path's tail after one or two components, as weight_names entries
  // are relative to their layer's group ("dense/kernel:0" under /model_weights/dense).
  std::vector<std::string> vocabulary = {"Adam/iterations:0", "SGD/iterations:0"};
  for (const std::string& p : paths) {
    size_t cut = 0;
    for (int i = 0; i < 3 && (cut = p.find('/', cut + 1)) != std::string::npos; ++i) vocabulary.push_back(p.substr(cut + 1));
    vocabulary.push_back(p.substr(p.rfind('/') + 1));
  }
  const char* attr_names[] = {"layer_names", "weight_names", "keel_format_version", "backend", "model_config"};
  const int edits = in.ConsumeIntegralInRange<int>(0, 4);
  for (int e = 0; e < edits; ++e) {
    const int op = in.ConsumeIntegralInRange<int>(0, 6);
    const std::string target = paths[in.ConsumeIntegralInRange<size_t>(0, paths.size() - 1)];
    const std::string attr = in.ConsumeBool() ? attr_names[in.ConsumeIntegralInRange<int>(0, 4)]
                                              : in.ConsumeRandomLengthString(16);
    switch (op) {
      case 0:
        if (target != "/") H5Ldelete(file, target.c_str(), H5P_DEFAULT);
        break;
      case 1: {
        Value v;
        make_value(in, true, &v);
        replace_dataset(file, in.ConsumeBool() || target == "/" ? target + "/" + attr : target, v);
        break;
      }
      case 2: {
        Value v;
        make_value(in, false, &v);
        replace_attr(file, target, attr, v);
        break;
      }
      case 3: {
        Handle obj(H5Oopen(file, target.c_str(), H5P_DEFAULT));
        if (obj.ok()) H5Adelete(obj.get(), attr.c_str());
        break;
      }
      case 4: {
        if (target != "/") H5Ldelete(file, target.c_str(), H5P_DEFAULT);
        Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
        H5Pset_create_intermediate_group(lcpl.get(), 1);
        Handle g(H5Gcreate2(file, target.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
        break;
      }
      case 5: {
        Value v;
        if (in.ConsumeBool()) {
          make_value(in, true, &v);
          replace_dataset(file, "/keel/train_state", v);
          break;
        }
        v.vlen = true;
        v.type.reset(H5Tcopy(H5T_C_S1));
        H5Tset_size(v.type.get(), H5T_VARIABLE);
        H5Tset_cset(v.type.get(), H5T_CSET_UTF8);
        v.space.reset(H5Screate(H5S_SCALAR));
        v.strings = {in.ConsumeRandomLengthString(1024)};
        v.pointers = {v.strings[0].c_str()};
        replace_dataset(file, "/keel/train_state", v);
        break;
      }
      default:
        write_string_list(in, file, target, in.ConsumeBool() ? "layer_names" : "weight_names", vocabulary);
        break;
    }
  }
}

}  // namespace

// The fixture's checkpoint as keel writes it, made once: rewriting these bytes is much cheaper than
// saving afresh for every input.
std::string& pristine_checkpoint() {
  static std::string* bytes = new std::string;
  return *bytes;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the edits fail often, by design; keep stderr quiet
  keel::fuzz::ScratchFile file("keel-checkpoint-fuzz-init");
  keel::fuzz::CheckpointFixture::get().save(file.path());
  pristine_checkpoint() = keel::fuzz::read_file(file.path());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static keel::fuzz::ScratchFile file("keel-checkpoint-fuzz");
  keel::fuzz::CheckpointFixture& fixture = keel::fuzz::CheckpointFixture::get();
  const std::string& pristine = pristine_checkpoint();
  file.write(reinterpret_cast<const uint8_t*>(pristine.data()), pristine.size());
  {
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
    H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);  // also closes whatever an edit left open
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
    const hid_t f = H5Fopen(file.path().c_str(), H5F_ACC_RDWR, fapl.get());
    if (f < 0) {
      std::fprintf(stderr, "checkpoint_fuzz: cannot reopen the checkpoint keel just wrote\n");
      std::abort();
    }
    FuzzedDataProvider in(data, size);
    apply_edits(in, f);
    H5Fclose(f);
  }
  fixture.load_and_check(file.path());
  return 0;
}
