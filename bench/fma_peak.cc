// This machine's fp32 FMA peak, measured: the ceiling the ResNet benchmark's GFLOP/s are read against.
//
//   build/bench/fma_peak [--seconds 1] [--threads N]
//
// Each thread runs a loop of fused multiply-adds on 12 independent accumulators (enough to cover
// the FMA latency times the number of FMA pipes on current x86 cores), once with 512-bit vectors
// (AVX-512, 16 floats) and once with 256-bit vectors (AVX2, 8 floats), counting 2 FLOPs per lane per
// FMA. First one thread alone (per core), then one thread per hardware thread at once (all cores),
// each pinned to its own CPU. Prints one JSON line; peak_* is the better of the two vector widths.
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Written at the end so the accumulators are live and the loop cannot be removed.
std::atomic<float> sink{0.0f};

constexpr int64_t kInner = 1000;  // FMAs per accumulator between clock reads

#if defined(__AVX512F__)
// Runs FMAs for about `seconds`; returns the FLOPs done and the time taken.
std::pair<double, double> fma_loop_avx512(double seconds) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  int64_t outer = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int64_t k = 0; k < kInner; ++k) {
      acc[0] = _mm512_fmadd_ps(acc[0], a, b);
      acc[1] = _mm512_fmadd_ps(acc[1], a, b);
      acc[2] = _mm512_fmadd_ps(acc[2], a, b);
      acc[3] = _mm512_fmadd_ps(acc[3], a, b);
      acc[4] = _mm512_fmadd_ps(acc[4], a, b);
      acc[5] = _mm512_fmadd_ps(acc[5], a, b);
      acc[6] = _mm512_fmadd_ps(acc[6], a, b);
      acc[7] = _mm512_fmadd_ps(acc[7], a, b);
      acc[8] = _mm512_fmadd_ps(acc[8], a, b);
      acc[9] = _mm512_fmadd_ps(acc[9], a, b);
      acc[10] = _mm512_fmadd_ps(acc[10], a, b);
      acc[11] = _mm512_fmadd_ps(acc[11], a, b);
    }
    ++outer;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  __m512 total = acc[0];
  for (int i = 1; i < 12; ++i) total = _mm512_add_ps(total, acc[i]);
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12's header warns -Wuninitialized
  _mm512_store_ps(lanes, total);
  float s = 0;
  for (float v : lanes) s += v;
  sink.store(sink.load() + s);
  return {static_cast<double>(outer) * kInner * 12 * 16 * 2, elapsed};
}
#endif

std::pair<double, double> fma_loop_avx2(double seconds) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  int64_t outer = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int64_t k = 0; k < kInner; ++k) {
      acc[0] = _mm256_fmadd_ps(acc[0], a, b);
      acc[1] = _mm256_fmadd_ps(acc[1], a, b);
      acc[2] = _mm256_fmadd_ps(acc[2], a, b);
      acc[3] = _mm256_fmadd_ps(acc[3], a, b);
      acc[4] = _mm256_fmadd_ps(acc[4], a, b);
      acc[5] = _mm256_fmadd_ps(acc[5], a, b);
      acc[6] = _mm256_fmadd_ps(acc[6], a, b);
      acc[7] = _mm256_fmadd_ps(acc[7], a, b);
      acc[8] = _mm256_fmadd_ps(acc[8], a, b);
      acc[9] = _mm256_fmadd_ps(acc[9], a, b);
      acc[10] = _mm256_fmadd_ps(acc[10], a, b);
      acc[11] = _mm256_fmadd_ps(acc[11], a, b);
    }
    ++outer;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  __m256 total = acc[0];
  for (int i = 1; i < 12; ++i) total = _mm256_add_ps(total, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  float s = 0;
  for (float v : lanes) s += v;
  sink.store(sink.load() + s);
  return {static_cast<double>(outer) * kInner * 12 * 8 * 2, elapsed};
}

using Loop = std::pair<double, double> (*)(double);

void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: unpinned still measures
}

// GFLOP/s summed over `threads` threads running `loop` at the same time, one per CPU.
double gflops(Loop loop, int threads, double seconds) {
  std::vector<std::pair<double, double>> results(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      pin_to_cpu(t);
      ++ready;
      while (ready.load() < threads) {
      }
      results[static_cast<size_t>(t)] = loop(seconds);
    });
  }
  for (std::thread& th : pool) th.join();
  double total = 0;
  for (const auto& [flops, elapsed] : results) total += flops / elapsed;
  return total * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  fma_loop_avx2(0.2);  // wake the core up to its sustained clock before measuring
  const double avx2_one = gflops(fma_loop_avx2, 1, seconds);
  const double avx2_all = gflops(fma_loop_avx2, threads, seconds);
#if defined(__AVX512F__)
  const double avx512_one = gflops(fma_loop_avx512, 1, seconds);
  const double avx512_all = gflops(fma_loop_avx512, threads, seconds);
#else
  const double avx512_one = 0, avx512_all = 0;
#endif
  std::printf("{\"threads\": %d, \"avx512_gflops_per_core\": %.2f, \"avx512_gflops_all_cores\": %.2f, "
              "\"avx2_gflops_per_core\": %.2f, \"avx2_gflops_all_cores\": %.2f, \"peak_gflops_per_core\": %.2f, "
              "\"peak_gflops_all_cores\": %.2f, \"sink\": %g}\n",
              threads, avx512_one, avx512_all, avx2_one, avx2_all, std::max(avx512_one, avx2_one),
              std::max(avx512_all, avx2_all), static_cast<double>(sink.load()));
  return 0;
}
