// Fuzzes load_checkpoint (framework/checkpoint/checkpoint.h) on raw bytes: the input is the whole
// checkpoint file. Contract: the file loads or throws CheckpointError, never anything else, and a
// throwing load leaves the model as it was (CheckpointFixture::load_and_check).
//
// Run in CI since checkpoint format 2: keel's files have no HDF5 global heap (strings are fixed-
// length) and their metadata is under HDF5's own checksums (1.8 object format), so mutated bytes are
// refused by libhdf5 before it decodes them. Before, with variable-length strings, libhdf5 (1.10.8)
// hung within seconds in an endless loop decoding a damaged global heap
// (H5HG__cache_heap_deserialize) and crashed in H5HG_read. It still leaks on its error paths
// (H5C_protect / object-header decode): run_fuzzers.sh suppresses leaks allocated inside libhdf5
// only (tests/fuzz/lsan_libhdf5.supp). checkpoint_fuzz covers keel's checkpoint logic with valid
// HDF5 files of hostile content.
//
// Setting KEEL_FUZZ_WRITE_SEED=<path> writes a valid checkpoint of the fixture's model to <path> and
// exits; that is how corpus/checkpoint_bytes/mlp.h5 was made.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  keel::fuzz::CheckpointFixture& f = keel::fuzz::CheckpointFixture::get();
  if (const char* seed = std::getenv("KEEL_FUZZ_WRITE_SEED")) {
    f.save(seed);
    std::fprintf(stderr, "checkpoint_bytes_fuzz: wrote %s\n", seed);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static keel::fuzz::ScratchFile file("keel-checkpoint-bytes-fuzz");
  keel::fuzz::CheckpointFixture::get().load_and_check(file.write(data, size));
  return 0;
}
