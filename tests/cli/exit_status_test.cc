// The exit status contract of the `keel` binary by kind of error (tools/cli/exit_status.h): user
// mistakes end in 2, HBM exhaustion in 3, a diverged training in 4, keel's own broken invariants in 70
// with a request to report.
#include "tools/cli/exit_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>
#include <sstream>
#include <stdexcept>

#include <boost/program_options/errors.hpp>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/data/data_error.h"
#include "framework/device/ledger.h"
#include "tools/cli/run_config.h"

namespace keel::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

template <class E>
std::pair<int, std::string> outcome(E error) {
  std::ostringstream err;
  const int status = report_failure("train", std::make_exception_ptr(error), err);
  return {status, err.str()};
}

TEST(ExitStatusTest, UserMistakesAreExit2WithTheirOwnMessage) {
  for (const auto& [status, message] :
       {outcome(UsageError("--epochs must be positive")), outcome(DataError("bad.idx: truncated")),
        outcome(CheckpointError("ckpt-3.h5: not keel's")), outcome(std::invalid_argument("--classes 0")),
        outcome(boost::program_options::unknown_option("--epoch"))}) {
    EXPECT_EQ(status, 2) << message;
    EXPECT_THAT(message, HasSubstr("keel train: "));
    EXPECT_THAT(message, Not(HasSubstr("internal error"))) << message;
  }
}

TEST(ExitStatusTest, BrokenInvariantsAndUnknownFailuresAreExit70AndAskForAReport) {
  for (const auto& [status, message] : {outcome(std::logic_error("tape: gradient of a freed tensor")),
                                        outcome(std::out_of_range("vector::at")), outcome(std::runtime_error("?")),
                                        outcome(std::bad_alloc()), outcome(42)}) {
    EXPECT_EQ(status, 70) << message;
    EXPECT_THAT(message, HasSubstr("internal error in keel"));
    EXPECT_THAT(message, HasSubstr("please report"));
  }
}

TEST(ExitStatusTest, HbmExhaustionIsExit3WithItsReport) {
  const auto [status, message] = outcome(ResourceExhausted(1, 64, "core 1: 64 B requested for activation:x"));
  EXPECT_EQ(status, 3);
  EXPECT_THAT(message, HasSubstr("core 1"));
}

TEST(ExitStatusTest, DivergedTrainingIsExit4WithItsOneLineMessage) {
  const auto [status, message] = outcome(TrainingDiverged("training diverged at step 3: the loss is nan"));
  EXPECT_EQ(status, 4);
  EXPECT_EQ(message, "keel train: training diverged at step 3: the loss is nan\n");
}

}  // namespace
}  // namespace keel::cli
