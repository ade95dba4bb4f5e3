// How many hardware threads this process may use: all of the machine's, or under mpirun its share,
// hardware_concurrency() divided by the processes mpirun started on this machine
// (OMPI_COMM_WORLD_LOCAL_SIZE), so that P processes on one machine do not each start one thread per
// core. What AUTOTUNE, the strategy's compute slots and the CLI's parallel loops are sized by.
#pragma once

namespace keel {

// At least 1.
int host_threads();

}  // namespace keel
