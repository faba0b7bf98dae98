/* Which CBLAS runs and how fast: description, thread count, kernel override hint for CPUs the
 * library misdetects (Debian's OpenBLAS 0.3.21 takes Emerald Rapids for Prescott, BLIS 0.9
 * picks its AVX2 kernels), and a short sgemm ceiling measurement. No op math here. */
#include "blas.h"
#include "ops.h"

#include <omp.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#if defined(FB_BLAS_BLIS)
#if __has_include(<blis/blis.h>)
#include <blis/blis.h>
#else
#include <blis.h>
#endif
#endif

#if !defined(FB_BLAS_BLIS)
static int cpu_has_avx512f(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}
#endif

#if defined(FB_BLAS_BLIS)
const char *fb_blas_describe(void) {
  static char buf[160];
  snprintf(buf, sizeof buf, "BLIS %s %s, %d threads, gemm panels for %d cpus",
           bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()),
           omp_get_max_threads(), fb_ops_gemm_split_procs());
  return buf;
}

void fb_blas_set_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  bli_thread_set_num_threads(n);
}

const char *fb_blas_kernel_hint(void) {
  /* BLIS aborts on an override naming an architecture it was not built with, and Debian's
   * libblis4-openmp 0.9.0 ships no skx kernels (haswell is its best here): no override. */
  return NULL;
}
#else
char *openblas_get_config(void);
char *openblas_get_corename(void);

const char *fb_blas_describe(void) {
  static char buf[160];
  /* config reads "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."; keep name and version */
  char name[32] = "OpenBLAS", ver[32] = "?";
  const char *cfg = openblas_get_config();
  if (cfg) sscanf(cfg, "%31s %31s", name, ver);
  snprintf(buf, sizeof buf, "%s %s %s, %d threads, gemm panels for %d cpus", name, ver,
           openblas_get_corename(), omp_get_max_threads(), fb_ops_gemm_split_procs());
  return buf;
}

void fb_blas_set_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

const char *fb_blas_kernel_hint(void) {
  if (getenv("OPENBLAS_CORETYPE") || !cpu_has_avx512f()) return NULL;
  static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
  const char *core = openblas_get_corename();
  for (size_t i = 0; core && i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
    if (!strcasecmp(core, avx512_cores[i])) return NULL;
  return "OPENBLAS_CORETYPE=SkylakeX";
}
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double fb_blas_measure_peak(int threads, double seconds_budget) {
  /* The ceiling is what the engine's own matrix product (fb_gemm_f32: fixed panels, one BLAS
   * call each) reaches on a large square product: the best rate any step GEMM can hope for.
   * Measured once per process and thread count (compare and the test suites run many). */
  enum { M = 2048, N = 2048, K = 2048, MAXRUNS = 9, NCACHE = 64 };
  static _Atomic double cache[NCACHE];
  if (threads > 0 && threads < NCACHE && cache[threads] > 0) return cache[threads];
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
  float *c = malloc(sizeof(float) * M * N);
  double gflops = 0;
  if (!a || !b || !c) goto out;
  for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)((i * 7 + 3) % 13) * 0.01f;
  for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (float)((i * 5 + 1) % 11) * 0.01f;
  int saved = omp_get_max_threads();
  fb_blas_set_threads(threads);
  double t[MAXRUNS];
  int n = 0;
  double t_start = now_s();
  fb_gemm_f32(CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
  while (n < MAXRUNS && (n < 3 || now_s() - t_start < seconds_budget)) {
    double t0 = now_s();
    fb_gemm_f32(CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    t[n++] = now_s() - t0;
  }
  fb_blas_set_threads(saved);
  qsort(t, (size_t)n, sizeof t[0], cmp_double);
  gflops = 2.0 * M * N * K / t[0] * 1e-9; /* the best run: a ceiling, not a typical rate */
  if (threads > 0 && threads < NCACHE) cache[threads] = gflops;
out:
  free(a);
  free(b);
  free(c);
  return gflops;
}
