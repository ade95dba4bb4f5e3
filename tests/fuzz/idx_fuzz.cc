// Fuzzes read_idx (datasets/idx.h), plain and gzip'd. Contract under test: arbitrary bytes either
// parse into an array whose data holds exactly product(dims) bytes, or throw DataError; never a crash,
// a leak, another exception type, or memory that grows with what a lying header claims (the runner's
// -rss_limit_mb and -malloc_limit_mb catch the last).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "framework/data/data_error.h"
#include "datasets/idx.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static keel::fuzz::ScratchFile file("keel-idx-fuzz");
  const std::string& path = file.write(data, size);
  try {
    const keel::IdxArray a = keel::read_idx(path);
    uint64_t elements = 1;
    for (int64_t d : a.dims) {
      if (d < 0) {
        std::fprintf(stderr, "idx_fuzz: negative dim %lld\n", static_cast<long long>(d));
        std::abort();
      }
      elements *= static_cast<uint64_t>(d);
    }
    if (a.dims.empty() || a.data.size() != elements) {
      std::fprintf(stderr, "idx_fuzz: %zu dims, %zu data bytes, product(dims) = %llu\n", a.dims.size(),
                   a.data.size(), static_cast<unsigned long long>(elements));
      std::abort();
    }
  } catch (const keel::DataError&) {
    // The documented outcome for bad input.
  }
  return 0;
}
