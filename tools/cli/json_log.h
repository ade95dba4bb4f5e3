// `keel train|resume --log-format jsonl`: the run's progress as JSON Lines on stdout, for programs
// (field names are a contract; README "Machine-readable output"):
//
//   {"event": "epoch", "epoch": 0, "step": 468, "loss": 0.52, "accuracy": 0.82, ...}   after every epoch:
//        epoch 0-based (as Keras's logs and history.csv), the optimizer's step, and every value of
//        the epoch's logs (History): loss, accuracy, val_loss, val_accuracy, ...
//   {"event": "end", "outcome": "completed", "step": 936, "run_dir": "...", "checkpoint": "...",
//    "history": {"loss": [...], ...}, "exit_status": 0}                             once, last
//        outcome: completed | early_stopping | stopped (--stop-after-steps) | interrupted (a signal) |
//        nothing_to_do (a resume of a finished run) | failed (with "exit_status" != 0 and "message")
//
// While it lives, stdout carries these objects alone: everything else the run prints (the
// progress bar, the device line, notes) goes to stderr, whichever code prints it.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/model/model.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

class JsonlLogger : public Callback {
 public:
  // Moves stdout's file descriptor aside for the JSON lines and points descriptor 1 at stderr.
  JsonlLogger();
  ~JsonlLogger() override;  // puts stdout back
  JsonlLogger(const JsonlLogger&) = delete;
  JsonlLogger& operator=(const JsonlLogger&) = delete;

  void on_epoch_end(TrainingState& st, const Logs& logs) override;
  // The final object of a run that ended without an error.
  void end(const std::string& outcome, int64_t step, const std::string& run_dir, const std::string& checkpoint);
  // The final object of a run that failed with `error` (the message and status the command ends with).
  void fail(const std::string& verb, std::exception_ptr error);
  // The final object of a run that ended with exit status `status` != 0; nothing once one was written.
  void end_with_status(int status, const std::string& outcome, const std::string& message);

 private:
  void write(const nlohmann::json& object);

  std::FILE* out_ = nullptr;  // the original stdout
  nlohmann::json history_ = nlohmann::json::object();
  bool ended_ = false;
};

// `keel train|resume` under --log-format text|jsonl: with jsonl, a logger lives around `body` (so
// that stdout carries JSON lines alone) and writes the final object however the command ends; an
// error still ends the command as it would (its message on stderr, its exit status).
int with_log_format(const po::variables_map& vm, const std::string& verb, const std::function<int(JsonlLogger*)>& body);

}  // namespace keel::cli
