// Subnormal floats flushed to zero while keel computes, as TensorFlow's CPU kernels run them
// (its executor and thread pools set flush-to-zero and denormals-are-zero; PyTorch keeps subnormals
// unless torch.set_flush_denormal(True)). Why it matters: an x86 core takes a microcode assist, about
// a hundred cycles, for each subnormal operand or result, and training makes them: Adam's first
// moment of a weight whose input is rarely non-zero (a Fashion-MNIST border pixel's) decays by 0.9 a
// step through the subnormal range. The seed MLP on `cpu` spent a third of its step in those assists
// inside Adam's update (before and after: README.md's device model, "Subnormal floats are zero").
//
// The mode is a thread's (on x86 the MXCSR register's FTZ and DAZ bits, on AArch64 FPCR's FZ bit); a
// fiber keeps its own (Boost.Context saves and restores MXCSR with the rest of a context), and a new
// fiber or thread starts with its creator's. keel sets it where its arithmetic runs: each replica's
// fiber, parallel_for's tasks (framework/core/thread_pool.h) whatever thread runs them, and
// ReplicatedStrategy::reduce, so that every split of a step over threads, fibers and processes
// computes under one mode and gives one result.
#pragma once

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace keel {

// Sets flush-to-zero and denormals-are-zero on this thread for the guard's lifetime, then puts back
// what was there. Nests. Where the CPU has no such mode (neither x86 nor AArch64), it does nothing.
class FlushSubnormals {
 public:
  // Writes the register only where the mode changes: inside a replica's fiber, already flushing,
  // a guard costs one read.
  FlushSubnormals() : saved_(read()) {
    if ((saved_ & kBits) != kBits) write(saved_ | kBits);
  }
  ~FlushSubnormals() {
    if ((saved_ & kBits) != kBits) write(saved_);
  }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

  // Whether this CPU has such a mode (x86, AArch64), and whether this thread flushes subnormals now
  // (tests; false where there is no such mode).
  static constexpr bool available() { return kBits != 0; }
  static bool active() { return available() && (read() & kBits) == kBits; }

 private:
#if defined(__SSE__) || defined(__x86_64__)
  using Word = unsigned int;
  static constexpr Word kBits = 0x8040;  // MXCSR: FTZ (bit 15) and DAZ (bit 6)
  static Word read() { return _mm_getcsr(); }
  static void write(Word w) { _mm_setcsr(w); }
#elif defined(__aarch64__)
  using Word = unsigned long;
  static constexpr Word kBits = 1ul << 24;  // FPCR.FZ: subnormal inputs and results are zero
  static Word read() {
    Word w;
    asm volatile("mrs %0, fpcr" : "=r"(w));
    return w;
  }
  static void write(Word w) { asm volatile("msr fpcr, %0" : : "r"(w)); }
#else
  using Word = unsigned int;
  static constexpr Word kBits = 0;
  static Word read() { return 0; }
  static void write(Word) {}
#endif
  Word saved_;
};

}  // namespace keel
