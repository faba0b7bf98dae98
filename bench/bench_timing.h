/* Timing helpers the benchmarks share: a monotonic clock in seconds and the comparison qsort
 * needs to take a median. Header-only (each bench_*.c is its own executable); no state. */
#ifndef FB_BENCH_TIMING_H
#define FB_BENCH_TIMING_H
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
#endif
