// The layout shows the architecture: every `#include "..."` of the library points down the stack.
//
//   framework/: core -> device -> autodiff -> ops -> layers -> train -> data -> model -> checkpoint
//   (a folder includes its own and lower folders only); datasets/ and models/ build on framework/
//   (never the reverse, never each other); tools/ sits on top of everything.
//
// The test reads every source and header under framework/, datasets/, models/ and tools/, so a new
// file is checked without being listed here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#ifndef KEEL_SOURCE_DIR
#error "KEEL_SOURCE_DIR must name the source tree"
#endif

namespace keel {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kFrameworkOrder = {"core", "device", "autodiff", "ops", "layers",
                                                  "train", "data", "model", "checkpoint"};

// Known edges that point up, each with the reason it is still there (none today: core's tensors reach
// the device ledger through core/storage_charging.h). The test fails when one of them disappears, so
// that the list shrinks with the code.
const std::set<std::pair<std::string, std::string>> kKnownUpward = {};

// "framework/<folder>/..." -> rank in kFrameworkOrder; -1 for other paths. A file directly in
// framework/ (the umbrella keel.h) sits on top of the whole stack.
int framework_rank(const std::string& path) {
  if (path.rfind("framework/", 0) != 0) return -1;
  if (path.find('/', 10) == std::string::npos) return static_cast<int>(kFrameworkOrder.size());
  const std::string folder = path.substr(10, path.find('/', 10) - 10);
  for (size_t i = 0; i < kFrameworkOrder.size(); ++i) {
    if (kFrameworkOrder[i] == folder) return static_cast<int>(i);
  }
  return -2;  // a framework folder this test does not know
}

std::string top_of(const std::string& path) { return path.substr(0, path.find('/')); }

// Empty if `from` may include `to`, else why not.
std::string violation(const std::string& from, const std::string& to) {
  const std::string from_top = top_of(from), to_top = top_of(to);
  if (from_top == "tools") return "";
  if (from_top == "framework") {
    const int a = framework_rank(from), b = framework_rank(to);
    if (a == -2) return "framework/ folder of " + from + " is not in the stack's order";
    if (to_top != "framework") return "framework/ must not include " + to_top + "/";
    if (b == -2) return "framework/ folder of " + to + " is not in the stack's order";
    if (b > a) return from + " must not include " + to + " (up the stack)";
    return "";
  }
  if (to_top == "framework" || to_top == from_top) return "";
  return from_top + "/ must not include " + to_top + "/";
}

TEST(IncludeDirectionTest, EveryIncludePointsDownTheStack) {
  const fs::path root(KEEL_SOURCE_DIR);
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::set<std::pair<std::string, std::string>> upward_seen;
  int files = 0;
  for (const std::string top : {"framework", "datasets", "models", "tools"}) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cc")) continue;
      ++files;
      const std::string from = fs::relative(e.path(), root).generic_string();
      std::ifstream in(e.path());
      std::string line;
      std::smatch m;
      while (std::getline(in, line)) {
        if (!std::regex_search(line, m, include_line)) continue;
        const std::string to = m[1];
        if (to.find('/') == std::string::npos) continue;  // generated or same-folder headers
        const std::string why = violation(from, to);
        if (why.empty()) continue;
        if (kKnownUpward.count({from, to})) {
          upward_seen.insert({from, to});
          continue;
        }
        ADD_FAILURE() << from << " includes " << to << ": " << why;
      }
    }
  }
  EXPECT_GT(files, 100) << "the walk found the sources";
  for (const auto& edge : kKnownUpward) {
    EXPECT_TRUE(upward_seen.count(edge)) << edge.first << " no longer includes " << edge.second
                                         << ": remove it from kKnownUpward";
  }
}

TEST(IncludeDirectionTest, TheRuleRejectsEachKindOfUpwardInclude) {
  EXPECT_EQ(violation("framework/model/model.h", "framework/train/losses.h"), "");
  EXPECT_EQ(violation("framework/model/model.h", "framework/data/dataset.h"), "");
  EXPECT_NE(violation("framework/model/model.h", "datasets/idx.h"), "");
  EXPECT_NE(violation("framework/train/callbacks.h", "framework/model/model.h"), "");
  EXPECT_NE(violation("framework/core/tensor.cc", "framework/device/ledger.h"), "");
  EXPECT_NE(violation("framework/newthing/x.h", "framework/core/tensor.h"), "");
  EXPECT_NE(violation("models/zoo.h", "datasets/idx.h"), "");
  EXPECT_NE(violation("datasets/idx.h", "tools/cli/commands.h"), "");
  EXPECT_EQ(violation("datasets/idx.cc", "framework/data/data_error.h"), "");
  EXPECT_EQ(violation("tools/cli/run_config.cc", "models/zoo.h"), "");
  EXPECT_EQ(violation("framework/keel.h", "framework/checkpoint/checkpoint.h"), "");
  EXPECT_NE(violation("framework/checkpoint/checkpoint.h", "framework/keel.h"), "");
}

}  // namespace
}  // namespace keel
