// The verbs of the `keel` binary. Each takes its arguments (after the verb) and returns an exit status.
#pragma once

#include <string>
#include <vector>

namespace keel::cli {

int train_command(const std::vector<std::string>& args);
int resume_command(const std::vector<std::string>& args);
int evaluate_command(const std::vector<std::string>& args);
int memory_command(const std::vector<std::string>& args);
int summary_command(const std::vector<std::string>& args);
int models_command(const std::vector<std::string>& args);
int data_command(const std::vector<std::string>& args);
int predict_command(const std::vector<std::string>& args);

}  // namespace keel::cli
