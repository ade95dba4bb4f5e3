#include "tools/cli/json_log.h"

#include <unistd.h>

#include <optional>
#include <sstream>
#include <stdexcept>

#include "tools/cli/exit_status.h"
#include "framework/core/limits.h"

namespace keel::cli {

JsonlLogger::JsonlLogger() {
  std::fflush(stdout);
  const int fd = ::dup(STDOUT_FILENO);
  if (fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) throw std::runtime_error("--log-format jsonl: cannot set up stdout");
  out_ = ::fdopen(fd, "w");
  if (out_ == nullptr) throw std::runtime_error("--log-format jsonl: cannot set up stdout");
}

JsonlLogger::~JsonlLogger() {
  std::fflush(stdout);
  std::fflush(out_);
  ::dup2(::fileno(out_), STDOUT_FILENO);
  std::fclose(out_);
}

void JsonlLogger::write(const nlohmann::json& object) {
  // A non-finite value (a diverging loss) is written as null: JSON has no NaN.
  std::fprintf(out_, "%s\n", object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(out_);
}

void JsonlLogger::on_epoch_end(TrainingState& st, const Logs& logs) {
  nlohmann::json j{{"event", "epoch"}, {"epoch", st.epoch}, {"step", st.model->optimizer().iterations()}};
  for (const auto& [key, value] : logs) {
    j[key] = value;
    history_[key].push_back(value);
  }
  write(j);
}

void JsonlLogger::end(const std::string& outcome, int64_t step, const std::string& run_dir,
                      const std::string& checkpoint) {
  write({{"event", "end"}, {"outcome", outcome}, {"step", step}, {"run_dir", run_dir},
         {"checkpoint", checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(checkpoint)},
         {"history", history_}, {"exit_status", 0}});
  ended_ = true;
}

void JsonlLogger::fail(const std::string& verb, std::exception_ptr error) {
  if (ended_) return;
  std::ostringstream message;
  const int status = report_failure(verb, error, message);
  std::string text = message.str();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  end_with_status(status, "failed", text);
}

void JsonlLogger::end_with_status(int status, const std::string& outcome, const std::string& message) {
  if (ended_) return;
  write({{"event", "end"}, {"outcome", outcome}, {"history", history_}, {"exit_status", status}, {"message", message}});
  ended_ = true;
}

int with_log_format(const po::variables_map& vm, const std::string& verb, const std::function<int(JsonlLogger*)>& body) {
  const std::string format = vm["log-format"].as<std::string>();
  if (format != "text" && format != "jsonl") {
    throw UsageError("--log-format must be text or jsonl, got '" + quote_untrusted(format) + "'");
  }
  std::optional<JsonlLogger> log;
  if (format == "jsonl") log.emplace();
  try {
    const int status = body(log ? &*log : nullptr);
    if (log && status != kExitOk) log->end_with_status(status, "interrupted", "interrupted by a signal before the first step");
    return status;
  } catch (...) {
    if (log) log->fail(verb, std::current_exception());
    throw;
  }
}

}  // namespace keel::cli
