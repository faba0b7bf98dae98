/* Timing helpers the benchmarks share: a monotonic clock in seconds and the median of a set of
 * timings. Header-only (each bench_*.c is its own executable); no state. */
#ifndef FB_BENCH_TIMING_H
#define FB_BENCH_TIMING_H
#include <stdlib.h>
#include <time.h>

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of t[0, n) (the upper one for even n); sorts t in place. */
static inline double median_of(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return t[n / 2];
}
#endif
