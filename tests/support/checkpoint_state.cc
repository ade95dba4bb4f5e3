#include "tests/support/checkpoint_state.h"

#include "framework/checkpoint/h5_file.h"

namespace keel::testing {

std::map<std::string, std::vector<float>> read_checkpoint_values(const std::string& path) {
  H5File f = H5File::open_read(path);
  std::map<std::string, std::vector<float>> out;
  std::vector<std::string> todo = {"model_weights", "optimizer_weights"};
  while (!todo.empty()) {
    const std::string p = todo.back();
    todo.pop_back();
    if (p.ends_with("/iterations:0")) {
      out[p] = {static_cast<float>(f.read_int64(p))};
      continue;
    }
    bool is_dataset = true;
    Shape shape;
    try {
      shape = f.dataset_shape(p);
    } catch (const CheckpointError&) {
      is_dataset = false;  // a group
    }
    if (is_dataset) {
      std::vector<float>& v = out[p];
      v.resize(static_cast<size_t>(num_elements(shape)));
      f.read_floats(p, shape, v.data());
    } else {
      for (const std::string& c : f.children(p)) todo.push_back(p + "/" + c);
    }
  }
  return out;
}

}  // namespace keel::testing
