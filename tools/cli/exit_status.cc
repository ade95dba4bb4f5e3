#include "tools/cli/exit_status.h"

#include <new>
#include <stdexcept>

#include <boost/program_options/errors.hpp>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/data/data_error.h"
#include "framework/device/ledger.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

int report_failure(const std::string& verb, std::exception_ptr error, std::ostream& err) {
  const std::string prefix = "keel " + verb + ": ";
  const char* report = "\nThis is a bug in keel, not in your command or files; please report it with the "
                       "command you ran.\n";
  auto user_error = [&](const std::exception& e) {
    err << prefix << e.what() << "\n";
    return kExitUsage;
  };
  try {
    std::rethrow_exception(error);
  } catch (const ResourceExhausted& e) {
    err << prefix << e.what() << "\n";
    return kExitExhausted;
  } catch (const TrainingDiverged& e) {
    err << prefix << e.what() << "\n";
    return kExitDiverged;
  } catch (const boost::program_options::error& e) {
    err << prefix << e.what() << " (see `keel " << verb << " --help`)\n";
    return kExitUsage;
  } catch (const DataError& e) {
    return user_error(e);
  } catch (const CheckpointError& e) {
    return user_error(e);
  } catch (const UsageError& e) {
    return user_error(e);
  } catch (const std::invalid_argument& e) {
    return user_error(e);
  } catch (const std::bad_alloc&) {
    err << prefix << "internal error in keel: the host ran out of memory (a size keel should have refused "
                     "before allocating)" << report;
    return kExitInternal;
  } catch (const std::logic_error& e) {
    err << prefix << "internal error in keel (a broken invariant): " << e.what() << report;
    return kExitInternal;
  } catch (const std::exception& e) {
    err << prefix << "internal error in keel: " << e.what() << report;
    return kExitInternal;
  } catch (...) {
    err << prefix << "internal error in keel: an exception of unknown type" << report;
    return kExitInternal;
  }
}

}  // namespace keel::cli
