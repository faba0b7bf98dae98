/* The measured fp32 FMA peak of this CPU (ops.h: fb_fma_peak): every thread runs chains of
 * independent FMAs kept in registers (12 chains of 8 or 16 lanes: more than FMA latency x
 * units on current x86 cores) and rates its FLOPs by its own CPU time, so a core shared with
 * other processes does not lower the figure; the rates are summed, best of `reps`. AVX-512
 * where the CPU has it, else AVX2. Used by `calibrate` and bench/bench_gemm; not by runs. */
#include "ops.h"

#include <immintrin.h>
#include <stdbool.h>
#include <time.h>

static volatile float fma_sink;

__attribute__((target("avx512f"))) static double fma_loop_avx512(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, acc[i]);
  fma_sink = _mm512_reduce_add_ps(s);
  return (double)iters * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  fma_sink = out[0] + out[7];
  return (double)iters * 12 * 8 * 2;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double fb_fma_peak(int threads, long iters, int reps) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  double best = 0;
  for (int r = 0; r < reps; r++) {
    double rate = 0;
#pragma omp parallel num_threads(threads) reduction(+ : rate)
    {
      double t0 = thread_cpu_s();
      double flops = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
      double dt = thread_cpu_s() - t0;
      rate += dt > 0 ? flops / dt : 0;
    }
    best = rate > best ? rate : best;
  }
  return best;
}
