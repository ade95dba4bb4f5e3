// The page of `keel memory --report` (tools/cli/memory_html.h): its data block, escaping, and the
// suggestions section that exists only with suggestions.
#include "tools/cli/memory_html.h"

#include <gtest/gtest.h>

namespace keel::cli {
namespace {

MemoryPlan two_core_plan(const std::string& owner) {
  MemoryPlan plan;
  plan.device = DeviceSpec::custom(2, 1 << 20);
  plan.batch_per_core = 4;
  plan.fits = true;
  for (int c = 0; c < 2; ++c) {
    CoreLedger core(c, 0);
    core.record_events(true);
    core.mark("train_step");
    const uint64_t a = core.charge(1000 * (c + 1), Category::activations, owner, {10, 25 * (c + 1)});
    core.charge(64, Category::parameters, "dense/kernel", {4, 4});
    core.release(a);
    plan.timeline.push_back(core.events());
  }
  return plan;
}

std::string data_block(const std::string& html) {
  const std::string open = "id=\"keel-memory-data\">";
  const size_t begin = html.find(open) + open.size();
  return html.substr(begin, html.find("</script>", begin) - begin);
}

TEST(MemoryHtml, DataComesFromTheTimeline) {
  const nlohmann::json d = memory_report_data(two_core_plan("activation:dense"), "mlp", nullptr);
  EXPECT_EQ(d["hbm_bytes_per_core"], 1 << 20);
  ASSERT_EQ(d["per_core"].size(), 2u);
  EXPECT_EQ(d["per_core"][1]["activations"], 2000);
  EXPECT_EQ(d["per_core"][1]["parameters"], 64);
  EXPECT_EQ(d["per_core"][1]["peak"], 2064);
  EXPECT_EQ(d["per_core"][1]["peak_position"], 3);  // after the mark and two charges
  EXPECT_EQ(d["per_core"][1]["largest_at_peak"][0]["owner"], "activation:dense");
  EXPECT_EQ(d["per_core"][1]["largest_at_peak"][0]["shape"], "(10, 50)");
  EXPECT_EQ(d["per_core"][0]["phases"][0]["label"], "train_step");
  EXPECT_EQ(d["per_core"][0]["series"]["activations"], (nlohmann::json{0, 1000, 1000, 0}));
  EXPECT_TRUE(d["suggestions"].is_null());
}

TEST(MemoryHtml, AnOwnerCannotCloseTheDataBlock) {
  const std::string owner = "x</script><script>alert(1)</script>";
  const nlohmann::json d = memory_report_data(two_core_plan(owner), "mlp", nullptr);
  const std::string html = memory_report_html(d);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(data_block(html)), d);
}

TEST(MemoryHtml, SuggestionsOnlyWhenThereAreSome) {
  EXPECT_TRUE(memory_report_data(two_core_plan("a"), "mlp", nlohmann::json::array())["suggestions"].is_null());
  const nlohmann::json some = {{{"precision", "mixed_bfloat16"}, {"peak", 123}}};
  const nlohmann::json d = memory_report_data(two_core_plan("a"), "mlp", some);
  EXPECT_EQ(d["suggestions"], some);
  EXPECT_EQ(nlohmann::json::parse(data_block(memory_report_html(d)))["suggestions"], some);
}

}  // namespace
}  // namespace keel::cli
