#include "tools/cli/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace keel::cli {
namespace {

std::string category(int k) { return category_name(static_cast<Category>(k)); }

nlohmann::json device_json(const DeviceSpec& device, int64_t batch_per_core) {
  return {{"device", device.name},
          {"cores", device.cores},
          {"hbm_bytes_per_core", device.hbm_bytes_per_core},
          {"hosts", device.hosts},
          {"cores_per_host", device.cores_per_host()},
          {"batch_per_core", batch_per_core}};
}

// Per core: each category's high-water mark and that of their sum, as the ledger counted them.
nlohmann::json peaks_json(const Ledger& ledger) {
  nlohmann::json per_core = nlohmann::json::array();
  for (int c = 0; c < ledger.num_cores(); ++c) {
    nlohmann::json core = {{"core", c}};
    for (int k = 0; k < kNumCategories; ++k) core[category(k)] = ledger.core(c).stat(static_cast<Category>(k)).peak;
    core["peak"] = ledger.core(c).total().peak;
    per_core.push_back(core);
  }
  return per_core;
}

int64_t field(const nlohmann::json& core, const std::string& name) {
  return core.contains(name) && core[name].is_number_integer() ? core[name].get<int64_t>() : 0;
}

}  // namespace

nlohmann::json per_host_json(const DeviceSpec& device, const nlohmann::json& per_core) {
  std::vector<std::string> sums;
  for (int k = 0; k < kNumCategories; ++k) sums.push_back(category(k));
  for (const char* name : {"peak", "sent_bytes", "received_bytes"}) sums.emplace_back(name);
  nlohmann::json hosts = nlohmann::json::array();
  for (int h = 0; h < device.hosts; ++h) {
    nlohmann::json host = {{"host", h}, {"cores", nlohmann::json::array()},
                           {"hbm_bytes", device.hbm_bytes_per_core * device.cores_per_host()}};
    for (const std::string& name : sums) host[name] = int64_t{0};
    for (int c = device.first_core_of(h); c < device.first_core_of(h) + device.cores_per_host(); ++c) {
      host["cores"].push_back(c);
      if (static_cast<size_t>(c) >= per_core.size()) continue;
      for (const std::string& name : sums) host[name] = field(host, name) + field(per_core[static_cast<size_t>(c)], name);
    }
    hosts.push_back(host);
  }
  return hosts;
}

nlohmann::json plan_json(const MemoryPlan& plan) {
  nlohmann::json per_core = nlohmann::json::array();
  for (const CoreMemory& m : plan.per_core) {
    nlohmann::json c = {{"core", m.core}};
    for (int k = 0; k < kNumCategories; ++k) c[category(k)] = m.category_peak[static_cast<size_t>(k)];
    c["peak"] = m.peak;
    c["sent_bytes"] = m.sent_bytes;
    c["received_bytes"] = m.received_bytes;
    per_core.push_back(c);
  }
  nlohmann::json j = device_json(plan.device, plan.batch_per_core);
  j["shard"] = sharding_mode_name(plan.savers.shard);
  j["remat"] = remat_name(plan.savers.remat);
  j["precision"] = plan.savers.precision.name();
  j["layout"] = plan.savers.layout ? plan.savers.layout->specs() : std::vector<std::string>{};
  j["fits"] = plan.fits;
  j["max_batch_per_core"] = plan.max_batch_per_core ? nlohmann::json(*plan.max_batch_per_core) : nlohmann::json(nullptr);
  j["per_core"] = per_core;
  j["per_host"] = per_host_json(plan.device, per_core);
  return j;
}

