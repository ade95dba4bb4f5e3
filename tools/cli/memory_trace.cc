#include "tools/cli/memory_trace.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "framework/core/limits.h"
#include "tools/cli/run_config.h"

namespace keel::cli {
namespace {

// Core c is process c + 1 and its allocations thread the same id: Perfetto reads pid/tid 0 as the
// idle process, and one tid shared by several processes as a thread that moved between them.
int pid_of(int core) { return core + 1; }

nlohmann::json metadata(const char* name, int pid, const nlohmann::json& args) {
  return {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", pid}, {"args", args}};
}

nlohmann::json counter(const std::string& name, int pid, int64_t ts, int64_t bytes) {
  return {{"name", name}, {"ph", "C"}, {"pid", pid}, {"ts", ts}, {"args", {{"bytes", bytes}}}};
}

// "+401408 B dense/kernel", "-16384 B activation:dense_1", "retag 401408 B gradient:dense/kernel".
std::string instant_name(const LedgerEvent& e) {
  const std::string bytes = std::to_string(e.bytes) + " B ";
  switch (e.kind) {
    case LedgerEventKind::charge: return "+" + bytes + e.owner;
    case LedgerEventKind::release: return "-" + bytes + e.owner;
    case LedgerEventKind::retag: return "retag " + bytes + e.owner;
    case LedgerEventKind::mark: break;
  }
  return e.owner;
}

nlohmann::json instant(const LedgerEvent& e, int pid, int64_t ts) {
  if (e.kind == LedgerEventKind::mark) {
    return {{"name", e.owner}, {"ph", "i"}, {"s", "p"}, {"pid", pid}, {"tid", pid}, {"ts", ts}, {"cat", "phase"}};
  }
  nlohmann::json args = {{"event", ledger_event_kind_name(e.kind)},
                         {"owner", e.owner},
                         {"bytes", e.bytes},
                         {"category", category_name(e.category)},
                         {"shape", shape_string(e.shape)},
                         {"in_use_bytes", e.total}};
  if (e.kind == LedgerEventKind::retag) args["from_category"] = category_name(e.from_category);
  return {{"name", instant_name(e)}, {"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", pid},
          {"ts", ts}, {"cat", category_name(e.category)}, {"args", args}};
}

void append_core(nlohmann::json& out, int core, const std::string& label, const std::vector<LedgerEvent>& events) {
  const int pid = pid_of(core);
  out.push_back(metadata("process_name", pid, {{"name", label}}));
  out.push_back(metadata("process_sort_index", pid, {{"sort_index", core}}));
  out.push_back(metadata("thread_name", pid, {{"name", "allocations"}}));
  std::array<int64_t, kNumCategories> shown{};
  int64_t shown_total = 0;
  for (int k = 0; k < kNumCategories; ++k) out.push_back(counter(category_name(static_cast<Category>(k)), pid, 0, 0));
  out.push_back(counter("total", pid, 0, 0));
  for (size_t i = 0; i < events.size(); ++i) {
    const LedgerEvent& e = events[i];
    const int64_t ts = static_cast<int64_t>(i) + 1;
    out.push_back(instant(e, pid, ts));
    for (size_t k = 0; k < shown.size(); ++k) {
      if (e.current[k] == shown[k]) continue;
      shown[k] = e.current[k];
      out.push_back(counter(category_name(static_cast<Category>(k)), pid, ts, shown[k]));
    }
    if (e.total != shown_total) {
      shown_total = e.total;
      out.push_back(counter("total", pid, ts, shown_total));
    }
  }
}

}  // namespace

nlohmann::json memory_trace(const MemoryPlan& plan, const std::string& model) {
  nlohmann::json events = nlohmann::json::array();
  const std::string budget = plan.device.has_budget() ? format_bytes(plan.device.hbm_bytes_per_core) + " HBM" : "no budget";
  for (size_t c = 0; c < plan.timeline.size(); ++c) {
    const std::string label = "core " + std::to_string(c) + " (" + plan.device.name + ", " + budget + ")";
    append_core(events, static_cast<int>(c), label, plan.timeline[c]);
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"model", model},
            {"device", plan.device.name},
            {"cores", plan.device.cores},
            {"hbm_bytes_per_core", plan.device.hbm_bytes_per_core},
            {"batch_per_core", plan.batch_per_core},
            {"fits", plan.fits},
            {"position_unit", "one ledger event per microsecond of ts; not a duration"}}}};
}

void check_output_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (path.empty() || !fs::is_directory(dir, ec)) {
    throw UsageError(flag + " " + quote_untrusted(path) + ": no such directory; give a file in an existing directory");
  }
  if (fs::is_directory(p, ec)) throw UsageError(flag + " " + quote_untrusted(path) + " is a directory; give a file name");
}

void write_output_file(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (f) f.close();
  if (!f) {
    throw UsageError(flag + ": cannot write " + quote_untrusted(path) + " (" + std::strerror(errno) +
                     "); give a writable file");
  }
}

}  // namespace keel::cli
