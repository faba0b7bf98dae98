/* bench_mem: this machine's memory floors for the non-GEMM traffic of one fp32 training step
 * of a model with P parameters, measured with plain streaming loops (no engine kernel):
 *   optimizer  AdamW's traffic: read p, g, m, v and write p, m, v (28 B a parameter), here as
 *              adds, so the loop is bound by memory, not arithmetic;
 *   read       one pass reading g (4 B a parameter): what the gradient norm must read before
 *              the update when it is not fused into the backward;
 *   zero       one pass writing zeros over g with streaming stores (4 B a parameter): zero_grad;
 *   copy1      g copied into m by ONE thread (streaming stores, as glibc's memcpy makes them for
 *              the engine's large copies): the rate at which one core moves a collective's
 *              bytes on the local communicator, where every rank's comm thread copies.
 * Each is the median of --reps timed passes after one untimed pass, on --threads OpenMP threads
 * (static split). Prints a table and one machine-readable line:
 *   floor params=<P> threads=<T> optimizer_ms=<x> read_ms=<y> zero_ms=<z> copy1_ms=<c>
 * bench_all.sh turns it into a bound on the step's % of the GEMM ceiling. Not a test.
 * Usage: bench_mem [--threads N] [--params P] [--reps R] */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "bench_timing.h"

#define MAX_REPS 15

typedef struct {
  float *p, *g, *m, *v;
  size_t n;
} bufs;

static volatile uint64_t sink;

static void pass_optimizer(bufs *b) {
  float *restrict p = b->p, *restrict m = b->m, *restrict v = b->v;
  const float *restrict g = b->g;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < b->n; i++) {
    m[i] += g[i];
    v[i] += g[i];
    p[i] += m[i] - v[i];
  }
}

static void pass_read(bufs *b) {
  const uint32_t *u = (const uint32_t *)b->g;
  uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
  for (size_t i = 0; i < b->n; i++) s += u[i];
  sink = s; /* keeps the read pass's sum alive */
}

static void pass_zero(bufs *b) {
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const size_t per = (b->n / (size_t)nt) & ~(size_t)15;
    const size_t i0 = per * (size_t)t, i1 = t == nt - 1 ? b->n : i0 + per;
#if defined(__AVX2__)
    size_t i = i0;
    for (; i < i1 && ((uintptr_t)(b->g + i) & 31); i++) b->g[i] = 0.0f;
    for (; i + 8 <= i1; i += 8) _mm256_stream_ps(b->g + i, _mm256_setzero_ps());
    for (; i < i1; i++) b->g[i] = 0.0f;
    _mm_sfence();
#else
    memset(b->g + i0, 0, (i1 - i0) * sizeof *b->g);
#endif
  }
}

static void pass_copy1(bufs *b) {
#if defined(__AVX2__)
  size_t i = 0;
  for (; i < b->n && ((uintptr_t)(b->m + i) & 31); i++) b->m[i] = b->g[i];
  for (; i + 8 <= b->n; i += 8) _mm256_stream_ps(b->m + i, _mm256_loadu_ps(b->g + i));
  for (; i < b->n; i++) b->m[i] = b->g[i];
  _mm_sfence();
#else
  memcpy(b->m, b->g, b->n * sizeof *b->g);
#endif
}

/* Median milliseconds of `reps` passes, after one untimed pass. */
static double time_pass(void (*f)(bufs *), bufs *b, int reps) {
  double t[MAX_REPS];
  f(b);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    f(b);
    t[r] = (now_s() - t0) * 1e3;
  }
  return median_of(t, reps);
}

static int usage(const char *bad) {
  fprintf(stderr, "bench_mem: bad argument '%s' (usage: bench_mem [--threads N >= 1] "
                  "[--params P >= 1024] [--reps 1..%d])\n", bad, MAX_REPS);
  return 2;
}

int main(int argc, char **argv) {
  int threads = 2, reps = 5;
  long long params = 124439808; /* gpt2-124m */
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (i + 1 >= argc) return usage(argv[i]);
    long long x = strtoll(argv[i + 1], &end, 10);
    if (!end || *end || end == argv[i + 1]) return usage(argv[i + 1]);
    if (!strcmp(argv[i], "--threads") && x >= 1 && x <= 1024) threads = (int)x;
    else if (!strcmp(argv[i], "--params") && x >= 1024 && x <= (1LL << 36)) params = x;
    else if (!strcmp(argv[i], "--reps") && x >= 1 && x <= MAX_REPS) reps = (int)x;
    else return usage(argv[i]);
    i++;
  }
  omp_set_num_threads(threads);
  bufs b = {.n = (size_t)params};
  const size_t bytes = b.n * sizeof(float);
  b.p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  b.g = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  b.m = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  b.v = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!b.p || !b.g || !b.m || !b.v) {
    fprintf(stderr, "bench_mem: out of memory for 4 x %zu bytes\n", bytes);
    return 1;
  }
#pragma omp parallel for schedule(static) /* first touch on the threads that stream them */
  for (size_t i = 0; i < b.n; i++) b.p[i] = b.g[i] = b.m[i] = b.v[i] = 1.0f;
  const double opt = time_pass(pass_optimizer, &b, reps);
  const double rd = time_pass(pass_read, &b, reps);
  const double zr = time_pass(pass_zero, &b, reps);
  const double cp = time_pass(pass_copy1, &b, reps);
  const double gb = (double)bytes / 1e9;
  printf("memory floors: %lld fp32 parameters, %d threads, median of %d passes (measured)\n",
         params, threads, reps);
  printf("%-10s %-36s %9s %9s\n", "pass", "traffic", "ms", "GB/s");
  printf("%-10s %-36s %9.2f %9.1f\n", "optimizer", "read p,g,m,v; write p,m,v (28 B/param)", opt,
         7 * gb / (opt * 1e-3));
  printf("%-10s %-36s %9.2f %9.1f\n", "read", "read g (4 B/param)", rd, gb / (rd * 1e-3));
  printf("%-10s %-36s %9.2f %9.1f\n", "zero", "stream zeros over g (4 B/param)", zr,
         gb / (zr * 1e-3));
  printf("%-10s %-36s %9.2f %9.1f\n", "copy1", "copy g to m, one thread (8 B/param)", cp,
         2 * gb / (cp * 1e-3));
  printf("floor params=%lld threads=%d optimizer_ms=%.3f read_ms=%.3f zero_ms=%.3f copy1_ms=%.3f\n",
         params, threads, opt, rd, zr, cp);
  free(b.p);
  free(b.g);
  free(b.m);
  free(b.v);
  return 0;
}