nlohmann::json training_memory(const Ledger& ledger, const RunConfig& config, int64_t steps, const nlohmann::json& before) {
  nlohmann::json j = device_json(config.device, config.batch_per_core);
  j["shard"] = sharding_mode_name(config.shard);
  j["remat"] = remat_name(config.remat);
  j["precision"] = config.precision;
  j["layout"] = config.layout;
  nlohmann::json per_core = peaks_json(ledger);
  const bool resumed = before.is_object() && before.contains("per_core") && before["per_core"].is_array() &&
                       before["per_core"].size() == per_core.size();
  for (size_t c = 0; c < per_core.size(); ++c) {
    nlohmann::json& core = per_core[c];
    const TransferStat t = ledger.core(static_cast<int>(c)).transfers();
    core["host_to_core_bytes"] = t.host_to_core_bytes;
    core["core_to_host_bytes"] = t.core_to_host_bytes;
    core["sent_bytes"] = t.sent_bytes;
    core["received_bytes"] = t.received_bytes;
    if (!resumed) continue;
    const nlohmann::json& old = before["per_core"][c];
    for (int k = 0; k < kNumCategories; ++k) core[category(k)] = std::max(field(core, category(k)), field(old, category(k)));
    core["peak"] = std::max(field(core, "peak"), field(old, "peak"));
    for (const char* sum : {"host_to_core_bytes", "core_to_host_bytes", "sent_bytes", "received_bytes"}) {
      core[sum] = field(core, sum) + field(old, sum);
    }
  }
  j["steps"] = steps + (resumed ? field(before, "steps") : 0);
  j["per_core"] = per_core;
  return j;
}

nlohmann::json inference_memory(const Ledger& ledger, const RunConfig& config) {
  nlohmann::json j = device_json(config.device, config.batch_per_core);
  j["per_core"] = peaks_json(ledger);
  return j;
}

void print_footprint(const std::string& title, const nlohmann::json& memory) {
  std::printf("%s\n%-5s", title.c_str(), "core");
  for (int k = 0; k < kNumCategories; ++k) std::printf(" %12s", category(k).c_str());
  std::printf(" %12s\n", "peak");
  for (const nlohmann::json& core : memory["per_core"]) {
    std::printf("%-5lld", static_cast<long long>(field(core, "core")));
    for (int k = 0; k < kNumCategories; ++k) std::printf(" %12lld", static_cast<long long>(field(core, category(k))));
    std::printf(" %12lld\n", static_cast<long long>(field(core, "peak")));
  }
}

void print_plan_and_measurement(const nlohmann::json& plan, const nlohmann::json& measured) {
  std::printf("%-5s %-12s %14s %14s\n", "core", "category", "plan", "measured");
  for (size_t c = 0; c < plan["per_core"].size(); ++c) {
    const nlohmann::json& p = plan["per_core"][c];
    const nlohmann::json* m = c < measured["per_core"].size() ? &measured["per_core"][c] : nullptr;
    for (int k = 0; k <= kNumCategories; ++k) {
      const std::string name = k < kNumCategories ? category(k) : "peak";
      std::printf("%-5zu %-12s %14lld %14s%s\n", c, name.c_str(), static_cast<long long>(field(p, name)),
                  m ? std::to_string(field(*m, name)).c_str() : "-",
                  m && field(*m, name) != field(p, name) ? "  (differs)" : "");
    }
  }
}

bool peaks_equal(const nlohmann::json& plan, const nlohmann::json& measured) {
  if (!measured.is_object() || plan["per_core"].size() != measured["per_core"].size()) return false;
  for (size_t c = 0; c < plan["per_core"].size(); ++c) {
    for (int k = 0; k <= kNumCategories; ++k) {
      const std::string name = k < kNumCategories ? category(k) : "peak";
      if (field(plan["per_core"][c], name) != field(measured["per_core"][c], name)) return false;
    }
  }
  return true;
}

int64_t peak_per_core(const nlohmann::json& memory) {
  int64_t peak = 0;
  for (const nlohmann::json& core : memory["per_core"]) peak = std::max(peak, field(core, "peak"));
  return peak;
}

std::string dominant_category(const nlohmann::json& memory) {
  const nlohmann::json* top = nullptr;
  for (const nlohmann::json& core : memory["per_core"]) {
    if (!top || field(core, "peak") > field(*top, "peak")) top = &core;
  }
  if (!top) return "-";
  int best = 0;
  for (int k = 1; k < kNumCategories; ++k) {
    if (field(*top, category(k)) > field(*top, category(best))) best = k;
  }
  return category(best);
}

}  // namespace keel::cli
